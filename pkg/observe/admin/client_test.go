package admin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testTimeout bounds each request of these tests.
const testTimeout = 5 * time.Second

// startOnSocket serves cfg on a unix socket of its own until the test ends
// and returns the socket.
func startOnSocket(t *testing.T, cfg Config) string {
	t.Helper()
	cfg.Socket = filepath.Join(t.TempDir(), "admin.sock")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return cfg.Socket
}

// TestClientProbe: the agent's answer when healthy or ready, an error
// carrying it when not, and "no agent answering" without an agent.
func TestClientProbe(t *testing.T) {
	sock := startOnSocket(t, Config{Ready: []Check{{Name: "cluster", Fn: func() error { return errors.New("not synced") }}}})
	c := NewClient(sock, "", testTimeout)
	ctx := context.Background()
	if body, err := c.Probe(ctx, "health"); err != nil || strings.TrimSpace(body) == "" {
		t.Errorf("health: %q, %v", body, err)
	}
	if body, err := c.Probe(ctx, "ready"); err == nil || !strings.HasPrefix(err.Error(), "ready: ") || !strings.Contains(err.Error(), "not synced") {
		t.Errorf("ready while a check fails: %q, %v; want an error naming it", body, err)
	}
	gone := NewClient(filepath.Join(t.TempDir(), "none.sock"), "", testTimeout)
	if _, err := gone.Probe(ctx, "health"); err == nil || !strings.HasPrefix(err.Error(), "no agent answering: ") {
		t.Errorf("no agent: %v", err)
	}
}

// TestClientProfile: a profile is copied as served; one the agent does not
// serve (no --pprof) is an error that says so.
func TestClientProfile(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	on := NewClient(startOnSocket(t, Config{Pprof: true}), "", testTimeout)
	if err := on.Profile(ctx, "/debug/pprof/goroutine?debug=1", &out); err != nil || !strings.Contains(out.String(), "goroutine profile:") {
		t.Errorf("goroutine profile: %v, %.80q", err, out.String())
	}
	off := NewClient(startOnSocket(t, Config{}), "", testTimeout)
	if err := off.Profile(ctx, "heap", io.Discard); err == nil || !strings.Contains(err.Error(), "/debug/pprof/heap: 404: is the agent running with --pprof?") {
		t.Errorf("pprof off: %v", err)
	}
}

// TestClientStatsNoAgent: no agent at the socket is an *AgentError with
// the innermost cause, wrapping the system's error.
func TestClientStatsNoAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := NewClient(sock, "", testTimeout).Stats(context.Background())
	var ae *AgentError
	if !errors.As(err, &ae) || ae.Where != sock || err.Error() != "no agent answering at "+sock+": no such file or directory" {
		t.Errorf("error %v, want an AgentError at %s", err, sock)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("error %v does not wrap ENOENT", err)
	}
}
