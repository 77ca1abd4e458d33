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
// on; a connection still waiting in a closed listener's accept queue is
// reset, unless net.ipv4.tcp_migrate_req moves it to another listener.
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
	// idleSince is when the connection began waiting for the first byte
	// of a message (monotonic nanoseconds + 1); 0 while a message is
	// being read.
	idleSince atomic.Int64
	// slots holds the connection's queries being resolved or written.
	slots   chan struct{}
	evicted atomic.Bool
	// done is closed once the connection is closed and has given back its
	// place in the bounds.
	done chan struct{}
}

// idle reports whether st may be closed to make room: waiting for a
// message, with nothing being resolved or written for it.
func (st *tcpState) idle() bool {
	return st.idleSince.Load() != 0 && len(st.slots) == 0 && !st.evicted.Load()
}

// tcpEvictWait bounds how long the acceptor waits for an evicted
// connection to give back its place.
const tcpEvictWait = 200 * time.Millisecond

// admitTCP takes a place for a new connection of client: one of the
// client's (MaxClientTCPConns) and one of MaxTCPConns. When either bound is
// reached, the connection idle longest (the client's own when the client
// holds its share, else anyone's) is closed to make room, as RFC 7766 §6.2.3
// allows a server under pressure to do: idle connections cost a client
// nothing to reopen, and holding them cannot deny the connections others
// need after a TC reply. Without an idle one to close, the new connection
// is refused.
func (s *Server) admitTCP(c *net.TCPConn, client netip.Addr) (*tcpState, bool) {
	for try := 0; try < 2; try++ {
		s.tcpMu.Lock()
		clientFull := s.cfg.MaxClientTCPConns > 0 && s.tcpClients[client] >= s.cfg.MaxClientTCPConns
		if !clientFull {
			select {
			case s.conns <- struct{}{}:
				st := &tcpState{c: c, client: client, slots: make(chan struct{}, perConnInflight), done: make(chan struct{})}
				// Waiting for its first message from now: idle in the
				// order connections arrived.
				st.idleSince.Store(s.mono(time.Now()) + 1)
				s.tcpClients[client]++
				s.tcpConns[c] = st
				s.tcpMu.Unlock()
				return st, true
			default:
			}
		}
		var victim *tcpState
		if try == 0 {
			victim = s.oldestIdleTCP(clientFull, client)
		}
		s.tcpMu.Unlock()
		if victim == nil {
			if clientFull {
				s.tcpClientLimited.Add(1)
			} else {
				s.overloads.Add(1)
			}
			return nil, false
		}
		victim.evicted.Store(true)
		s.tcpEvicted.Add(1)
		_ = victim.c.SetReadDeadline(time.Unix(1, 0))
		select {
		case <-victim.done:
		case <-time.After(tcpEvictWait):
		}
	}
	s.overloads.Add(1)
	return nil, false
}

// oldestIdleTCP returns the connection idle longest, of client only when
// own is set; nil when none is idle. s.tcpMu is held.
func (s *Server) oldestIdleTCP(own bool, client netip.Addr) *tcpState {
	var oldest *tcpState
	for _, st := range s.tcpConns {
		if (own && st.client != client) || !st.idle() {
			continue
		}
		if oldest == nil || st.idleSince.Load() < oldest.idleSince.Load() {
			oldest = st
		}
	}
	return oldest
}

// acceptTCP serves the listener of Config.Listen[listener].
func (s *Server) acceptTCP(l *net.TCPListener, listener int) {
	defer s.wg.Done()
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("TCP accept failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		st, ok := s.admitTCP(c, client)
		if !ok {
			// At a bound with nothing idle to close: refuse the
			// connection rather than queue it.
			_ = c.Close()
			continue
		}
		s.wg.Add(1)
		go s.serveTCP(st, listener)
	}
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
	delete(s.tcpConns, st.c)
	if s.tcpClients[st.client] <= 1 {
		delete(s.tcpClients, st.client)
	} else {
		s.tcpClients[st.client]--
	}
	s.tcpMu.Unlock()
	<-s.conns
	close(st.done)
}

func (s *Server) serveTCP(st *tcpState, listener int) {
	defer s.wg.Done()
	defer s.closeTCP(st)
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
		if st.idleSince.Load() == 0 {
			st.idleSince.Store(s.mono(now) + 1)
		}
		if st.evicted.Load() {
			return
		}
		_, err := io.ReadFull(c, lenBuf[:1])
		st.idleSince.Store(0)
		if err != nil || st.evicted.Load() {
			return
		}
		// A message has begun: all of it must arrive within
		// TCPReadTimeout from here, however its bytes trickle in, or a
		// client could hold the connection by sending one byte before
		// each idle deadline.
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.TCPReadTimeout))
		if _, err := io.ReadFull(c, lenBuf[1:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if n < dnswire.HeaderLen {
			return
		}
		pkt := make([]byte, n)
		if _, err := io.ReadFull(c, pkt); err != nil {
			return
		}
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
			out := s.h.Resolve(s.ctx, make([]byte, 0, 1024), r)
			// Resolved: the server-wide slot is released before the
			// write, which may wait TCPWriteTimeout on a client that does
			// not read (TestTCPNonReader).
			s.leave(client)
			t.write(out)
		}()
	}
}
