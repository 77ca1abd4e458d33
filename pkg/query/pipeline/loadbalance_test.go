package pipeline

import (
	"context"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// TestLoadBalanceRotates: with LoadBalance on, successive replies (cache
// hits on the reader included) rotate the address records one step, so
// each address comes first in turn; off, the order is the stored one.
func TestLoadBalanceRotates(t *testing.T) {
	up := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN CNAME pool.example.", q.Question[0].Name)}
		for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
			m.Answer = append(m.Answer, dnstest.MustRRf("pool.example. 60 IN A %s", ip))
		}
		return m, nil
	}}
	c, err := cache.New(cache.Config{Size: 100}, exchangerOf(up))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, addr := start(t, Config{Resolver: c, LoadBalance: true})
	first := map[string]int{}
	for i := 0; i < 9; i++ {
		r := dnstest.Exchange(t, addr, "udp", q("www.example.", dns.TypeA))
		if len(r.Answer) != 4 || r.Answer[0].Header().Rrtype != dns.TypeCNAME {
			t.Fatalf("reply %d: %v", i, r)
		}
		first[r.Answer[1].(*dns.A).A.String()]++
	}
	if len(first) != 3 || first["192.0.2.1"] != 3 || first["192.0.2.2"] != 3 {
		t.Fatalf("first address over 9 replies: %v, want each of the three 3 times", first)
	}
	s.SetLoadBalance(false)
	for i := 0; i < 3; i++ {
		r := dnstest.Exchange(t, addr, "udp", q("www.example.", dns.TypeA))
		if r.Answer[1].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("loadbalance off: %v", r.Answer)
		}
	}
}

// exchangerOf adapts a fakeResolver to the cache's upstream.
type resolverExchanger struct{ r *fakeResolver }

func exchangerOf(r *fakeResolver) resolverExchanger { return resolverExchanger{r} }

func (e resolverExchanger) Exchange(ctx context.Context, o stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	res, err := e.r.Resolve(ctx, o, q)
	return res.Msg, err
}
