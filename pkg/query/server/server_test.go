package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestTCPPipelined(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}})
	c, err := net.Dial("tcp", s.TCPAddrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co := &dns.Conn{Conn: c}
	ids := map[uint16]bool{}
	for i := 0; i < 5; i++ {
		m := q(sprintf("n%d.example.", i), dns.TypeA)
		ids[m.Id] = true
		if err := co.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for i := 0; i < 5; i++ {
		r, err := co.ReadMsg()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !ids[r.Id] {
			t.Fatalf("unexpected id %d", r.Id)
		}
		delete(ids, r.Id)
	}
}

func TestTCPIdleTimeoutAndBound(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}, TCPIdleTimeout: 200 * time.Millisecond, MaxTCPConns: 2})
	addr := s.TCPAddrs()[0].String()
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// Let the acceptor take both before the third arrives.
	dnstest.WaitFor(t, 5*time.Second, "both connections to be accepted", func() bool { return s.Stats().TCPConns == 2 })
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	_ = third.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil {
		t.Fatal("third connection over the bound was not closed")
	}
	// Idle connections are cut after the idle timeout.
	_ = conns[0].SetReadDeadline(time.Now().Add(3 * time.Second))
	startIdle := time.Now()
	if _, err := conns[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("idle connection got data")
	}
	if d := time.Since(startIdle); d > 2*time.Second {
		t.Fatalf("idle connection closed after %s", d)
	}
}

// blocked answers every query (an empty NOERROR) once release is closed.
func blocked(release <-chan struct{}) *fakeResolver {
	return &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		m := new(dns.Msg)
		m.SetReply(q)
		return m, nil
	}}
}

func TestInflightBound(t *testing.T) {
	release := make(chan struct{})
	s, addr := start(t, Config{Handler: blocked(release), MaxInflight: 1})
	defer close(release)
	go func() {
		c := &dns.Client{Timeout: 3 * time.Second}
		_, _, _ = c.Exchange(q("slow.example.", dns.TypeA), addr)
	}()
	dnstest.WaitFor(t, 5*time.Second, "the slow query to be in flight", func() bool { return s.Stats().InFlight == 1 })
	startQ := time.Now()
	r := dnstest.Exchange(t, addr, "udp", q("second.example.", dns.TypeA))
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("over the bound: rcode %d, want SERVFAIL", r.Rcode)
	}
	if time.Since(startQ) > time.Second || s.Stats().Overloaded != 1 {
		t.Fatalf("over the bound not answered at once (%s, overloaded %d)", time.Since(startQ), s.Stats().Overloaded)
	}
}
