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
	for !s.closing.Load() {
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.TCPIdleTimeout))
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
		select {
		case s.sem <- struct{}{}:
		default:
			s.overloads.Add(1)
			t.write(s.reply(nil, r, dns.RcodeServerFailure, SourceLocal))
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots; <-s.sem }()
			t.write(s.slow(s.ctx, make([]byte, 0, 1024), r))
		}()
	}
}
