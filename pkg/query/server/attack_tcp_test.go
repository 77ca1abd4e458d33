package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// holders opens connections from several loopback addresses, each sending
// one byte (the first of a message's length) and then nothing, and opens
// a new one whenever the server closes one: the shape of a client holding
// connections with partial messages. Every connection and goroutine is
// gone when stop returns.
type holders struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
	// sent counts the connections that sent their byte.
	sent atomic.Int64
	// redial, when not nil, holds a holder whose connection the server
	// closed after holding it until the test sends on it (a test that
	// counts evictions lets the evicted holder back only once the
	// connection that took its place is gone); refused connections
	// are retried as without it.
	redial chan struct{}
}

func holdConnections(t *testing.T, addr string, srcs []string, perSrc int) *holders {
	t.Helper()
	return startHolders(t, &holders{stop: make(chan struct{}), conns: map[net.Conn]bool{}}, addr, srcs, perSrc)
}

// holdConnectionsGated is holdConnections with h.redial set: a holder the
// server evicted opens its next connection when the test lets it
// (letRedial).
func holdConnectionsGated(t *testing.T, addr string, srcs []string, perSrc int) *holders {
	t.Helper()
	return startHolders(t, &holders{stop: make(chan struct{}), conns: map[net.Conn]bool{}, redial: make(chan struct{})}, addr, srcs, perSrc)
}

func startHolders(t *testing.T, h *holders, addr string, srcs []string, perSrc int) *holders {
	t.Helper()
	t.Cleanup(h.close)
	for _, src := range srcs {
		for i := 0; i < perSrc; i++ {
			h.wg.Add(1)
			go h.hold(src, addr)
		}
	}
	return h
}

func (h *holders) hold(src, addr string) {
	defer h.wg.Done()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	for {
		select {
		case <-h.stop:
			return
		default:
		}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			select {
			case <-h.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		h.mu.Lock()
		stopped := h.conns == nil
		if !stopped {
			h.conns[c] = true
		}
		h.mu.Unlock()
		if stopped {
			c.Close()
			return
		}
		began := time.Now()
		if _, err := c.Write([]byte{0}); err == nil {
			h.sent.Add(1)
			// Held until the server closes it (or the test ends).
			_, _ = c.Read(make([]byte, 1))
		}
		h.mu.Lock()
		if h.conns != nil {
			delete(h.conns, c)
		}
		h.mu.Unlock()
		c.Close()
		// At once after a connection the server held a while (its
		// message cut), as an attacker would; after a refusal a pause
		// bounds the load the test makes.
		pause := time.Millisecond
		if time.Since(began) < 100*time.Millisecond {
			pause = 50 * time.Millisecond
		} else if h.redial != nil {
			select {
			case <-h.stop:
				return
			case <-h.redial:
			}
		}
		select {
		case <-h.stop:
			return
		case <-time.After(pause):
		}
	}
}

// letRedial lets one evicted holder of holdConnectionsGated open its next
// connection; it fails the test if none is waiting within 5 s.
func (h *holders) letRedial(t *testing.T) {
	t.Helper()
	select {
	case h.redial <- struct{}{}:
	case <-time.After(5 * time.Second):
		t.Fatal("no evicted holder waiting to reconnect within 5s")
	}
}

func (h *holders) close() {
	h.mu.Lock()
	if h.conns == nil {
		h.mu.Unlock()
		return
	}
	close(h.stop)
	for c := range h.conns {
		c.Close()
	}
	h.conns = nil
	h.mu.Unlock()
	h.wg.Wait()
}

// tcpAsk asks name over a new TCP connection from src; the error says what
// failed, the duration how long the answer took.
func tcpAsk(src, addr, name string, timeout time.Duration) (time.Duration, error) {
	began := time.Now()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(began.Add(timeout))
	co := &dns.Conn{Conn: c}
	m := q(name, dns.TypeA)
	if err := co.WriteMsg(m); err != nil {
		return 0, err
	}
	r, err := co.ReadMsg()
	if err != nil {
		return 0, err
	}
	if r.Id != m.Id || r.Rcode != dns.RcodeSuccess {
		return 0, fmt.Errorf("reply %d, rcode %s", r.Id, dns.RcodeToString[r.Rcode])
	}
	return time.Since(began), nil
}

// TestAttackTCPEightClientsFillConnections: eight client addresses each
// holding their whole share (MaxTCPConns/8) of connections that sent one
// byte, reconnecting whenever one is closed, must not keep a ninth
// client's TCP queries out: a client's share leaves room for clients that
// hold few connections. The defaults are the agent's (1,000 connections,
// 125 a client).
func TestAttackTCPEightClientsFillConnections(t *testing.T) {
	// UDP on the poller: no reader holds a P of the few the test has.
	s, _ := start(t, Config{Handler: &fakeResolver{}, TCPIdleTimeout: time.Minute, UDPReaders: "poller"})
	addr := s.TCPAddrs()[0].String()
	share := s.cfg.MaxClientTCPConns
	var srcs []string
	for i := 2; i < 10; i++ {
		srcs = append(srcs, sprintf("127.0.0.%d", i))
	}
	h := holdConnections(t, addr, srcs, share)
	// Every holder has sent its byte once, and they hold at least seven
	// shares (all eight with nothing to stop them) before the ninth
	// client comes.
	dnstest.WaitFor(t, 5*time.Second, "every holder to send and hold its shares", func() bool { return h.sent.Load() >= int64(len(srcs)*share) && s.Stats().TCPConns >= 7*share })

	// One query every 100 ms for 3 s: across the message deadline (2 s)
	// at which the holders' connections are cut and made again. Each is
	// answered within the bound (a refused connection fails at once; the
	// bound is wide for a loaded machine, under the race detector).
	const queries = 30
	const bound = 3 * time.Second
	failed, slowest := 0, time.Duration(0)
	var first error
	for i := 0; i < queries; i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		d, err := tcpAsk("127.0.0.10", addr, sprintf("ninth%d.example.", i), bound)
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
			continue
		}
		slowest = max(slowest, d)
	}
	st := s.Stats()
	h.close()
	t.Logf("ninth client: %d of %d TCP queries failed (first: %v); slowest answer %v; stats %+v", failed, queries, first, slowest, st)
	if failed > 0 {
		t.Fatalf("eight clients holding their shares of one-byte connections: %d of %d TCP queries of a ninth failed (%.0f%%; first: %v)",
			failed, queries, 100*float64(failed)/queries, first)
	}
}

// TestTCPPartialMessagesEvictable: when every connection is held by
// clients holding one each, all with a message begun and stalled, a new
// client's connection takes the place of the one whose message has been
// under way longest: a partial message holds a connection no better than
// idleness does.
func TestTCPPartialMessagesEvictable(t *testing.T) {
	s, _ := start(t, Config{Handler: &fakeResolver{}, MaxTCPConns: 16, TCPIdleTimeout: time.Minute, TCPReadTimeout: time.Minute})
	addr := s.TCPAddrs()[0].String()
	var srcs []string
	for i := 0; i < 16; i++ {
		srcs = append(srcs, sprintf("127.0.1.%d", i+1))
	}
	// Gated: the holder evicted for a newcomer comes back only once the
	// newcomer's connection is gone. Let back at once (as holders of
	// other tests are), it could find the newcomer still open, every
	// place taken, and evict a second holder: one eviction more than the
	// queries, by the test's own timing (at least 6 runs in 300 here).
	h := holdConnectionsGated(t, addr, srcs, 1)
	for i := 0; i < 5; i++ {
		// Every connection held, each stalled longer than a message sent
		// whole ever is (the one closed for the last query made again).
		dnstest.WaitFor(t, 5*time.Second, "16 stalled connections", func() bool { return s.stalledTCP(tcpStallGrace) == 16 })
		if _, err := tcpAsk("127.0.2.1", addr, sprintf("newcomer%d.example.", i), 2*time.Second); err != nil {
			t.Fatalf("query %d of a new client while every connection holds a stalled partial message: %v (stats %+v)", i, err, s.Stats())
		}
		dnstest.WaitFor(t, 5*time.Second, "15 connections: the newcomer's closed, the evicted holder's not yet back", func() bool { return s.Stats().TCPConns == 15 })
		h.letRedial(t)
	}
	if st := s.Stats(); st.TCPEvicted != 5 {
		t.Fatalf("stats %+v: want a partial message's connection evicted per query", st)
	}
}

// stalledTCP counts the open connections that could be closed to make
// room: nothing of theirs being answered, waiting for a message or for the
// rest of one for at least d.
func (s *Server) stalledTCP(d time.Duration) int {
	now := s.mono(time.Now())
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	n := 0
	for _, st := range s.tcpConns {
		if st.evictable(now, int64(d)) {
			n++
		}
	}
	return n
}

// TestTCPPipeliningClientNotEvicted: a client pipelining queries over
// several connections, whose answers take a while, is never closed to make
// room for others while its answers are under way, however many
// connections it holds and however full the server is; newcomers take the
// places of stalled connections instead, or are refused.
func TestTCPPipeliningClientNotEvicted(t *testing.T) {
	// The pipelining client's answers wait until the round's newcomers
	// have come and gone.
	var release atomic.Pointer[chan struct{}]
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		if strings.HasPrefix(q.Question[0].Name, "slow") {
			select {
			case <-*release.Load():
			case <-ctx.Done():
			}
		}
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
		return m, nil
	}}
	s, _ := start(t, Config{Handler: res, MaxTCPConns: 8, MaxInflight: 256, MaxClientInflight: 128, TCPIdleTimeout: time.Minute, TCPReadTimeout: time.Minute})
	addr := s.TCPAddrs()[0].String()

	// The pipelining client, from 127.0.0.2: its share (4) of
	// connections, each with 16 queries whose answers take a while.
	type pipe struct {
		co  *dns.Conn
		ids map[uint16]bool
	}
	var pipes []pipe
	for i := 0; i < 4; i++ {
		c, err := dialFrom(t, "127.0.0.2", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dnstest.WaitFor(t, 5*time.Second, "the connection to be accepted", func() bool { return s.Stats().TCPConns == i+1 })
		pipes = append(pipes, pipe{co: &dns.Conn{Conn: c}, ids: map[uint16]bool{}})
	}
	for round := 0; round < 3; round++ {
		ch := make(chan struct{})
		release.Store(&ch)
		var once sync.Once
		open := func() { once.Do(func() { close(ch) }) }
		defer open()
		for i, p := range pipes {
			for j := 0; j < 16; j++ {
				m := q(sprintf("slow%d-%d-%d.example.", round, i, j), dns.TypeA)
				p.ids[m.Id] = true
				if err := p.co.WriteMsg(m); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Others fill the rest with stalled messages, and light clients
		// keep coming meanwhile: none of them may take the pipelining
		// client's places.
		if round == 0 {
			holdConnections(t, addr, []string{"127.0.0.3", "127.0.0.4"}, 4)
		}
		dnstest.WaitFor(t, 5*time.Second, "64 queries in flight", func() bool { return s.Stats().InFlight == 64 })
		for i := 0; i < 4; i++ {
			_, _ = tcpAsk(sprintf("127.0.3.%d", i+1), addr, "light.example.", 300*time.Millisecond)
		}
		open()
		for i, p := range pipes {
			_ = p.co.SetReadDeadline(time.Now().Add(3 * time.Second))
			for len(p.ids) > 0 {
				r, err := p.co.ReadMsg()
				if err != nil {
					t.Fatalf("round %d: the pipelining client's connection %d lost %d answers: %v (stats %+v)", round, i, len(p.ids), err, s.Stats())
				}
				delete(p.ids, r.Id)
			}
		}
	}
}
