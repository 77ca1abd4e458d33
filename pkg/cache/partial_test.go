package cache_test

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
)

// TestCNAMEOnlyReply: a NOERROR reply whose CNAME chain does not reach the
// type asked says nothing about the chain's end but "no data there": a
// denial. Without an SOA it is not kept (as SOA-less denials are not);
// with one it is kept within the negative bounds, not for max-ttl. It
// used to be kept as an answer for the CNAME's TTL up to max-ttl (an
// hour), so an upstream that failed to follow the chain made the name
// read as "no address" for that long.
func TestCNAMEOnlyReply(t *testing.T) {
	soa := "example.org. 3600 IN SOA ns.example.org. h.example.org. 1 2 3 4 3600"
	for _, tc := range []struct {
		what string
		rrs  []string
		kept time.Duration // 0: not kept
	}{
		{"no SOA", []string{"{q} 3600 IN CNAME target.example.org."}, 0},
		{"a chain of two, no SOA", []string{"{q} 3600 IN CNAME mid.example.org.", "mid.example.org. 3600 IN CNAME target.example.org."}, 0},
		{"with an SOA", []string{"{q} 3600 IN CNAME target.example.org.", soa}, time.Minute},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c, up, clk := setup(t, cache.Config{MaxTTL: 2 * time.Hour, MaxNegativeTTL: time.Minute}, dnstest.Records(dns.RcodeSuccess, tc.rrs...))
			r, _, _ := resolve(t, c, "www.example.com.", dns.TypeA)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				t.Fatalf("the reply: %v", r)
			}
			kept := cached(t, c, up, "www.example.com.")
			if kept != (tc.kept > 0) {
				t.Fatalf("kept %v, want %v", kept, tc.kept > 0)
			}
			if !kept {
				return
			}
			clk.Advance(tc.kept + time.Second)
			if cached(t, c, up, "www.example.com.") {
				t.Fatalf("kept past %s", tc.kept)
			}
		})
	}
	// The CNAME asked for, and a chain that does reach the type, are
	// answers.
	c, up, _ := setup(t, cache.Config{}, dnstest.Records(dns.RcodeSuccess, "{q} 300 IN CNAME target.example.org."))
	resolve(t, c, "www.example.com.", dns.TypeCNAME)
	before := up.Count()
	resolve(t, c, "www.example.com.", dns.TypeCNAME)
	if up.Count() != before {
		t.Error("a CNAME asked for is not kept")
	}
	c, up, _ = setup(t, cache.Config{}, dnstest.Records(dns.RcodeSuccess, "{q} 300 IN CNAME target.example.org.", "target.example.org. 300 IN A 192.0.2.1"))
	resolve(t, c, "www.example.com.", dns.TypeA)
	if !cached(t, c, up, "www.example.com.") {
		t.Error("a chain that ends at the type is not kept")
	}
}

// TestErrorRcodesServeStale: an upstream that answers an expired entry's
// question with FORMERR, NOTIMP, REFUSED or SERVFAIL has failed, not
// answered: the stale answer goes out (RFC 8767 §4: only NOERROR and
// NXDOMAIN replace it), and the error is not what later queries get.
func TestErrorRcodesServeStale(t *testing.T) {
	for _, rc := range []int{dns.RcodeFormatError, dns.RcodeNotImplemented, dns.RcodeRefused, dns.RcodeServerFailure} {
		t.Run(dns.RcodeToString[rc], func(t *testing.T) {
			c, up, clk := setup(t, cache.Config{StaleFor: time.Hour, StaleAnswerAfter: 5 * time.Second}, dnstest.Zone(10))
			resolve(t, c, "st.example.test.", dns.TypeA)
			up.SetHandler(dnstest.Rcode(rc))
			clk.Advance(15 * time.Second)
			for i := range 2 {
				r, _, stale := resolve(t, c, "st.example.test.", dns.TypeA)
				if !stale || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
					t.Fatalf("query %d with the upstream answering %s: stale %v, %v; want the stale answer", i, dns.RcodeToString[rc], stale, r)
				}
			}
		})
	}
}
