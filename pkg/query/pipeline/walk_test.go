package pipeline

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// vanishingCluster is testCluster where one name can be deleted while the
// server runs (a Service removed).
type vanishingCluster struct {
	*fakeCluster
	name string
	gone atomic.Bool
}

func (c *vanishingCluster) Lookup(name string, qtype uint16) (stage.Result, bool) {
	if c.gone.Load() && name == c.name {
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: dns.RcodeNameError}, Ns: []dns.RR{clusterSOA}}
		return stage.Result{Msg: m}, true
	}
	return c.fakeCluster.Lookup(name, qtype)
}

// events records what the server reports.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) Observe(ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) last() Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evs[len(e.evs)-1]
}

// A remembered winner that has gone is not answered from: the walk starts
// again and finds what a client walking its own list would find.
func TestAutopathWinnerGone(t *testing.T) {
	cl := &vanishingCluster{fakeCluster: testCluster(), name: "db.team-b.svc.cluster.local."}
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): "team-a"}
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: cl, Pods: pods, Autopath: true, Search: []string{"corp.example."}})
	const name = "db.team-b.team-a.svc.cluster.local."
	r := dnstest.Exchange(t, addr, "udp", q(name, dns.TypeA))
	if len(r.Answer) != 2 || r.Answer[0].(*dns.CNAME).Target != "db.team-b.svc.cluster.local." {
		t.Fatalf("before the delete: %v", r)
	}
	cl.gone.Store(true)
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		r = dnstest.Exchange(t, addr, "udp", q(name, qt))
		if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Fatalf("%s after the delete: %v; want NXDOMAIN", dns.TypeToString[qt], r)
		}
	}
}

// A walk where every step is NXDOMAIN saves the client nothing: it walks
// its own list after the NXDOMAIN.
func TestAutopathSavedCounts(t *testing.T) {
	ev := &events{}
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): "team-a"}
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Pods: pods, Autopath: true,
		Search: []string{"corp.example."}, Observer: ev})
	dnstest.Exchange(t, addr, "udp", q("api.example.com.team-a.svc.cluster.local.", dns.TypeA))
	if e := ev.last(); e.AutopathSteps != 5 || e.AutopathSaved != 4 {
		t.Fatalf("external name: steps %d saved %d, want 5 and 4", e.AutopathSteps, e.AutopathSaved)
	}
	r := dnstest.Exchange(t, addr, "udp", q("nothing.here.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError {
		t.Fatalf("nowhere: %v", r)
	}
	if e := ev.last(); e.AutopathSteps != 5 || e.AutopathSaved != 0 {
		t.Fatalf("nowhere: steps %d saved %d, want 5 and 0", e.AutopathSteps, e.AutopathSaved)
	}
}
