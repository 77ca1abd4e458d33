package cache_test

// TTLs of 2^31 and more. RFC 2181 §8: a TTL with the most significant bit
// set is treated as if it were zero (unbound does). The cache used to read
// the 32-bit value as it is and clamp it to --max-ttl (1 h) for answers, or
// to --max-negative-ttl (30 min) for the SOA's TTL or MINIMUM of a denial:
// an upstream (or a spoofer who wins one race) pinned an answer for the
// longest lifetime the agent allows instead of none. (RFC 8767 §4 reads
// such TTLs the other way, as positive values capped at 7 days; nodedns
// follows RFC 2181 and unbound deliberately: docs/behaviour.md.)
//
// Each shape runs behind the forwarder (which zeroes such TTLs in every
// reply it hands back) and behind a bare exchanger (the cache's own rule).

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

func TestAttackHugeTTLIsZero(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rcode int
		rrs   []string
	}{
		{"answer 2^31", dns.RcodeSuccess, []string{"{q} 2147483648 IN A 192.0.2.1"}},
		{"answer 2^32-1", dns.RcodeSuccess, []string{"{q} 4294967295 IN A 192.0.2.1"}},
		{"one of two records 2^31", dns.RcodeSuccess, []string{"{q} 2147483648 IN A 192.0.2.1", "{q} 4000000000 IN A 192.0.2.2"}},
		{"NXDOMAIN SOA TTL and MINIMUM 2^31", dns.RcodeNameError, []string{soa(2147483648, 2147483648)}},
		{"NXDOMAIN SOA TTL 2^31", dns.RcodeNameError, []string{soa(2147483648, 3000)}},
		{"NXDOMAIN SOA MINIMUM 2^31", dns.RcodeNameError, []string{soa(3000, 4294967295)}},
		{"NODATA SOA TTL 2^32-1", dns.RcodeSuccess, []string{soa(4294967295, 4294967295)}},
	} {
		for _, via := range []string{"forwarder", "bare exchanger"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				up := dnstest.StartStable(t, dnstest.Records(tc.rcode, tc.rrs...))
				var ex stage.Exchanger = plainExchanger{up.Addr}
				if via == "forwarder" {
					ex = forwarder(t, up.Addr)
				}
				c := newCache(t, cache.Config{StaleFor: -1}, newClock(), ex)
				r, _, _ := resolve(t, c, "huge-ttl.example.test.", dns.TypeA)
				if r.Rcode != tc.rcode {
					t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				}
				// What the client may keep the reply for: each record's
				// TTL, and for a denial's SOA min(TTL, MINIMUM) (RFC 2308).
				var lives []uint32
				for _, rr := range append(append([]dns.RR(nil), r.Answer...), r.Ns...) {
					life := rr.Header().Ttl
					if s, ok := rr.(*dns.SOA); ok {
						life = min(life, s.Minttl)
					}
					lives = append(lives, life)
				}
				for _, life := range lives {
					if life != 0 {
						t.Errorf("the client may keep the reply for %v s (TTLs %v) though its TTLs are >= 2^31; RFC 2181 §8: treat as 0", lives, ttls(r))
						break
					}
				}
				if st := c.Stats(); st.Entries != 0 {
					m, _, _ := hit(t, c, "huge-ttl.example.test.", dns.TypeA, false, false)
					t.Errorf("kept in the cache (%d entries; a hit now has TTLs %v): a TTL >= 2^31 is 0, nothing to keep", st.Entries, ttls(m))
				}
			})
		}
	}
}

// The rule is the high bit, not a cap: 2^31-1 is a TTL (clamped to
// --max-ttl as any other).
func TestTTLBelowTheHighBitIsKept(t *testing.T) {
	c, _, _ := setup(t, cache.Config{StaleFor: -1}, dnstest.Records(dns.RcodeSuccess, "{q} 2147483647 IN A 192.0.2.1"))
	r, _, _ := resolve(t, c, "big-ttl.example.test.", dns.TypeA)
	if got := ttls(r); len(got) != 1 || got[0] != 3600 || c.Stats().Entries != 1 {
		t.Errorf("TTL 2^31-1: TTLs %v, %d entries; want 3600 (max-ttl) and kept", got, c.Stats().Entries)
	}
}
