package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// loopProbe is the state of a CheckLoop under way: the probe's name
// (empty when none runs) and how many times it was resolved.
type loopProbe struct {
	name atomic.Value // string
	seen atomic.Int32
}

// saw counts name when it is the probe's.
func (l *loopProbe) saw(name string) {
	if probe := l.name.Load().(string); probe != "" && name == probe {
		l.seen.Add(1)
	}
}

// probing reports whether name is the probe's, while a check runs.
func (l *loopProbe) probing(name string) bool {
	probe := l.name.Load().(string)
	return probe != "" && name == probe
}

// CheckLoop detects a forwarding loop the way CoreDNS's loop plugin does: it
// sends a query for a random name to addr, one of the addresses this
// pipeline serves; if that name is resolved more than once, the upstream
// sends our own queries back to us (typically the node's resolv.conf
// points at this agent). It returns an error saying so, nil otherwise
// (including when the upstream does not answer within wait).
func (p *Pipeline) CheckLoop(ctx context.Context, addr netip.AddrPort, wait time.Duration) error {
	name := fmt.Sprintf("%x.%x.nodedns-loop-check.", rand.Uint64(), rand.Uint64())
	p.loop.seen.Store(0)
	p.loop.name.Store(name)
	defer p.loop.name.Store("")
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeHINFO)
	c := &dns.Client{Net: "udp", Timeout: wait}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = c.ExchangeContext(ctx, q, addr.String())
	}()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := p.loopErr(name); err != nil {
			return err
		}
		select {
		case <-done:
			// One last look: the reply may race the final count.
			return p.loopErr(name)
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (p *Pipeline) loopErr(name string) error {
	if n := p.loop.seen.Load(); n >= 2 {
		return fmt.Errorf("forwarding loop detected: the probe %s came back to this agent %d times; an upstream forwards to nodedns itself (check --upstream and /etc/resolv.conf)", name, n)
	}
	return nil
}
