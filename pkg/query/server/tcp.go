package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// perConnInflight bounds the pipelined queries of one TCP connection that
// are resolved at once; further queries wait to be read (back-pressure on
// that client only).
const perConnInflight = 16

// tcpDrainIdle is how long a TCP connection may sit idle once the server
// drains: ample for a query sent right after the handshake to arrive, and
// short enough that idle connections close cleanly during Drain's wait.
const tcpDrainIdle = 100 * time.Millisecond

// stopAccepting closes the TCP listeners and shortens the idle deadline of
// open connections (see Drain). With SO_REUSEPORT the kernel hands new
// connections to the group's other listeners (the new agent's) from then
// on; a connection still waiting in a closed listener's SYN or accept
// queue is reset (unless net.ipv4.tcp_migrate_req moves it to another
// listener), which is why Drain hands new connections over first.
func (s *Server) stopAccepting() {
	for _, l := range s.tcp {
		_ = l.Close()
	}
	deadline := time.Now().Add(tcpDrainIdle)
	s.tcpMu.Lock()
	for _, st := range s.tcpConns {
		_ = st.c.SetReadDeadline(deadline)
	}
	s.tcpMu.Unlock()
}

// tcpState is what the acceptor knows of an open connection (under
// s.tcpMu in s.tcpConns).
type tcpState struct {
	c      *net.TCPConn
	client netip.Addr
	// held counts the open connections of client (s.tcpClients[client]).
	held *tcpClient
	// stalled is since when the connection has been waiting, on its
	// client, for a message or for the rest of one (monotonic nanoseconds
	// + 1): from its arrival, from the end of its last message, or from
	// the first byte of the message under way. 0 while a message it sent
	// is being answered on its goroutine.
	stalled atomic.Int64
	// partial: a message has begun and not all of it has arrived.
	partial atomic.Bool
	// slots holds the connection's queries being resolved or written.
	slots   chan struct{}
	evicted atomic.Bool
	// forgotten: st is out of s.tcpConns and its client's count, and its
	// place in s.conns given back or passed on (under s.tcpMu).
	forgotten bool
	// done is closed once the connection is closed and has given back its
	// place in the bounds.
	done chan struct{}
}

// tcpClient counts one client address's open connections (under s.tcpMu).
type tcpClient struct{ n int }

// evictable reports whether st may be closed to make room at now
// (monotonic nanoseconds): stalled for at least grace (idle, or with a
// message under way that is not arriving), with nothing being resolved or
// written for it.
func (st *tcpState) evictable(now, grace int64) bool {
	since := st.stalled.Load()
	return since != 0 && now-(since-1) >= grace && len(st.slots) == 0 && !st.evicted.Load()
}

const (
	// tcpStallGrace is how long a connection must have been stalled to
	// be closed to make room: a query's bytes arrive together, so a
	// message under way this long is not arriving, and a client that
	// pipelines, or has just connected, sends its next message well
	// within it.
	tcpStallGrace = 100 * time.Millisecond
	// tcpReserveHeld: the last eighth of MaxTCPConns is kept for clients
	// holding fewer connections than this (a pod retrying over TCP after
	// a TC reply holds one), as the forwarder keeps the last eighth of
	// its slots.
	tcpReserveHeld = 2
)

// admitTCP takes a place for a new connection of client. A client holds
// at most MaxClientTCPConns; once MaxTCPConns less an eighth are open, only
// a client holding fewer than tcpReserveHeld gets one of the rest, so that
// clients at their shares (eight of them fill MaxTCPConns) cannot keep out
// a pod that needs one connection after a TC reply.
//
// At a bound, a connection stalled for tcpStallGrace (idle, or with a
// message under way that is not arriving) is closed to make room, as RFC
// 7766 §6.2.3 allows a server under pressure to do; one with answers under
// way never is. Whose: at its share, one of the client's own; at the
// reserve, the client's own or one of a client holding at least two more;
// at MaxTCPConns, a client holding fewer than tcpReserveHeld takes
// anyone's. Of those, the client holding the most loses its connection
// stalled longest, so clients filling the server lose places to the others
// and never the reverse. A client's own connection makes room for it only
// when idle (clients sharing an address, host-network pods, are not kept
// out by each other's idle connections): one that sends partial messages
// cannot refresh its hold by replacing its own. Without one to close, the
// new connection is refused.
//
// The closed connection's place passes to the new one at once: the
// acceptor never waits for it to go (its goroutine only has to notice its
// deadline, passed, and return), so a client that keeps connections
// coming cannot slow the acceptor down for the others.
func (s *Server) admitTCP(c *net.TCPConn, client netip.Addr) (*tcpState, bool) {
	now := s.mono(time.Now())
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	cl := s.tcpClients[client]
	held := 0
	if cl != nil {
		held = cl.n
	}
	clientFull := s.cfg.MaxClientTCPConns > 0 && held >= s.cfg.MaxClientTCPConns
	reserved := held >= tcpReserveHeld && len(s.conns) >= s.cfg.MaxTCPConns-s.cfg.MaxTCPConns/8
	placed := false
	if !clientFull && !reserved {
		select {
		case s.conns <- struct{}{}:
			placed = true
		default:
		}
	}
	if !placed {
		victim := s.tcpVictim(client, held, clientFull, reserved, now)
		if victim == nil {
			if clientFull {
				s.tcpClientLimited.Add(1)
			} else {
				s.overloads.Add(1)
			}
			return nil, false
		}
		// Its place in s.conns is the new connection's from here.
		victim.evicted.Store(true)
		s.forgetTCP(victim)
		s.tcpEvicted.Add(1)
		_ = victim.c.SetReadDeadline(time.Unix(1, 0))
		// forgetTCP may have dropped the client's entry (the victim was
		// its last connection, of its own).
		cl = s.tcpClients[client]
	}
	if cl == nil {
		cl = &tcpClient{}
		s.tcpClients[client] = cl
	}
	cl.n++
	st := &tcpState{c: c, client: client, held: cl, slots: make(chan struct{}, perConnInflight), done: make(chan struct{})}
	// Waiting for its first message from now: stalled in the order
	// connections arrived.
	st.stalled.Store(now + 1)
	s.tcpConns[c] = st
	return st, true
}

// forgetTCP takes st out of the table and its client's count; its place
// in s.conns is the caller's to give back or pass on. s.tcpMu is held.
func (s *Server) forgetTCP(st *tcpState) {
	st.forgotten = true
	delete(s.tcpConns, st.c)
	if st.held.n--; st.held.n == 0 {
		delete(s.tcpClients, st.client)
	}
}

// tcpVictim returns the connection to close for a new one of client,
// which holds held and is at its share (clientFull), at the reserve
// (reserved) or else at MaxTCPConns (see admitTCP); nil when none may be.
// s.tcpMu is held.
func (s *Server) tcpVictim(client netip.Addr, held int, clientFull, reserved bool, now int64) *tcpState {
	grace := int64(tcpStallGrace)
	var victim *tcpState
	for _, st := range s.tcpConns {
		own := st.client == client
		switch {
		case own && st.partial.Load(),
			clientFull && !own,
			reserved && !own && st.held.n < held+2:
			continue
		}
		if !st.evictable(now, grace) {
			continue
		}
		if victim == nil || st.held.n > victim.held.n ||
			(st.held.n == victim.held.n && st.stalled.Load() < victim.stalled.Load()) {
			victim = st
		}
	}
	return victim
}

// acceptTCP serves the listener of Config.Listen[listener].
func (s *Server) acceptTCP(l *net.TCPListener, listener int) {
	defer s.wg.Done()
	for !s.acceptOne(l, listener) {
	}
}

// acceptOne accepts one connection and hands it to its goroutine; true
// once the listener is closed. A panic here (a bug) costs the connection
// being accepted, is counted and logged, and the acceptor goes on.
func (s *Server) acceptOne(l *net.TCPListener, listener int) (closed bool) {
	var c *net.TCPConn
	var st *tcpState
	served := false
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Panics.Caught(s.log, p, "accepting a TCP connection")
			switch {
			case served:
			case st != nil:
				s.closeTCP(st)
			case c != nil:
				_ = c.Close()
			}
		}
	}()
	c, err := l.AcceptTCP()
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return true
		}
		s.log.Debug("TCP accept failed", "err", err)
		time.Sleep(10 * time.Millisecond)
		return false
	}
	if s.faultAccept != nil {
		s.faultAccept()
	}
	client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	st, ok := s.admitTCP(c, client)
	if !ok {
		// At a bound with nothing stalled to close: refuse the
		// connection rather than queue it.
		_ = c.Close()
		return false
	}
	s.wg.Add(1)
	go s.serveTCP(st, listener)
	served = true
	return false
}

// tcpConn serialises writes of pipelined replies on one connection.
type tcpConn struct {
	c   *net.TCPConn
	mu  sync.Mutex
	s   *Server
	bad bool
}

func (t *tcpConn) write(msg []byte) {
	frame := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(frame, uint16(len(msg)))
	copy(frame[2:], msg)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bad {
		return
	}
	_ = t.c.SetWriteDeadline(time.Now().Add(t.s.cfg.TCPWriteTimeout))
	if _, err := t.c.Write(frame); err != nil {
		// A client that does not read its answers is cut off; it cannot
		// hold a reader of ours.
		t.bad = true
		_ = t.c.Close()
	}
}

// closeTCP closes st's connection and gives back its places in the bounds.
func (s *Server) closeTCP(st *tcpState) {
	_ = st.c.Close()
	s.tcpMu.Lock()
	release := !st.forgotten
	if release {
		s.forgetTCP(st)
	}
	s.tcpMu.Unlock()
	if release {
		<-s.conns
	}
	close(st.done)
}

func (s *Server) serveTCP(st *tcpState, listener int) {
	defer s.wg.Done()
	defer s.closeTCP(st)
	// A panic (the handler's on this goroutine, or ours) costs this
	// connection only: counted, then closed with its places given back as
	// on any return.
	defer s.cfg.Panics.Recover(s.log, "serving a TCP connection", "client", st.client)
	c, client, slots := st.c, st.client, st.slots
	var port uint16
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		port = ta.AddrPort().Port()
	}
	t := &tcpConn{c: c, s: s}
	var wg sync.WaitGroup
	defer wg.Wait()
	var lenBuf [2]byte
	for {
		// Draining, a connection still gets the queries its client has
		// already sent (one accepted just before Drain closed the
		// listener has its first query on the way), then closes once
		// idle instead of at Shutdown.
		idle := s.cfg.TCPIdleTimeout
		if s.draining.Load() || s.closing.Load() {
			idle = tcpDrainIdle
		}
		now := time.Now()
		_ = c.SetReadDeadline(now.Add(idle))
		if st.stalled.Load() == 0 {
			st.stalled.Store(s.mono(now) + 1)
		}
		if st.evicted.Load() {
			return
		}
		_, err := io.ReadFull(c, lenBuf[:1])
		if err != nil || st.evicted.Load() {
			return
		}
		// A message has begun: all of it must arrive within
		// TCPReadTimeout from here, however its bytes trickle in, or a
		// client could hold the connection by sending one byte before
		// each idle deadline. Until it has, the connection is stalled
		// from this first byte: one whose message has been under way
		// for tcpStallGrace may be closed to make room (admitTCP).
		now = time.Now()
		st.partial.Store(true)
		st.stalled.Store(s.mono(now) + 1)
		_ = c.SetReadDeadline(now.Add(s.cfg.TCPReadTimeout))
		if _, err := io.ReadFull(c, lenBuf[1:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if n < dnswire.HeaderLen {
			return
		}
		// What a connection holds before its bytes arrive is a query's
		// bound, never the length it announces: a longer message is
		// answered from its header (FORMERR), the rest read and dropped.
		size := n
		if n > maxQuerySize {
			size = dnswire.HeaderLen
		}
		pkt := make([]byte, size)
		if _, err := io.ReadFull(c, pkt); err != nil {
			return
		}
		if n > len(pkt) {
			if err := discard(c, n-len(pkt)); err != nil {
				return
			}
		}
		// Whole: being answered, not stalled.
		st.stalled.Store(0)
		st.partial.Store(false)
		r := new(Request)
		r.Read("tcp", listener, client, time.Now(), pkt)
		r.ClientPort = port
		resp, v := s.h.Answer(make([]byte, 0, 512), r)
		switch v {
		case Drop:
			continue
		case Reply:
			t.write(resp)
			continue
		}
		// This connection's slot first: a client whose answers are not
		// being read waits here, holding none of the server-wide slots
		// (MaxInflight) that every other client needs.
		slots <- struct{}{}
		if !s.admit(client) {
			<-slots
			t.write(s.h.Refuse(nil, r))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer s.cfg.Panics.Recover(s.log, "answering a TCP query off the reader", "client", client)
			// Resolved: the server-wide slot is released before the
			// write, which may wait TCPWriteTimeout on a client that does
			// not read (TestTCPNonReader).
			out := s.resolve(r)
			t.write(out)
		}()
	}
}

// discard reads and drops n bytes of c (the rest of a message longer than
// maxQuerySize) through a small buffer.
func discard(c *net.TCPConn, n int) error {
	buf := make([]byte, min(n, 512))
	for n > 0 {
		m, err := c.Read(buf[:min(n, len(buf))])
		n -= m
		if err != nil {
			return err
		}
	}
	return nil
}
