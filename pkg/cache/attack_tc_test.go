package cache_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
)

// A truncated reply from the exchanger is a failure of the exchange: the
// stale answer the cache holds for exactly that case stands in (RFC 8767),
// instead of a reply the client would read as "no such record".
func TestTruncatedReplyServesStale(t *testing.T) {
	var truncate atomic.Bool
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		if truncate.Load() {
			m := new(dns.Msg)
			m.SetReply(r)
			m.Truncated = true
			_ = w.WriteMsg(m)
			return
		}
		dnstest.Records(dns.RcodeSuccess, "{q} 60 IN A 192.0.2.1")(w, r)
	})
	clk := newClock()
	c := newCache(t, cache.Config{StaleFor: time.Hour, StaleAnswerAfter: time.Second, PrefetchHits: -1}, clk, plainExchanger{up.Addr})
	resolve(t, c, "tc.example.test.", dns.TypeA)
	truncate.Store(true)
	clk.Advance(2 * time.Minute)
	r, _, stale, err := resolveFor(c, context.Background(), query("tc.example.test.", dns.TypeA, false, false))
	if err != nil || !stale || len(r.Answer) != 1 {
		t.Fatalf("upstream now truncates: err %v, stale %v, reply %v; want the stale answer", err, stale, r)
	}
}
