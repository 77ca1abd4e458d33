package server

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
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
	waitFor(t, func() bool {
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

// tcpQuery asks name over a new TCP connection from src and fails the
// test unless it is answered.
func tcpQuery(t *testing.T, src, addr, name string) {
	t.Helper()
	c, err := dialFrom(t, src, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co := &dns.Conn{Conn: c}
	m := q(name, dns.TypeA)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if err := co.WriteMsg(m); err != nil {
		t.Fatalf("%s from %s: %v", name, src, err)
	}
	r, err := co.ReadMsg()
	if err != nil || r.Id != m.Id || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("%s from %s: %v, %v", name, src, r, err)
	}
}

// TestTCPIdleConnectionsMakeRoom: clients holding every connection open
// and idle (each within its share) do not keep a new client out: the
// connection idle longest is closed to make room. A client at its own
// share gets room from its own idle connections, so even clients sharing
// one address (host-network pods) are not kept out by each other's idle
// connections.
func TestTCPIdleConnectionsMakeRoom(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}, MaxTCPConns: 8, TCPIdleTimeout: time.Minute})
	addr := s.TCPAddrs()[0].String()
	var held []*net.TCPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, src := range []string{"127.0.0.2", "127.0.0.4"} {
		for i := 0; i < 4; i++ { // the default share of 8: 4
			c, err := dialFrom(t, src, addr)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			waitFor(t, func() bool { return s.Stats().TCPConns == len(held) })
		}
	}
	tcpQuery(t, "127.0.0.3", addr, "newcomer.example.")
	if !closedWithin(held[0], 5*time.Second) {
		t.Fatal("the connection idle longest was not the one closed")
	}
	// 127.0.0.4 holds its share, all idle: its next connection takes the
	// place of its own oldest.
	tcpQuery(t, "127.0.0.4", addr, "same-address.example.")
	if !closedWithin(held[4], 5*time.Second) {
		t.Fatal("the client's own oldest idle connection was not the one closed")
	}
	if st := s.Stats(); st.TCPEvicted != 2 || st.TCPClientLimited != 0 || st.Overloaded != 0 {
		t.Fatalf("stats %+v: want 2 idle connections closed and nothing refused", st)
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
		waitFor(t, func() bool { return st.idleSince.Load() != 0 })
	}
	first := admit("127.0.0.2")
	time.Sleep(2 * time.Millisecond)
	second := admit("127.0.0.4")
	serve(second)
	time.Sleep(2 * time.Millisecond)
	serve(first)

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
