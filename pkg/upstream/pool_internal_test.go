package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func poolQuery(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Id = 7
	return m
}

func answerFor(q *dns.Msg) *dns.Msg {
	r := new(dns.Msg)
	r.SetReply(q)
	rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.7")
	r.Answer = []dns.RR{rr}
	return r
}

// TestStreamPipelining: past the connection bound, queries share
// connections and are matched to replies that come back in any order.
func TestStreamPipelining(t *testing.T) {
	const n = 3 * maxStreamConns
	var conns atomic.Int32
	var mu sync.Mutex
	var held []func() // replies written once every query has arrived
	arrived := make(chan struct{}, n)
	srv := dnstest.StartRaw(t, nil, func(c net.Conn) {
		conns.Add(1)
		for {
			q, err := dnstest.ReadTCP(c)
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, func() { _ = dnstest.WriteTCP(c, answerFor(q)) })
			mu.Unlock()
			arrived <- struct{}{}
		}
	})
	p := newStreamPool(srv.Addr, nil, 0)
	defer p.close()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			name := fmt.Sprintf("q%d.example.", i)
			r, err := p.exchange(ctx, poolQuery(name))
			switch {
			case err != nil:
				errs <- err
			case r.Id != 7 || r.Question[0].Name != name:
				errs <- fmt.Errorf("%s: got the reply for %s (ID %d)", name, r.Question[0].Name, r.Id)
			}
		}()
	}
	for i := range n {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d queries arrived on %d connections", i, n, conns.Load())
		}
	}
	// Answer newest first: the reverse of arrival on every connection.
	mu.Lock()
	for i := len(held) - 1; i >= 0; i-- {
		held[i]()
	}
	mu.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := conns.Load(); c != maxStreamConns {
		t.Errorf("%d connections for %d concurrent queries; want the bound, %d", c, n, maxStreamConns)
	}
}

// TestStreamStaleRetry: a query sent on a connection that the server then
// closes without answering goes out once more on a fresh connection.
func TestStreamStaleRetry(t *testing.T) {
	var conns atomic.Int32
	srv := dnstest.StartRaw(t, nil, func(c net.Conn) {
		conns.Add(1)
		// Answer the first query of each connection; close on the second
		// (as a server that timed the idle connection out would, racing
		// the query).
		q, err := dnstest.ReadTCP(c)
		if err != nil {
			return
		}
		_ = dnstest.WriteTCP(c, answerFor(q))
		_, _ = dnstest.ReadTCP(c)
	})
	p := newStreamPool(srv.Addr, nil, 0)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := p.exchange(ctx, poolQuery(fmt.Sprintf("s%d.example.", i))); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
	}
	if c := conns.Load(); c != 3 {
		t.Errorf("%d connections, want 3 (each reused once, failed, replaced)", c)
	}
}

// TestStreamDeadConnection: a query that times out on a connection that
// has delivered nothing since closes it; one slow query among answered
// ones does not.
func TestStreamDeadConnection(t *testing.T) {
	var mu sync.Mutex
	silent := map[string]bool{"slow.example.": true}
	slowSeen := make(chan struct{}, 1)
	srv := dnstest.StartRaw(t, nil, func(c net.Conn) {
		for {
			q, err := dnstest.ReadTCP(c)
			if err != nil {
				return
			}
			if q.Question[0].Name == "slow.example." {
				select {
				case slowSeen <- struct{}{}:
				default:
				}
			}
			mu.Lock()
			quiet := silent[q.Question[0].Name] || silent["*"]
			mu.Unlock()
			if !quiet {
				_ = dnstest.WriteTCP(c, answerFor(q))
			}
		}
	})
	p := newStreamPool(srv.Addr, nil, 0)
	defer p.close()
	ask := func(name string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := p.exchange(ctx, poolQuery(name))
		return err
	}
	if err := ask("a.example.", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// The slow query and an answered one at once on one connection: the
	// connection is alive.
	done := make(chan error, 1)
	go func() { done <- ask("slow.example.", 300*time.Millisecond) }()
	// The slow query is out (the server has it) before the other is sent.
	select {
	case <-slowSeen:
	case err := <-done:
		t.Fatalf("the slow query ended before the server saw it: %v", err)
	}
	if err := ask("b.example.", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !isTimeout(err) {
		t.Fatalf("slow query: %v, want a timeout", err)
	}
	if p.open() == 0 {
		t.Error("a live connection was closed for one slow query")
	}
	// Now nothing comes back at all: the connection goes.
	mu.Lock()
	silent["*"] = true
	mu.Unlock()
	if err := ask("c.example.", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("silent server: %v, want a timeout", err)
	}
	if n := p.open(); n != 0 {
		t.Errorf("%d connections open after a dead one timed out; want 0", n)
	}
}

func TestStreamIdleExpiry(t *testing.T) {
	srv := dnstest.StartRaw(t, nil, func(c net.Conn) {
		for {
			q, err := dnstest.ReadTCP(c)
			if err != nil {
				return
			}
			_ = dnstest.WriteTCP(c, answerFor(q))
		}
	})
	p := newStreamPool(srv.Addr, nil, 0)
	defer p.close()
	now := time.Now()
	p.now = func() time.Time { return now }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.exchange(ctx, poolQuery("x.example.")); err != nil {
		t.Fatal(err)
	}
	p.expireIdle()
	if p.open() != 1 {
		t.Fatalf("%d open right after use, want 1", p.open())
	}
	now = now.Add(streamIdle)
	p.expireIdle()
	if p.open() != 0 {
		t.Errorf("%d open after %s idle, want 0", p.open(), streamIdle)
	}
	p.close()
	if _, err := p.exchange(ctx, poolQuery("y.example.")); err == nil {
		t.Error("exchange on a closed pool succeeded")
	}
}

// TestCABundleReload: a changed bundle is picked up on the next look
// after caCheckEvery; a broken one keeps the roots loaded before.
func TestCABundleReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	a, b := dnstest.NewCA(t), dnstest.NewCA(t)
	if err := os.WriteFile(file, a.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	bundle, err := newCABundle(file, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first := bundle.roots()
	// A kubelet-style update: a new file renamed over the old one.
	tmp := filepath.Join(dir, "new.pem")
	if err := os.WriteFile(tmp, b.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bundle.refresh(start)
	if bundle.roots() != first {
		t.Fatal("re-read before caCheckEvery passed")
	}
	bundle.refresh(start.Add(caCheckEvery + time.Second))
	second := bundle.roots()
	if second == first {
		t.Fatal("changed bundle not reloaded")
	}
	if err := os.WriteFile(file, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle.refresh(start.Add(3 * caCheckEvery))
	if bundle.roots() != second {
		t.Error("a broken bundle replaced the roots")
	}

	// New TLS connections verify against the roots of the moment.
	cfg := bundle.tlsConfigFunc("", netip.MustParseAddr("127.0.0.1"))()
	if cfg.ServerName != "127.0.0.1" || cfg.RootCAs != second || cfg.MinVersion == 0 {
		t.Errorf("TLS config: server name %q, roots %p (want %p)", cfg.ServerName, cfg.RootCAs, second)
	}
}
