package server

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) (*net.TCPConn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// TestTCPOneClientCannotHoldConnections: a client that opens as many TCP
// connections as it can and trickles a byte at a time into each cannot
// stop another client's TCP queries (a pod retrying over TCP after a TC
// reply): it gets at most its share of the connections, and a message
// that trickles is cut after the message deadline, which its trickling
// does not extend, long before the idle timeout.
func TestTCPOneClientCannotHoldConnections(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}, MaxTCPConns: 16, TCPIdleTimeout: time.Minute})
	addr := s.TCPAddrs()[0].String()

	// The holder, from 127.0.0.2: 16 connections (the whole bound), each
	// with a message started and trickling.
	var held []*net.TCPConn
	for i := 0; i < 16; i++ {
		c, err := dialFrom(t, "127.0.0.2", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	start := time.Now()
	cut := make(chan time.Duration, len(held))
	for _, c := range held {
		wg.Add(2)
		go func() {
			defer wg.Done()
			// A 40-byte message, one byte every 200 ms: 8 s to send it.
			msg := append([]byte{0, 40}, make([]byte, 40)...)
			for _, b := range msg {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, _ = c.Read(make([]byte, 1))
			cut <- time.Since(start)
		}()
	}
	// The acceptor has taken every one of the holder's connections: each
	// is open, or was closed at the per-client bound (refused, or evicted
	// for a newer one). Only then does the other client's answer say
	// anything.
	dnstest.WaitFor(t, 5*time.Second, "the acceptor to take every held connection", func() bool {
		st := s.Stats()
		return uint64(st.TCPConns)+st.TCPClientLimited+st.TCPEvicted >= uint64(len(held))
	})

	// The other client, from 127.0.0.3, is answered over TCP meanwhile.
	for i := 0; i < 5; i++ {
		c, err := dialFrom(t, "127.0.0.3", addr)
		if err != nil {
			t.Fatal(err)
		}
		co := &dns.Conn{Conn: c}
		m := q(sprintf("other%d.example.", i), dns.TypeA)
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if err := co.WriteMsg(m); err != nil {
			t.Fatalf("query %d over TCP while another client holds connections: %v", i, err)
		}
		r, err := co.ReadMsg()
		c.Close()
		if err != nil || r.Id != m.Id || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("query %d over TCP while another client holds connections: %v, %v", i, r, err)
		}
	}

	// The trickled messages are cut by the message deadline (2 s), not
	// the idle timeout (a minute), and not only once complete (8 s).
	for range held {
		if d := <-cut; d > 5*time.Second {
			t.Fatalf("a trickling connection was closed after %v", d.Round(time.Millisecond))
		}
	}
	if st := s.Stats(); st.TCPClientLimited+st.TCPEvicted == 0 {
		t.Fatalf("stats %+v: the per-client bound was never met", st)
	}
}

// askOn asks name over the open connection c and fails the test unless
// it is answered.
func askOn(t *testing.T, c net.Conn, name string) {
	t.Helper()
	co := &dns.Conn{Conn: c}
	m := q(name, dns.TypeA)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if err := co.WriteMsg(m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	r, err := co.ReadMsg()
	if err != nil || r.Id != m.Id || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("%s: %v, %v", name, r, err)
	}
}

// TestTCPStalledConnectionsMakeRoom: clients holding connections open and
// idle do not keep a new one out at a bound: a connection stalled long
// enough is closed to make room. Whose follows the bound met: at its
// share, the client's own (clients sharing one address, host-network
// pods, are not kept out by each other's idle connections); at the
// reserve (the last eighth), one of a client holding at least two more, or
// its own; at the total, a client holding fewer than two takes the place
// of the heaviest client's connection stalled longest. The connections of
// light clients, and of those holding no more than the newcomer, stay.
func TestTCPStalledConnectionsMakeRoom(t *testing.T) {
	// 16 connections, 4 a client, the last 2 for clients holding fewer
	// than two.
	s, _ := start(t, Config{Handler: &fakeResolver{}, MaxTCPConns: 16, TCPIdleTimeout: time.Minute})
	addr := s.TCPAddrs()[0].String()
	var all []*net.TCPConn
	t.Cleanup(func() {
		for _, c := range all {
			c.Close()
		}
	})
	open := func(src string) *net.TCPConn {
		c, err := dialFrom(t, src, addr)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, c)
		return c
	}
	hold := func(src string, n int) []*net.TCPConn {
		var cs []*net.TCPConn
		for i := 0; i < n; i++ {
			cs = append(cs, open(src))
			dnstest.WaitFor(t, 5*time.Second, "the connection to be accepted", func() bool { return s.Stats().TCPConns == len(all) })
		}
		return cs
	}
	a := hold("127.0.0.2", 4)
	b := hold("127.0.0.4", 4)
	c := hold("127.0.0.6", 4)
	d := hold("127.0.0.7", 2)
	dnstest.WaitFor(t, 5*time.Second, "14 stalled connections", func() bool { return s.stalledTCP(tcpStallGrace) == 14 })

	// 127.0.0.2 at its share: its own oldest makes room.
	askOn(t, open("127.0.0.2"), "share.example.")
	if !closedWithin(a[0], 5*time.Second) {
		t.Fatal("at its share, the client's own oldest connection was not the one closed")
	}
	// 127.0.0.7, holding 2, at the reserve: the oldest of a client holding
	// at least 4 (127.0.0.2's next) rather than its own.
	askOn(t, open("127.0.0.7"), "reserve.example.")
	if !closedWithin(a[1], 5*time.Second) {
		t.Fatal("at the reserve, the heaviest client's oldest connection was not the one closed")
	}
	// Light clients take the reserve without closing anything, then, at
	// the total, the oldest of the heaviest clients' (127.0.0.4 and
	// 127.0.0.6 hold 4; 127.0.0.4's are older).
	g, h := open("127.0.0.3"), open("127.0.0.5")
	askOn(t, g, "light1.example.")
	askOn(t, h, "light2.example.")
	askOn(t, open("127.0.0.8"), "light3.example.")
	if !closedWithin(b[0], 5*time.Second) {
		t.Fatal("at the total, the heaviest client's oldest connection was not the one closed")
	}
	if st := s.Stats(); st.TCPEvicted != 3 || st.TCPClientLimited != 0 || st.Overloaded != 0 || st.TCPConns != 16 {
		t.Fatalf("stats %+v: want 3 stalled connections closed, 16 open and nothing refused", st)
	}
	for _, kept := range append(append([]*net.TCPConn{g, h}, c...), d...) {
		if closedWithin(kept, 10*time.Millisecond) {
			t.Fatalf("connection from %s closed", kept.LocalAddr())
		}
	}
}

// TestTCPIdleOrderIsArrivalOrder: connections are idle from their arrival,
// not from when their goroutines first run, so the one closed to make room
// is the one that has waited longest whatever the scheduler did. Here the
// second connection's goroutine runs before the first's (as under load);
// the first is still the one closed.
func TestTCPIdleOrderIsArrivalOrder(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}, MaxTCPConns: 2, TCPIdleTimeout: time.Minute})
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// conn returns the server end of a new connection from src, and
	// closes the client end at test end.
	conn := func(src string) *net.TCPConn {
		c, err := dialFrom(t, src, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sc, err := l.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	admit := func(src string) *tcpState {
		st, ok := s.admitTCP(conn(src), netip.MustParseAddr(src))
		if !ok {
			t.Fatalf("connection from %s refused", src)
		}
		return st
	}
	serve := func(st *tcpState) {
		s.wg.Add(1)
		go s.serveTCP(st, 0)
		dnstest.WaitFor(t, 5*time.Second, "the connection to stall", func() bool { return st.stalled.Load() != 0 })
	}
	first := admit("127.0.0.2")
	time.Sleep(2 * time.Millisecond)
	second := admit("127.0.0.4")
	serve(second)
	time.Sleep(2 * time.Millisecond)
	serve(first)
	dnstest.WaitFor(t, 5*time.Second, "two stalled connections", func() bool { return s.stalledTCP(tcpStallGrace) == 2 })

	third := admit("127.0.0.3")
	serve(third)
	select {
	case <-first.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection that arrived first was not the one closed")
	}
	select {
	case <-second.done:
		t.Fatal("the connection that arrived second was closed")
	default:
	}
}
