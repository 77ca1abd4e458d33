// Package admin serves the agent's HTTP admin endpoint: /health (the process
// is alive), /ready (it should receive traffic), /metrics (Prometheus) and
// /stats (a JSON document for `nodedns stats`). It owns no DNS logic; the
// agent hands it the checks and the stats source.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Check is one readiness condition: nil when satisfied.
type Check struct {
	Name string
	Fn   func() error
}

// Config configures the endpoint.
type Config struct {
	Addr    string
	Ready   []Check
	Stats   func() any   // the /stats document; nil: 404
	Metrics http.Handler // /metrics; nil: 404
	Logger  *slog.Logger
}

// Server is the admin HTTP server.
type Server struct {
	cfg  Config
	srv  *http.Server
	ln   net.Listener
	down func() bool
}

// New binds the admin address. notReady, when it returns true, turns /ready
// false whatever the checks say (the lameduck period).
func New(cfg Config, notReady func() bool) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("binding admin endpoint %s: %w", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, ln: ln, down: notReady}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/ready", s.ready)
	if cfg.Metrics != nil {
		mux.Handle("/metrics", cfg.Metrics)
	}
	if cfg.Stats != nil {
		mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			if err := enc.Encode(cfg.Stats()); err != nil {
				cfg.Logger.Debug("writing /stats", "component", "admin", "err", err)
			}
		})
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin endpoint: %w", err)
	}
	return nil
}

// Shutdown stops the server.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Ready runs every check; nil when all pass.
func (s *Server) Ready() error {
	if s.down != nil && s.down() {
		return errors.New("shutting down")
	}
	var errs []error
	for _, c := range s.cfg.Ready {
		if err := c.Fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	if err := s.Ready(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintln(w, "ready")
}
