package server

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// readUDP is one socket's reader. Cache hits and cluster answers are sent
// from here without a goroutine or a copy of the packet; anything that has
// to wait goes to a goroutine, bounded by MaxInflight. It returns nil once
// the socket is closed, or a *readerError for the supervisor (readers.go)
// when the socket fails.
func (s *Server) readUDP(u *udpSock, buf, out []byte, r *request) error {
	uc := u.uc.Load()
	for {
		n, addr, err := uc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.closing.Load() {
				return nil
			}
			return pollerReadError(err)
		}
		*r = request{proto: "udp", listener: u.listener, client: addr.Addr().Unmap(), start: time.Now(), raw: buf[:n]}
		resp, v := s.fast(out[:0], r)
		switch v {
		case verdictReply:
			s.writeUDP(u, resp, addr)
		case verdictSlow:
			s.goSlowUDP(u, r, addr, out[:0])
		}
	}
}

// startPollerReader starts u's reader goroutine under a supervisor that
// restarts it (readers.go).
func (s *Server) startPollerReader(u *udpSock) {
	s.wg.Add(1)
	s.readersLive.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, dns.MaxMsgSize)
		out := make([]byte, 0, 4096)
		// One request per reader, reused: its parsed name lives inside it,
		// so a query allocates nothing on this path.
		r := new(request)
		s.superviseReader(u, func() error { return s.readUDP(u, buf, out, r) })
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

// goSlowUDP hands r to a goroutine, or answers SERVFAIL at once when
// MaxInflight queries, or the client's share of them, are already being
// resolved.
func (s *Server) goSlowUDP(u *udpSock, r *request, addr netip.AddrPort, scratch []byte) {
	if !s.admit(r.client) {
		r.fail = failOverloaded
		s.writeUDP(u, s.reply(scratch, r, dns.RcodeServerFailure, SourceLocal), addr)
		return
	}
	// The reader reuses its buffer: the goroutine gets its own copy, and
	// the question's raw name must point into that copy.
	req := *r
	req.raw = append([]byte(nil), r.raw...)
	req.q.RawName = req.raw[dnswire.HeaderLen : dnswire.HeaderLen+len(r.q.RawName)]
	req.q.Detach()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.leave(req.client)
		out := s.slow(s.ctx, make([]byte, 0, 1024), &req)
		s.writeUDP(u, out, addr)
	}()
}
