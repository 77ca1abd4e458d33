package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/miekg/dns"
)

// CheckLoop detects a forwarding loop the way CoreDNS's loop plugin does: it
// sends a query for a random name to itself; if that name arrives more than
// once, the upstream sends our own queries back to us (typically the node's
// resolv.conf points at this agent). It returns an error saying so, nil
// otherwise (including when the upstream does not answer within wait).
func (s *Server) CheckLoop(ctx context.Context, wait time.Duration) error {
	addrs := s.Addrs()
	if len(addrs) == 0 {
		return nil
	}
	name := fmt.Sprintf("%x.%x.nodedns-loop-check.", rand.Uint64(), rand.Uint64())
	s.loopSeen.Store(0)
	s.loopName.Store(name)
	defer s.loopName.Store("")
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeHINFO)
	c := &dns.Client{Net: "udp", Timeout: wait}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = c.ExchangeContext(ctx, q, addrs[0].String())
	}()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := s.loopErr(name); err != nil {
			return err
		}
		select {
		case <-done:
			// One last look: the reply may race the final count.
			return s.loopErr(name)
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (s *Server) loopErr(name string) error {
	if n := s.loopSeen.Load(); n >= 2 {
		return fmt.Errorf("forwarding loop detected: the probe %s came back to this agent %d times; an upstream forwards to nodedns itself (check --upstream and /etc/resolv.conf)", name, n)
	}
	return nil
}
