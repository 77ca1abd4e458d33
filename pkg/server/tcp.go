package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/dnswire"
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
	for c := range s.tcpConns {
		_ = c.SetReadDeadline(deadline)
	}
	s.tcpMu.Unlock()
}

func (s *Server) acceptTCP(l *net.TCPListener) {
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
		select {
		case s.conns <- struct{}{}:
		default:
			// At the bound: refuse the connection rather than queue it.
			s.overloads.Add(1)
			_ = c.Close()
			continue
		}
		s.wg.Add(1)
		go s.serveTCP(c)
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

func (s *Server) serveTCP(c *net.TCPConn) {
	defer s.wg.Done()
	defer func() { <-s.conns }()
	s.tcpMu.Lock()
	s.tcpConns[c] = struct{}{}
	s.tcpMu.Unlock()
	defer func() {
		s.tcpMu.Lock()
		delete(s.tcpConns, c)
		s.tcpMu.Unlock()
		_ = c.Close()
	}()
	t := &tcpConn{c: c, s: s}
	client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	slots := make(chan struct{}, perConnInflight)
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
		_ = c.SetReadDeadline(time.Now().Add(idle))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
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
		r := &request{proto: "tcp", client: client, start: time.Now(), raw: pkt}
		resp, v := s.fast(make([]byte, 0, 512), r)
		switch v {
		case verdictDrop:
			continue
		case verdictReply:
			t.write(resp)
			continue
		}
		// This connection's slot first: a client whose answers are not
		// being read waits here, holding none of the server-wide slots
		// (MaxInflight) that every other client needs.
		slots <- struct{}{}
		if !s.admit(client) {
			<-slots
			r.fail = failOverloaded
			t.write(s.reply(nil, r, dns.RcodeServerFailure, SourceLocal))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			out := s.slow(s.ctx, make([]byte, 0, 1024), r)
			// Resolved: the server-wide slot is released before the
			// write, which may wait TCPWriteTimeout on a client that does
			// not read (TestTCPNonReader).
			s.leave(client)
			t.write(out)
		}()
	}
}
