// Package admin serves the agent's HTTP admin endpoint: /health (the process
// is alive and can recover by itself), /ready (it should receive traffic),
// /metrics (Prometheus) and /stats (a JSON document for `nodedns stats`),
// and, when asked, Go's /debug/pprof on the unix socket only. It owns no
// DNS logic; the agent hands it the checks and the stats source.
// Client is the other end (client.go), for the commands that read the
// endpoint from another process: `nodedns stats` (once or --watch),
// `probe` and `pprof`.
//
// /stats names the busiest client addresses and query names of the node's
// pods, so it is served only over the unix socket and on loopback
// addresses; an endpoint bound to another address (the node's IP, for
// Prometheus) serves metrics and probes there and answers 404 for /stats.
//
// The TCP address is bounded (limit.go): connections in total and per
// client address, header bytes, and the time a request may take to arrive
// and its reply to be written. The unix socket is not: only the pod itself
// reaches it, and the DaemonSet's probes use it, so no TCP client can
// starve them.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Check is one readiness condition: nil when satisfied.
type Check struct {
	Name string
	Fn   func() error
}

// Config configures the endpoint.
type Config struct {
	// Addr is the TCP address (ip:port); empty: none. It is bound with
	// SO_REUSEPORT so that the old and the new agent of a rolling update
	// can both hold it while they overlap.
	Addr string
	// Socket is a unix socket path served too; empty: none. Each agent pod
	// has its own, so probes through it always reach their own agent even
	// while two agents share the TCP port.
	Socket string
	// Health are the liveness conditions (/health): a failing one means
	// the process cannot recover by itself and should be restarted. Ready
	// are the readiness conditions (/ready): whether it should receive
	// traffic now.
	Health  []Check
	Ready   []Check
	Stats   func() any   // the /stats document; nil: 404
	Metrics http.Handler // /metrics; nil: 404
	// Pprof serves net/http/pprof's /debug/pprof/ on Socket, never on
	// Addr: profiles and goroutine dumps show query names and cost CPU, so
	// they are for whoever can reach the pod's own socket (kubectl exec),
	// not for the network. Requires Socket.
	Pprof bool
	// SocketOnly are more handlers served on Socket only, by path (the
	// agent's test hooks). Requires Socket.
	SocketOnly map[string]http.Handler
	Logger     *slog.Logger
}

// Server is the admin HTTP server.
type Server struct {
	cfg  Config
	srv  *http.Server
	lns  []net.Listener
	down func() bool
	// sock serves the unix socket when it offers more than the TCP
	// address (pprof), with its own handler and no write timeout: a CPU
	// profile streams for as many seconds as asked. nil: srv serves it.
	sock   *http.Server
	sockLn net.Listener
	// limit bounds the TCP address's connections; nil without one.
	limit *limitListener
}

// New binds the admin address. notReady, when it returns true, turns /ready
// false whatever the checks say (the lameduck period).
func New(cfg Config, notReady func() bool) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, down: notReady}
	if cfg.Addr != "" {
		lc := net.ListenConfig{Control: reusePort}
		ln, err := lc.Listen(context.Background(), "tcp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("binding admin endpoint %s: %w", cfg.Addr, err)
		}
		s.limit = newLimitListener(ln, maxConns, maxConnsPerSource, cfg.Logger)
		s.lns = append(s.lns, s.limit)
		if ap, err := netip.ParseAddrPort(cfg.Addr); err == nil && !ap.Addr().Unmap().IsLoopback() && cfg.Stats != nil {
			cfg.Logger.Warn("admin endpoint on a non-loopback address: it serves /metrics, /health and /ready there; /stats (top client addresses and query names) only on loopback and the admin socket",
				"component", "admin", "addr", cfg.Addr)
		}
	}
	if cfg.Socket != "" {
		// A stale socket of a previous run of this pod is ours to replace.
		if err := os.Remove(cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.closeAll()
			return nil, fmt.Errorf("removing stale admin socket %s: %w", cfg.Socket, err)
		}
		ln, err := net.Listen("unix", cfg.Socket)
		if err != nil {
			s.closeAll()
			return nil, fmt.Errorf("binding admin socket %s: %w", cfg.Socket, err)
		}
		s.lns = append(s.lns, ln)
	}
	if len(s.lns) == 0 {
		return nil, errors.New("admin endpoint: neither an address nor a socket")
	}
	if (cfg.Pprof || len(cfg.SocketOnly) > 0) && cfg.Socket == "" {
		s.closeAll()
		return nil, errors.New("admin endpoint: pprof and test hooks are served on the unix socket only, and none is configured")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if err := runChecks(cfg.Health); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/ready", s.ready)
	if cfg.Metrics != nil {
		mux.Handle("/metrics", cfg.Metrics)
	}
	if cfg.Stats != nil {
		mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
			if !private(r) {
				http.Error(w, "/stats (client addresses and query names) is served on loopback and the admin socket only", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			if err := enc.Encode(cfg.Stats()); err != nil {
				cfg.Logger.Debug("writing /stats", "component", "admin", "err", err)
			}
		})
	}
	s.srv = &http.Server{Handler: mux, MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
	if cfg.Pprof || len(cfg.SocketOnly) > 0 {
		debug := http.NewServeMux()
		debug.Handle("/", mux)
		if cfg.Pprof {
			debug.HandleFunc("/debug/pprof/", pprof.Index)
			debug.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
			debug.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			debug.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		for path, h := range cfg.SocketOnly {
			debug.Handle(path, h)
		}
		s.sock = &http.Server{Handler: debug, MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
		s.sockLn = s.lns[len(s.lns)-1] // the socket is bound last
	}
	return s, nil
}

// Addr is the first bound address.
func (s *Server) Addr() net.Addr { return s.lns[0].Addr() }

// ConnStats are the figures of the TCP address's connection bounds (zero
// without a TCP address).
func (s *Server) ConnStats() ConnStats {
	if s.limit == nil {
		return ConnStats{}
	}
	return s.limit.stats()
}

func (s *Server) closeAll() {
	for _, ln := range s.lns {
		_ = ln.Close()
	}
}

// Serve serves every listener until Shutdown.
func (s *Server) Serve() error {
	errs := make(chan error, len(s.lns))
	for _, ln := range s.lns {
		go func(ln net.Listener) {
			srv := s.srv
			if s.sock != nil && ln == s.sockLn {
				srv = s.sock
			}
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("admin endpoint %s: %w", ln.Addr(), err)
				return
			}
			errs <- nil
		}(ln)
	}
	var all []error
	for range s.lns {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// Shutdown stops the server.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if s.sock != nil {
		err = errors.Join(err, s.sock.Shutdown(ctx))
	}
	return err
}

// Ready runs every check; nil when all pass.
func (s *Server) Ready() error {
	if s.down != nil && s.down() {
		return errors.New("shutting down")
	}
	return runChecks(s.cfg.Ready)
}

// runChecks runs every check; nil when all pass, else one error naming
// each failing one.
func runChecks(checks []Check) error {
	var errs []error
	for _, c := range checks {
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

// private reports whether r came over the unix socket or to a loopback
// address: the only places /stats is served, since it names the pods'
// addresses and what they look up. The connection's own local address
// decides, so an endpoint bound to the wildcard address still serves
// /stats to a local client on 127.0.0.1, and never to one from the
// network.
func private(r *http.Request) bool {
	switch a := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.UnixAddr:
		return true
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap().IsLoopback()
	}
	return false
}

func reusePort(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return fmt.Errorf("controlling admin socket %s: %w", address, err)
	}
	if serr != nil {
		return fmt.Errorf("setting SO_REUSEPORT on admin socket %s: %w", address, serr)
	}
	return nil
}
