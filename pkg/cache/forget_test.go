package cache_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
)

// cached reports whether a query for name/A is answered without asking
// up.
func cached(t *testing.T, c *cache.Cache, up *dnstest.Server, name string) bool {
	t.Helper()
	before := up.Count()
	resolve(t, c, name, dns.TypeA)
	return up.Count() == before
}

// TestForget: the entries Forget matches go, fresh and stale alike, and
// their StoredHits miss; the others stay; nothing counts as an eviction.
func TestForget(t *testing.T) {
	c, up, clk := setup(t, cache.Config{}, dnstest.Zone(60))
	for _, n := range []string{"a.example.test.", "b.example.test.", "a.example.com.", "old.example.com."} {
		resolve(t, c, n, dns.TypeA)
	}
	_, _, ref, ok := c.AppendHitRef(nil, "a.example.test.", dns.TypeA, dns.ClassINET, false, false)
	if !ok {
		t.Fatal("no stored hit")
	}
	// old.example.com expires: servable stale only.
	clk.Advance(61 * time.Second)
	resolve(t, c, "a.example.test.", dns.TypeA)
	resolve(t, c, "b.example.test.", dns.TypeA)
	resolve(t, c, "a.example.com.", dns.TypeA)
	ev := c.Stats().Evictions
	var asked []string
	n := c.Forget(func(name string) bool {
		asked = append(asked, name)
		return strings.HasSuffix(name, ".example.test.") || name == "old.example.com."
	})
	if n != 3 || len(asked) != 4 {
		t.Fatalf("Forget dropped %d of %d names asked (%v), want 3 of 4", n, len(asked), asked)
	}
	if got := c.Stats().Evictions; got != ev {
		t.Errorf("evictions %d after Forget, want %d", got, ev)
	}
	if _, ok := ref.Hit(); ok {
		t.Error("a StoredHit of a forgotten entry still hits")
	}
	if !cached(t, c, up, "a.example.com.") {
		t.Error("an entry Forget did not match is gone")
	}
	if cached(t, c, up, "a.example.test.") || cached(t, c, up, "b.example.test.") {
		t.Error("a forgotten entry answered")
	}
	// The stale entry is gone too: with the upstream down there is
	// nothing to serve.
	up.Stop()
	if r, _, _, err := resolveFor(c, context.Background(), query("old.example.com.", dns.TypeA, false, false)); err == nil && r.Rcode == dns.RcodeSuccess {
		t.Errorf("a forgotten stale entry was served: %v", r)
	}
}

// TestExchangeUnderWayAcrossSwap: a fetch begun before SetExchanger
// answers its query, but its reply is not stored, nor its failure
// remembered: both are the old upstream's.
func TestExchangeUnderWayAcrossSwap(t *testing.T) {
	for _, fail := range []bool{false, true} {
		gate := dnstest.NewGate(t)
		h := dnstest.Records(dns.RcodeSuccess, "{q} 300 IN A 192.0.2.1")
		if fail {
			h = dnstest.Drop
		}
		old := dnstest.Start(t, gate.Wrap(h))
		cur := dnstest.Start(t, dnstest.Records(dns.RcodeSuccess, "{q} 300 IN A 192.0.2.2"))
		c := newCache(t, cache.Config{}, newClock(), forwarderTimeout(t, 200*time.Millisecond, old.Addr))
		done := make(chan error, 1)
		go func() {
			_, _, _, err := resolveFor(c, context.Background(), query("slow.example.test.", dns.TypeA, false, false))
			done <- err
		}()
		dnstest.WaitFor(t, 10*time.Second, "the query reaches the old upstream", func() bool { return gate.Waiting() > 0 })
		c.SetExchanger(forwarder(t, cur.Addr))
		gate.Open()
		err := <-done
		if fail != (err != nil) {
			t.Fatalf("fail %v: the query under way: %v", fail, err)
		}
		r, _, _ := resolve(t, c, "slow.example.test.", dns.TypeA)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
			t.Fatalf("fail %v: after the swap: %v; want the new upstream's answer", fail, r)
		}
	}
}

// TestReconfigureDropsWhatItWouldNotKeep: a reload that disables caching
// for a zone, or lowers a lifetime bound, drops the entries the new
// settings would not have stored as they are; the others stay.
func TestReconfigureDropsWhatItWouldNotKeep(t *testing.T) {
	c, up, _ := setup(t, cache.Config{}, dnstest.Zone(3600))
	for _, n := range []string{"www.example.net.", "nx.example.net.", "www.example.org.", "nx.example.org.", "www.example.com.", "nx.example.com."} {
		resolve(t, c, n, dns.TypeA)
	}
	if err := c.Reconfigure(cache.Config{DisableSuccess: []string{"example.net."}, DisableDenial: []string{"example.org."}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kept bool
	}{
		{"www.example.net.", false}, {"nx.example.net.", true},
		{"www.example.org.", true}, {"nx.example.org.", false},
		{"www.example.com.", true}, {"nx.example.com.", true},
	} {
		if got := cached(t, c, up, tc.name); got != tc.kept {
			t.Errorf("%s after disable: kept %v, want %v", tc.name, got, tc.kept)
		}
	}
	// The lifetimes: an hour each; the bounds lowered to a minute.
	if err := c.Reconfigure(cache.Config{DisableSuccess: []string{"example.net."}, DisableDenial: []string{"example.org."},
		MaxTTL: time.Minute, MaxNegativeTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"www.example.com.", "nx.example.com."} {
		if cached(t, c, up, n) {
			t.Errorf("%s: kept its hour past a max TTL of a minute", n)
		}
		if r, _, _ := resolve(t, c, n, dns.TypeA); len(ttls(r)) == 0 || ttls(r)[0] > 60 {
			t.Errorf("%s asked again: TTLs %v, want at most 60", n, ttls(r))
		}
	}
}
