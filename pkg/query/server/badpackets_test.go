package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TCP clients that are slow, idle, too many or never read cannot hold the
// server.

func u16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// closedWithin reports whether the server closes c within d (reading and
// discarding whatever arrives).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// TestTCPSlowAndIdleClients: an idle connection and one that trickles a
// query a byte at a time (slowloris) are both cut after the idle timeout,
// which bounds a whole message, not each read.
func TestTCPSlowAndIdleClients(t *testing.T) {
	const idle = 300 * time.Millisecond
	s, _ := start(t, Config{Handler: &fakeResolver{}, TCPIdleTimeout: idle})
	addr := s.TCPAddrs()[0].String()

	idleConn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idleConn.Close()
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	msg := dnstest.Pack(q("slow.example.", dns.TypeA))
	frame := cat(u16(uint16(len(msg))), msg)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// One byte every 50 ms: the whole frame would take 1.5 s.
		for i := 0; i < len(frame)-1 && !stop.Load(); i++ {
			if _, err := slow.Write(frame[i : i+1]); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	// Generous bound (the timeout is 300 ms): the point is that they are
	// cut at all, long before the slow frame could complete.
	if !closedWithin(idleConn, 5*time.Second) {
		t.Fatal("idle connection not closed")
	}
	if !closedWithin(slow, 5*time.Second) {
		t.Fatal("slow (trickling) connection not closed")
	}
	dnstest.WaitFor(t, 5*time.Second, "no TCP connection open", func() bool { return s.Stats().TCPConns == 0 })
}

// TestTCPConnectionBound: past MaxTCPConns a new connection closes the one
// idle longest to make room; when every connection is its client's own in
// the middle of a message, it is closed at once (a client cannot refresh
// its stalled messages' hold by replacing them); when one closes, a new
// one is served again.
func TestTCPConnectionBound(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}, MaxTCPConns: 3, MaxClientTCPConns: -1})
	addr := s.TCPAddrs()[0].String()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		dnstest.WaitFor(t, 5*time.Second, "the connection to be accepted", func() bool { return s.Stats().TCPConns == i+1 })
	}
	// All three idle: a fourth closes the oldest and is served.
	dnstest.WaitFor(t, 5*time.Second, "three stalled connections", func() bool { return s.stalledTCP(tcpStallGrace) == 3 })
	r := dnstest.Exchange(t, addr, "tcp", q("fourth.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || s.Stats().TCPEvicted != 1 {
		t.Fatalf("fourth connection with three idle: %v, stats %+v", r, s.Stats())
	}
	if !closedWithin(open[0], 5*time.Second) {
		t.Fatal("the connection idle longest was not closed")
	}
	open[0].Close()
	dnstest.WaitFor(t, 5*time.Second, "two TCP connections open", func() bool { return s.Stats().TCPConns == 2 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	open[0] = c
	dnstest.WaitFor(t, 5*time.Second, "three TCP connections open", func() bool { return s.Stats().TCPConns == 3 })
	// None idle (each has begun a message, stalled): the next, from the
	// same address, is refused.
	for _, c := range open {
		if _, err := c.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	dnstest.WaitFor(t, 5*time.Second, "three stalled connections", func() bool { return s.stalledTCP(tcpStallGrace) == 3 })
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(over, 5*time.Second) {
		t.Fatal("connection over the bound was served")
	}
	over.Close()
	if st := s.Stats(); st.TCPConns != 3 || st.Overloaded == 0 {
		t.Fatalf("stats %+v: want 3 connections open and one refused", st)
	}
	open[0].Close()
	dnstest.WaitFor(t, 5*time.Second, "two TCP connections open", func() bool { return s.Stats().TCPConns == 2 })
	r = dnstest.Exchange(t, addr, "tcp", q("again.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after a slot freed: %v", r)
	}
}

// TestTCPNonReader: clients that pipeline queries with large answers and
// never read them fill their connections; meanwhile other clients, over
// TCP and UDP, are answered (NOERROR, not an overload SERVFAIL), and the
// non-readers are cut once a write has waited TCPWriteTimeout.
func TestTCPNonReader(t *testing.T) {
	big := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		if strings.HasPrefix(q.Question[0].Name, "big") {
			for i := 0; i < 60; i++ {
				m.Answer = append(m.Answer, dnstest.MustRRf(`%s 60 IN TXT "%s"`, q.Question[0].Name, strings.Repeat("b", 250)))
			}
		} else {
			m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
		}
		return m, nil
	}}
	// MaxInflight: three connections resolve at most 3 x 16 at once, but
	// would hold 3 x 17 slots (and starve everyone) if a blocked write, or
	// a reader waiting for its connection's slot, kept a server-wide slot.
	// (No per-client bound: every connection here is from 127.0.0.1.)
	s, addr := start(t, Config{Handler: big, MaxInflight: 50, MaxClientInflight: -1, TCPWriteTimeout: 3 * time.Second, TCPIdleTimeout: time.Minute})
	tcpAddr := s.TCPAddrs()[0].String()

	var stuck []net.Conn
	var written atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		stuck = append(stuck, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Pipeline ~15 MB of answers, never reading; the writes
			// block once the server stops reading, until it cuts us.
			_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			co := &dns.Conn{Conn: c}
			for j := 0; j < 1000; j++ {
				if co.WriteMsg(q(sprintf("big%d-%d.example.", i, j), dns.TypeTXT)) != nil {
					return
				}
				written.Add(1)
			}
		}()
	}
	// The queries all fit in the socket buffers; the answers (15 MB per
	// connection) do not: give the server time to fill the buffers and
	// block in its writes.
	dnstest.WaitFor(t, 30*time.Second, "every query to be written", func() bool { return written.Load() == 3000 })
	time.Sleep(500 * time.Millisecond)
	// Meanwhile everyone else is served.
	tc := &dns.Client{Net: "tcp", Timeout: 3 * time.Second}
	uc := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	for i := 0; i < 20; i++ {
		for _, cl := range []struct {
			c    *dns.Client
			addr string
		}{{tc, tcpAddr}, {uc, addr}} {
			r, _, err := cl.c.Exchange(q(sprintf("other%d.example.", i), dns.TypeA), cl.addr)
			if err != nil {
				t.Fatalf("%s client while others do not read: %v", cl.c.Net, err)
			}
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s client while others do not read: %s (overloaded %d, in flight %d)",
					cl.c.Net, dns.RcodeToString[r.Rcode], s.Stats().Overloaded, s.Stats().InFlight)
			}
		}
	}
	if n := s.Stats().Overloaded; n != 0 {
		t.Fatalf("%d queries refused at the in-flight bound: the non-readers held server-wide slots", n)
	}
	// The non-readers are cut off by the server (they read nothing, and
	// the idle timeout is far away).
	dnstest.WaitFor(t, 30*time.Second, "no TCP connection open", func() bool { return s.Stats().TCPConns == 0 })
	for i, c := range stuck {
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("non-reading connection %d not closed", i)
		}
	}
	wg.Wait()
	dnstest.WaitFor(t, 5*time.Second, "no TCP connection open and nothing in flight", func() bool { return s.Stats().TCPConns == 0 && s.Stats().InFlight == 0 })
}
