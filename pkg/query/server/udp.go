package server

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// readUDP is one socket's reader. What the handler answers at once (cache
// hits, cluster answers) is sent from here without a goroutine or a copy
// of the packet; anything that has to wait goes to a goroutine, bounded by
// MaxInflight. It returns nil once the socket is closed, or a *readerError
// for keepReading (readers.go) when the socket fails.
func (s *Server) readUDP(u *udpSock, buf, out []byte, r *Request) error {
	uc := u.uc.Load()
	for {
		n, addr, err := uc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.closing.Load() {
				return nil
			}
			return pollerReadError(err)
		}
		if n > maxQuerySize {
			// Longer than any query (the buffer holds one byte more to
			// tell): answered from the header alone, as thread readers
			// answer a datagram cut short.
			n = dnswire.HeaderLen
		}
		r.Read("udp", u.listener, addr.Addr().Unmap(), time.Now(), buf[:n])
		r.ClientPort = addr.Port()
		resp, v := s.h.Answer(out[:0], r)
		switch v {
		case Reply:
			s.writeUDP(u, resp, addr)
		case Wait:
			s.goSlowUDP(u, r, addr, out[:0])
		}
	}
}

// startPollerReader starts u's reader goroutine under keepReading, which
// restarts it (readers.go).
func (s *Server) startPollerReader(u *udpSock) {
	s.wg.Add(1)
	s.readersLive.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, maxQuerySize+1)
		out := make([]byte, 0, 4096)
		// One request per reader, reused: its parsed name lives inside it,
		// so a query allocates nothing on this path.
		r := new(Request)
		s.keepReading(u, func() error { return s.readUDP(u, buf, out, r) })
	}()
}

func (s *Server) writeUDP(u *udpSock, b []byte, addr netip.AddrPort) {
	if err := u.writeTo(b, addr); err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("UDP write failed", "client", addr, "err", err)
	}
}

// awaitInflight waits, at most until ctx is done, for the queries being
// resolved off the readers: their answers leave through the UDP sockets,
// so Shutdown closes those only afterwards. After Drain no new query
// reaches the sockets, so the wait is bounded by the slowest exchange
// already under way (QueryTimeout), not by traffic.
func (s *Server) awaitInflight(ctx context.Context) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for len(s.sem) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// goSlowUDP hands r to a goroutine, or has the handler refuse it at once
// when MaxInflight queries, or the client's share of them, are already
// being resolved.
func (s *Server) goSlowUDP(u *udpSock, r *Request, addr netip.AddrPort, scratch []byte) {
	if !s.admit(r.Client) {
		s.writeUDP(u, s.h.Refuse(scratch, r), addr)
		return
	}
	// The reader reuses its buffer and its Request: the goroutine gets a
	// copy of its own.
	req := r.detached()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.cfg.Panics.Recover(s.log, "answering a UDP query off the reader", "client", req.Client)
		s.writeUDP(u, s.resolve(req), addr)
	}()
}

// resolve has the handler resolve req off the reader, and gives back the
// in-flight slot admit took for it however Resolve returns (a panic
// included: the caller's goroutine recovers it).
func (s *Server) resolve(req *Request) []byte {
	defer s.leave(req.Client)
	return s.h.Resolve(s.ctx, make([]byte, 0, 1024), req)
}
