//go:build linux

package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// askTCPConns sends n queries to addr, each on a new TCP connection, and fails
// on any that is not answered (a reset connection included).
func askTCPConns(t *testing.T, addr string, n int) {
	t.Helper()
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	for i := range n {
		r, _, err := c.Exchange(q("handover.example.", dns.TypeA), addr)
		if err != nil {
			t.Fatalf("TCP query %d of %d: %v", i+1, n, err)
		}
		if r.Rcode != dns.RcodeSuccess {
			t.Fatalf("TCP query %d of %d: %s", i+1, n, dns.RcodeToString[r.Rcode])
		}
	}
}

// freeUDPAndTCP returns a loopback address whose port is free for both
// UDP and TCP (a Server binds both on one port).
func freeUDPAndTCP(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return addr
		}
	}
	t.Fatal("no loopback port free for both UDP and TCP in 20 tries")
	return ""
}

// TestDrainHandsTCPOver: once an agent hands its TCP listener over (the
// start of Drain), the kernel gives every new connection to the agent
// that joined its SO_REUSEPORT group after it — none is left in a queue
// that the close would reset — and the next agent to bind clears the
// program, so that the group shares connections by hash again.
func TestDrainHandsTCPOver(t *testing.T) {
	const n = 64
	oldRes, newRes, nextRes := &fakeResolver{}, &fakeResolver{}, &fakeResolver{}
	addr := freeUDPAndTCP(t)
	old, _ := startOn(t, addr, Config{Handler: oldRes})
	startOn(t, addr, Config{Handler: newRes})

	// Before: the kernel shares connections between the two by hash.
	askTCPConns(t, addr, n)
	if oldRes.calls.Load() == 0 || newRes.calls.Load() == 0 {
		t.Fatalf("before the handover: old agent answered %d, new %d of %d; want both some",
			oldRes.calls.Load(), newRes.calls.Load(), n)
	}

	if err := handOver(old.tcp[0]); err != nil {
		t.Fatal(err)
	}
	before := oldRes.calls.Load()
	askTCPConns(t, addr, n)
	if got := oldRes.calls.Load() - before; got != 0 {
		t.Fatalf("after the handover the old agent was given %d of %d new connections; want 0", got, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The program stays with the group ([new]); an agent joining it
	// clears it instead of taking every connection from the start.
	startOn(t, addr, Config{Handler: nextRes})
	newBefore := newRes.calls.Load()
	askTCPConns(t, addr, n)
	if nextRes.calls.Load() == 0 || newRes.calls.Load() == newBefore {
		t.Fatalf("after a third agent joined: it answered %d, the second %d of %d; want both some",
			nextRes.calls.Load(), newRes.calls.Load()-newBefore, n)
	}
}

// TestDrainAloneKeepsAccepting: an agent alone on its address (a plain
// stop, no successor) still accepts and answers TCP while it drains: the
// handover program names a socket the group does not have, and the
// kernel then picks by hash (this one).
func TestDrainAloneKeepsAccepting(t *testing.T) {
	res := &fakeResolver{}
	addr := freeUDPAndTCP(t)
	s, _ := startOn(t, addr, Config{Handler: res})
	if err := handOver(s.tcp[0]); err != nil {
		t.Fatal(err)
	}
	askTCPConns(t, addr, 8)
	if got := res.calls.Load(); got != 8 {
		t.Fatalf("answered %d of 8", got)
	}
}
