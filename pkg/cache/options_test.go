package cache_test

// The CoreDNS cache options the agent carries (keepttl, servfail, the
// denial minimum TTL, serve_stale's modes and policy, prefetch's window
// and percentage, disable, header's query clear rd): each against the
// behaviour CoreDNS 1.15's cache has.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

func TestKeepTTL(t *testing.T) {
	c, _, clk := setup(t, cache.Config{KeepTTL: true, PrefetchHits: -1}, dnstest.Zone(30))
	r, _, _ := resolve(t, c, "k.example.test.", dns.TypeA)
	wantTTL(t, "miss", r, 30)
	for _, after := range []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 20 * time.Second} {
		clk.Advance(after)
		m, _, ok := hit(t, c, "k.example.test.", dns.TypeA, false, false)
		if !ok {
			t.Fatal("miss")
		}
		wantTTL(t, "hit", m, 30)
		r, fromCache, _ := resolve(t, c, "k.example.test.", dns.TypeA)
		if !fromCache {
			t.Fatal("Resolve missed")
		}
		wantTTL(t, "Resolve hit", r, 30)
	}
	// The entry still expires when its lifetime is over.
	clk.Advance(7 * time.Second)
	if _, _, ok := hit(t, c, "k.example.test.", dns.TypeA, false, false); ok {
		t.Fatal("hit past the lifetime")
	}
	// A denial too keeps its TTL.
	resolve(t, c, "nx.example.test.", dns.TypeA)
	clk.Advance(10 * time.Second)
	m, _, ok := hit(t, c, "nx.example.test.", dns.TypeA, false, false)
	if !ok {
		t.Fatal("NXDOMAIN not cached")
	}
	wantTTL(t, "NXDOMAIN hit", m, 30)
}

func TestMinNegativeTTL(t *testing.T) {
	for _, tc := range []struct {
		min  time.Duration
		life uint32
	}{{0, 3}, {5 * time.Second, 5}, {10 * time.Second, 10}} {
		t.Run(fmt.Sprint(tc.min), func(t *testing.T) {
			c, up, clk := setup(t, cache.Config{MinNegativeTTL: tc.min, StaleFor: -1}, dnstest.Records(dns.RcodeNameError, soa(3, 3)))
			r, _, _ := resolve(t, c, "neg.example.test.", dns.TypeA)
			wantTTL(t, "miss", r, tc.life)
			clk.Advance(time.Duration(tc.life)*time.Second - time.Millisecond)
			if _, _, ok := hit(t, c, "neg.example.test.", dns.TypeA, false, false); !ok {
				t.Fatalf("gone before %ds", tc.life)
			}
			if up.Count() != 1 {
				t.Fatalf("upstream asked %d times", up.Count())
			}
		})
	}
	if _, err := cache.New(cache.Config{MinNegativeTTL: time.Hour, MaxNegativeTTL: time.Minute}, nil); err == nil {
		t.Fatal("a minimum above the maximum accepted")
	}
}

// failing fails every exchange with err, counting them.
type failing struct {
	err error
	n   atomic.Int64
}

func (f *failing) Exchange(context.Context, stage.Origin, *dns.Msg) (*dns.Msg, error) {
	f.n.Add(1)
	return nil, f.err
}

// TestFailureRemembered: when every upstream fails to answer, the failure
// is kept as a SERVFAIL for ServfailTTL (CoreDNS 1.15), so the next
// queries do not wait out the upstream again, and so is failfast's (every
// server marked down); a query shed by a bound, a name without servers,
// or one abandoned by its caller, is not a failure of the name.
func TestFailureRemembered(t *testing.T) {
	failed := errors.New("upstream: every attempt failed: i/o timeout")
	for _, tc := range []struct {
		name     string
		err      error
		cfg      cache.Config
		ctxDone  bool
		remember bool
	}{
		{"upstreams failed", failed, cache.Config{}, false, true},
		{"servfail off", failed, cache.Config{ServfailTTL: -1}, false, false},
		{"denial disabled", failed, cache.Config{DisableDenial: []string{"example.test."}}, false, false},
		{"shed", fmt.Errorf("upstream: too many exchanges in flight: %w", stage.ErrOverloaded), cache.Config{}, false, false},
		{"no server", fmt.Errorf("upstream: no server: %w", stage.ErrNoServer), cache.Config{}, false, false},
		{"every server down (failfast)", fmt.Errorf("upstream: every server is down: %w", stage.ErrAllDown), cache.Config{}, false, true},
		{"caller gone", failed, cache.Config{}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			up := &failing{err: tc.err}
			c := newCache(t, tc.cfg, clk, up)
			ctx, cancel := context.WithCancel(context.Background())
			if tc.ctxDone {
				cancel()
			}
			defer cancel()
			if _, _, _, err := resolveFor(c, ctx, query("f.example.test.", dns.TypeA, false, false)); err == nil {
				t.Fatal("no error")
			}
			_, rcode, ok := hit(t, c, "f.example.test.", dns.TypeA, false, false)
			if ok != tc.remember || ok && rcode != dns.RcodeServerFailure {
				t.Fatalf("kept %v rcode %d, want kept %v", ok, rcode, tc.remember)
			}
			if !tc.remember {
				return
			}
			clk.Advance(5 * time.Second)
			if _, _, ok := hit(t, c, "f.example.test.", dns.TypeA, false, false); ok {
				t.Fatal("kept past ServfailTTL")
			}
		})
	}
	t.Run("never over a stale answer", func(t *testing.T) {
		c, up, clk := setup(t, cache.Config{StaleAnswerAfter: time.Minute}, dnstest.Zone(10))
		resolve(t, c, "s.example.test.", dns.TypeA)
		up.Stop()
		clk.Advance(11 * time.Second)
		if _, _, stale := resolve(t, c, "s.example.test.", dns.TypeA); !stale {
			t.Fatal("not stale")
		}
		if _, _, stale := resolve(t, c, "s.example.test.", dns.TypeA); !stale {
			t.Fatal("the failure replaced the stale answer")
		}
	})
}

func TestDisable(t *testing.T) {
	c, up, _ := setup(t, cache.Config{DisableSuccess: []string{"example.net."}, DisableDenial: []string{"example.org."}},
		func(w dns.ResponseWriter, r *dns.Msg) {
			if len(r.Question[0].Name) > 2 && r.Question[0].Name[:2] == "sf" {
				dnstest.Rcode(dns.RcodeServerFailure)(w, r)
				return
			}
			dnstest.Zone(60)(w, r)
		})
	for _, tc := range []struct {
		name   string
		cached bool
	}{
		{"www.example.net.", false}, {"example.net.", false}, {"nx.example.net.", true},
		{"www.example.org.", true}, {"nx.example.org.", false}, {"sf.example.org.", false},
		{"www.example.test.", true}, {"nx.example.test.", true}, {"sf.example.test.", true},
		{"www.notexample.net.", true},
	} {
		resolve(t, c, tc.name, dns.TypeA)
		before := up.Count()
		resolve(t, c, tc.name, dns.TypeA)
		if cached := up.Count() == before; cached != tc.cached {
			t.Errorf("%s: cached %v, want %v", tc.name, cached, tc.cached)
		}
	}
}

// TestDisableClampsTTL: a reply of a zone whose answers (or denials) are
// not cached still carries the TTL it would have been kept for, clamped
// by MinTTL/MaxTTL (MinNegativeTTL/MaxNegativeTTL), as CoreDNS's cache
// writes every reply it passes on.
func TestDisableClampsTTL(t *testing.T) {
	c, up, _ := setup(t, cache.Config{MinTTL: 5 * time.Second, MinNegativeTTL: 7 * time.Second,
		DisableSuccess: []string{"example.net."}, DisableDenial: []string{"example.net."}}, dnstest.Zone(2))
	for _, tc := range []struct {
		name string
		ttl  uint32
	}{{"www.example.net.", 5}, {"nx.example.net.", 7}} {
		before := up.Count()
		for range 2 {
			r, _, _ := resolve(t, c, tc.name, dns.TypeA)
			for _, rr := range append(r.Answer, r.Ns...) {
				if rr.Header().Ttl != tc.ttl {
					t.Errorf("%s: %s, want TTL %d", tc.name, rr, tc.ttl)
				}
			}
		}
		if n := up.Count() - before; n != 2 {
			t.Errorf("%s: asked %d times, want 2 (not cached)", tc.name, n)
		}
	}
}

// TestPrefetchWindow: hits count toward popularity only while each comes
// within the window of the previous one (CoreDNS's prefetch DURATION).
func TestPrefetchWindow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		window   time.Duration
		gap      time.Duration
		prefetch bool
	}{
		{"hits within the window", 3 * time.Second, time.Second, true},
		{"hits further apart", 3 * time.Second, 4 * time.Second, false},
		{"no window", -1, 4 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, up, clk := setup(t, cache.Config{PrefetchHits: 2, PrefetchWindow: tc.window, PrefetchPercent: 50}, dnstest.Zone(10))
			resolve(t, c, "w.example.test.", dns.TypeA)
			// Hits at gap intervals until TTL 5 (50% of 10) is reached.
			for clk.Mono() < 5*time.Second {
				clk.Advance(tc.gap)
				if clk.Mono() >= 10*time.Second {
					break
				}
				hit(t, c, "w.example.test.", dns.TypeA, false, false)
			}
			if got := c.Stats().Prefetches == 1; got != tc.prefetch {
				t.Fatalf("prefetched %v, want %v", got, tc.prefetch)
			}
			if tc.prefetch {
				dnstest.WaitFor(t, 10*time.Second, "the prefetch", func() bool { return up.CountName("w.example.test.", dns.TypeA) == 2 })
			}
		})
	}
}

// TestPrefetchPercent: the refresh starts on the hit that sees the TTL
// (whole seconds, rounded up) at the share of the original (rounded up),
// and the refreshed entry keeps the hit count.
func TestPrefetchPercent(t *testing.T) {
	c, up, clk := setup(t, cache.Config{PrefetchHits: 2, PrefetchWindow: 3 * time.Second, PrefetchPercent: 50}, dnstest.Zone(10))
	resolve(t, c, "p.example.test.", dns.TypeA)
	var seen []uint32
	for i := 0; i < 8; i++ {
		clk.Advance(time.Second)
		m, _, ok := hit(t, c, "p.example.test.", dns.TypeA, false, false)
		if !ok {
			t.Fatalf("miss at %s", clk.Mono())
		}
		seen = append(seen, ttls(m)[0])
		if ttls(m)[0] == 5 {
			dnstest.WaitFor(t, 10*time.Second, "the prefetched entry", func() bool {
				m, _, ok := hit(t, c, "p.example.test.", dns.TypeA, false, false)
				return ok && ttls(m)[0] == 10
			})
		}
	}
	// 9 8 7 6 5 (prefetch), then the refreshed entry: 9 8 7.
	want := []uint32{9, 8, 7, 6, 5, 9, 8, 7}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("TTLs %v, want %v", seen, want)
	}
	if n := up.CountName("p.example.test.", dns.TypeA); n != 2 {
		t.Fatalf("upstream asked %d times, want 2", n)
	}
}

func TestServeStaleImmediate(t *testing.T) {
	t.Run("upstream down", func(t *testing.T) {
		c, up, clk := setup(t, cache.Config{StaleImmediate: true, StaleTTL: -1, StaleRetry: -1}, dnstest.Zone(10))
		resolve(t, c, "i.example.test.", dns.TypeA)
		up.SetHandler(dnstest.Drop)
		clk.Advance(11 * time.Second)
		start := time.Now()
		r, _, stale := resolve(t, c, "i.example.test.", dns.TypeA)
		if !stale || time.Since(start) > time.Second {
			t.Fatalf("stale %v after %s, want stale at once", stale, time.Since(start))
		}
		wantTTL(t, "stale", r, 0)
		dnstest.WaitFor(t, 10*time.Second, "one background refresh", func() bool { return up.CountName("i.example.test.", dns.TypeA) == 2 })
		// While it is out, no other refresh starts (a query decides on
		// the spot, and counts one it starts).
		refreshes := c.Stats().Refreshes
		resolve(t, c, "i.example.test.", dns.TypeA)
		if n := c.Stats().Refreshes - refreshes; n != 0 {
			t.Fatalf("%d refreshes started while one is out", n)
		}
		if n := up.CountName("i.example.test.", dns.TypeA); n != 2 {
			t.Fatalf("upstream asked %d times, want 2", n)
		}
	})
	t.Run("NXDOMAIN now", func(t *testing.T) {
		c, up, clk := setup(t, cache.Config{StaleImmediate: true, StaleTTL: 30 * time.Second}, dnstest.Zone(10))
		resolve(t, c, "i.example.test.", dns.TypeA)
		up.SetHandler(dnstest.Records(dns.RcodeNameError, soa(60, 60)))
		clk.Advance(11 * time.Second)
		r, _, stale := resolve(t, c, "i.example.test.", dns.TypeA)
		if !stale || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("first query: stale %v rcode %d, want the stale answer", stale, r.Rcode)
		}
		wantTTL(t, "stale", r, 30)
		dnstest.WaitFor(t, 10*time.Second, "the refresh to store NXDOMAIN", func() bool {
			_, rcode, ok := hit(t, c, "i.example.test.", dns.TypeA, false, false)
			return ok && rcode == dns.RcodeNameError
		})
	})
	t.Run("recheck after a failure", func(t *testing.T) {
		c, up, clk := setup(t, cache.Config{StaleImmediate: true, StaleRetry: 5 * time.Second}, dnstest.Zone(10))
		resolve(t, c, "i.example.test.", dns.TypeA)
		up.SetHandler(dnstest.Rcode(dns.RcodeServerFailure))
		clk.Advance(11 * time.Second)
		resolve(t, c, "i.example.test.", dns.TypeA)
		dnstest.WaitFor(t, 10*time.Second, "the failed refresh taken in", func() bool { return c.Stats().RefreshFailed == 1 })
		refreshes := c.Stats().Refreshes
		// A query decides on the spot whether to start a refresh, and
		// counts it if it does: none of these may.
		for i := 0; i < 4; i++ {
			clk.Advance(time.Second)
			resolve(t, c, "i.example.test.", dns.TypeA)
		}
		if n := c.Stats().Refreshes - refreshes; n != 0 {
			t.Fatalf("%d refreshes started within the recheck period, want none", n)
		}
		if n := up.CountName("i.example.test.", dns.TypeA); n != 2 {
			t.Fatalf("upstream asked %d times within the recheck period, want 2", n)
		}
		clk.Advance(time.Second)
		resolve(t, c, "i.example.test.", dns.TypeA)
		dnstest.WaitFor(t, 10*time.Second, "a refresh after the recheck period", func() bool { return up.CountName("i.example.test.", dns.TypeA) == 3 })
	})
}

func TestServeStaleVerifyWithoutTimer(t *testing.T) {
	// CoreDNS's serve_stale verify (no timeout): the query waits for the
	// upstream's own failure, then gets the stale answer.
	c, up, clk := setupHeld(t, cache.Config{StaleAnswerAfter: -1, StaleRetry: -1, StaleTTL: -1}, dnstest.Zone(10))
	resolve(t, c, "v.example.test.", dns.TypeA)
	gate := dnstest.NewGate(t)
	up.SetHandler(gate.Wrap(dnstest.Rcode(dns.RcodeServerFailure)))
	clk.Advance(11 * time.Second)
	// opened is set before the gate opens: a reply that finds it unset came
	// before the upstream answered, however late that was.
	var opened atomic.Bool
	done := make(chan *dns.Msg, 1)
	early := make(chan struct{})
	go func() {
		r, _, _, _ := resolveFor(c, context.Background(), query("v.example.test.", dns.TypeA, false, false))
		if !opened.Load() {
			close(early)
		}
		done <- r
	}()
	dnstest.WaitFor(t, 10*time.Second, "the verify to reach the upstream", func() bool { return gate.Waiting() == 1 })
	// Hold the upstream's answer a while, so that a reply not waiting on it
	// (one on a timer of its own, say) has the time to come first.
	select {
	case <-early:
		t.Fatal("answered before the upstream did")
	case <-time.After(200 * time.Millisecond):
	}
	opened.Store(true)
	gate.Open()
	r := <-done
	select {
	case <-early:
		t.Fatal("answered before the upstream did")
	default:
	}
	if r == nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("reply %v, want the stale answer", r)
	}
	wantTTL(t, "stale", r, 0)
	// No retry period: the next query verifies again.
	resolve(t, c, "v.example.test.", dns.TypeA)
	if n := up.CountName("v.example.test.", dns.TypeA); n != 3 {
		t.Fatalf("upstream asked %d times, want 3", n)
	}
	// A verify accepts NXDOMAIN.
	up.SetHandler(dnstest.Records(dns.RcodeNameError, soa(60, 60)))
	if r, _, stale := resolve(t, c, "v.example.test.", dns.TypeA); stale || r.Rcode != dns.RcodeNameError {
		t.Fatalf("stale %v rcode %d, want the NXDOMAIN", stale, r.Rcode)
	}
}

func TestServeStalePreferPositive(t *testing.T) {
	c, up, clk := setup(t, cache.Config{StalePreferPositive: true, StaleAnswerAfter: -1, StaleRetry: -1, StaleTTL: -1},
		dnstest.Zone(10))
	resolve(t, c, "pp.example.test.", dns.TypeA)
	up.SetHandler(dnstest.Records(dns.RcodeNameError, soa(60, 60)))
	clk.Advance(11 * time.Second)
	for i := 0; i < 3; i++ {
		r, _, stale := resolve(t, c, "pp.example.test.", dns.TypeA)
		if !stale || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("query %d: stale %v rcode %d, want the stale answer", i, stale, r.Rcode)
		}
	}
	if n := up.CountName("pp.example.test.", dns.TypeA); n != 4 {
		t.Fatalf("upstream asked %d times, want each query to verify (4)", n)
	}
	// A NOERROR that does not answer (a CNAME to nowhere) is no answer.
	up.SetHandler(dnstest.Records(dns.RcodeSuccess, "{q} 60 IN CNAME elsewhere.example.net."))
	if r, _, stale := resolve(t, c, "pp.example.test.", dns.TypeA); !stale || len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeA {
		t.Fatalf("stale %v %v, want the stale A", stale, r)
	}
	// An answer replaces it.
	up.SetHandler(dnstest.Zone(10))
	if _, _, stale := resolve(t, c, "pp.example.test.", dns.TypeA); stale {
		t.Fatal("an answer did not replace the stale one")
	}
	// Past the stale window the denial is served.
	up.SetHandler(dnstest.Records(dns.RcodeNameError, soa(60, 60)))
	clk.Advance(2 * time.Hour)
	if r, _, _ := resolve(t, c, "pp.example.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("rcode %d past the stale window, want NXDOMAIN", r.Rcode)
	}
}

func TestClearRD(t *testing.T) {
	var rd atomic.Int64
	c, _, _ := setup(t, cache.Config{ClearRD: true}, func(w dns.ResponseWriter, r *dns.Msg) {
		if r.RecursionDesired {
			rd.Add(1)
		}
		dnstest.Zone(10)(w, r)
	})
	resolve(t, c, "rd.example.test.", dns.TypeA)
	if rd.Load() != 0 {
		t.Fatal("the upstream query had RD set")
	}
}
