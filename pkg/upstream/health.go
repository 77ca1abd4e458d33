package upstream

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Health follows CoreDNS's forward (plugin/pkg/proxy, plugin/pkg/up):
// failures are counted by health probes, not by queries. An exchange that
// fails (a timeout, a network error) starts the server's probe loop
// unless one runs: a probe (`DOMAIN IN NS`, RD unless no-rec, no EDNS,
// over the server's own transport, ProbeTimeout) at once, and after each
// failed one another after the interval, until one gets a reply (any
// rcode: the server is alive). Each failed probe counts; the server is
// down while more than MaxFails have failed since the last good one; the
// good probe clears the count and ends the loop. MaxFails 0: never down,
// never probed.
//
// Why probes and not the queries themselves: a probe asks what any live
// resolver answers from its cache at once, so a query that times out
// because one name is slow to resolve (a lame delegation, a DNSSEC chain
// being fetched) does not mark a live server down, and the count, the
// timing and the probe traffic are those of the CoreDNS the agent
// replaces (the differential tests compare both). A reply to a query
// never clears the count (CoreDNS's neither): only a probe does.

// Health configures how one group's servers are judged.
type Health struct {
	// MaxFails: a server is down while more probes than this have failed
	// since the last good one; 0: never down, never probed.
	MaxFails int
	// Interval is the pause between a failed probe and the next;
	// default 500ms.
	Interval time.Duration
	// Domain is the probe's question name (FQDN); default ".".
	Domain string
	// NoRec sends probes without RD (CoreDNS's `health_check ... no_rec`).
	NoRec bool
}

// defaultProbeTimeout bounds one probe, as CoreDNS's health checker: a
// longer read timeout for queries does not slow the probes down.
const defaultProbeTimeout = time.Second

func (h Health) normalized() Health {
	if h.Interval <= 0 {
		h.Interval = 500 * time.Millisecond
	}
	h.Domain = strings.ToLower(dns.Fqdn(h.Domain))
	return h
}

// key distinguishes servers of the same address whose groups judge them
// differently: each keeps its own count, as each CoreDNS forward block
// keeps its own proxies.
func (h Health) key() string {
	return fmt.Sprintf("mf=%d,hc=%s,d=%s,norec=%v", h.MaxFails, h.Interval, h.Domain, h.NoRec)
}

// Down reports whether the server is marked down: more probes than
// MaxFails failed since the last good one.
func (s *Server) Down() bool {
	m := s.health.MaxFails
	return m > 0 && int(s.fails.Load()) > m
}

// healthcheck starts the server's probe loop after a failed exchange,
// unless one runs, the server is never judged (MaxFails 0) or the
// forwarder is not running (nothing would stop the loop).
func (f *Forwarder) healthcheck(s *Server) {
	if s.health.MaxFails == 0 {
		return
	}
	ctx := f.runContext()
	if ctx == nil || !s.probing.CompareAndSwap(false, true) {
		return
	}
	s.probeLoops.Add(1)
	go f.probeLoop(ctx, s)
}

// probeLoop probes s until a probe gets a reply or ctx ends. A panic in a
// probe is recovered, counted and logged, and counts as a failed probe:
// the probes are what bring a down server back, so they must outlive a
// bug met while probing, and they must not take the agent down.
func (f *Forwarder) probeLoop(ctx context.Context, s *Server) {
	defer s.probing.Store(false)
	for {
		err := f.safeProbe(ctx, s)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			s.probeOK()
			return
		}
		s.probeFailed(err)
		t := time.NewTimer(s.health.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (f *Forwarder) safeProbe(ctx context.Context, s *Server) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = f.cfg.Panics.Caught(f.log, p, "probing an upstream", "server", s.Addr)
		}
	}()
	return f.probe(ctx, s)
}

func (s *Server) probeFailed(err error) {
	s.probeFailures.Add(1)
	n := s.fails.Add(1)
	if m := s.health.MaxFails; m > 0 && int(n) == m+1 {
		s.cfg.Logger.Warn("upstream marked down", "component", "upstream", "server", s.Addr,
			"failed_probes", n, "err", err)
	}
}

func (s *Server) probeOK() {
	if s.Down() {
		s.cfg.Logger.Info("upstream back up", "component", "upstream", "server", s.Addr)
	}
	s.fails.Store(0)
}

// probe asks the server the health question once; any reply, whatever
// its rcode, is a good probe.
func (s *Server) probe(ctx context.Context) error {
	q := new(dns.Msg)
	q.SetQuestion(s.health.Domain, dns.TypeNS)
	q.RecursionDesired = !s.health.NoRec
	timeout := s.cfg.ProbeTimeout
	_, err := s.exchangeOnce(ctx, q, timeout)
	return err
}
