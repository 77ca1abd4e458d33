package metrics

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// walkEv is a pod's first expansion of base whose walk ended at step won
// of a list of 5 (team-a's three, corp.example, the name).
func walkEv(addr, ns, base string, qtype uint16, won int) pipeline.Event {
	e := nsEv(ns, addr, stage.SourceAutopath, dns.RcodeSuccess, base+"."+ns+".svc.cluster.local.")
	e.Qtype, e.Expansion, e.SearchBase, e.SearchList, e.SearchWinner = qtype, true, base, 5, won
	if won == 5 {
		e.Rcode = dns.RcodeNameError
	}
	return e
}

// The search-path report groups what pods asked by workload, says what
// answered each name and what a lookup costs the client with the agent's
// walk, without it, and written as an FQDN, and which ndots would send the
// outside names straight while the cluster's still walk.
func TestSearchPathReport(t *testing.T) {
	src := fullSources()
	pods := map[string]PodInfo{
		"10.244.0.5": {Namespace: "team-a", Name: "web-5d9f8c7b6-x2k4p", Kind: "Deployment", Workload: "web"},
		"10.244.0.6": {Namespace: "team-a", Name: "web-5d9f8c7b6-abcde", Kind: "Deployment", Workload: "web"},
		"10.244.0.7": {Namespace: "team-a", Name: "debug", Kind: "", Workload: ""},
	}
	src.Pod = func(a netip.Addr) (PodInfo, bool) { p, ok := pods[a.String()]; return p, ok }
	src.Search = func() (string, []string) { return "cluster.local.", []string{"corp.example."} }
	r := newRecorder(t, Config{TopSample: 1, Sources: src})
	for range 10 {
		for _, a := range []string{"10.244.0.5", "10.244.0.6"} {
			r.Observe(walkEv(a, "team-a", "api.example.com", dns.TypeA, 4))
			r.Observe(walkEv(a, "team-a", "api.example.com", dns.TypeAAAA, 4))
		}
		r.Observe(walkEv("10.244.0.5", "team-a", "db.team-b", dns.TypeA, 1))
	}
	r.Observe(walkEv("10.244.0.7", "team-a", "nope", dns.TypeA, 5))
	r.Observe(walkEv("10.244.0.99", "team-a", "gone.example", dns.TypeA, -1))
	sp := r.Stats().SearchPath
	if sp == nil || len(sp.Workloads) != 3 {
		t.Fatalf("search path report %+v, want 3 workloads", sp)
	}
	web := sp.Workloads[0]
	if web.Kind != "Deployment" || web.Name != "web" || len(web.Pods) != 2 || len(web.Lookups) != 2 || web.Ndots != 2 {
		t.Fatalf("web: %+v", web)
	}
	api, db := web.Lookups[0], web.Lookups[1]
	if api.Name != "api.example.com" || api.Lookups != 20 || strings.Join(api.Types, ",") != "A,AAAA" || api.Answer != "api.example.com." ||
		api.WithWalk != 2 || api.WithoutWalk != 10 || api.AsFQDN != 2 {
		t.Errorf("api: %+v", api)
	}
	if db.Name != "db.team-b" || db.Answer != "db.team-b.svc.cluster.local." || db.WithWalk != 1 || db.WithoutWalk != 2 || db.AsFQDN != 1 {
		t.Errorf("db: %+v", db)
	}
	var buf bytes.Buffer
	d := r.Stats()
	d.SearchPathReport(&buf)
	out := buf.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"search list: <namespace>.svc.cluster.local svc.cluster.local cluster.local corp.example, then the name itself",
		"team-a        Deployment web (pods web-5d9f8c7b6-abcde, web-5d9f8c7b6-x2k4p)",
		"api.example.com  A,AAAA  20       api.example.com.",
		"db.team-b.svc.cluster.local.",
		"dnsConfig.options ndots:2",
		"Pod debug",
		"nothing (NXDOMAIN)",
		"client 10.244.0.99 (no pod of this node now)",
		"not walked by the agent",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// The sample is bounded: many names from many pods keep searchTracked
// entries.
func TestSearchPathBounded(t *testing.T) {
	r := newRecorder(t, Config{TopSample: 1})
	for i := range 5 * searchTracked {
		r.Observe(walkEv("10.244.0.5", "team-a", "n"+strings.Repeat("x", i%50)+string(rune('a'+i%26))+".example", dns.TypeA, 4))
	}
	if n := len(r.search.snapshot(0)); n > searchTracked {
		t.Fatalf("%d lookups tracked, want at most %d", n, searchTracked)
	}
}

func TestNdotsAdvice(t *testing.T) {
	l := func(name string, step int) SearchLookup { return SearchLookup{Name: name, Step: step, List: 5} }
	for _, c := range []struct {
		ls   []SearchLookup
		want int
	}{
		{[]SearchLookup{l("api.example.com", 4)}, 2},
		{[]SearchLookup{l("api.example.com", 4), l("db.team-b", 1)}, 2},
		{[]SearchLookup{l("a.b.c.d.e.f", 4)}, 4},
		{[]SearchLookup{l("example.com", 4), l("db.team-b", 1)}, 0}, // one dot each: no ndots tells them apart
		{[]SearchLookup{l("localhost", 4)}, 0},
		{[]SearchLookup{l("db.team-b", 1)}, 0},
		{[]SearchLookup{l("nope", 5), l("x.y", -1)}, 0},
	} {
		if got := ndotsAdvice(c.ls); got != c.want {
			t.Errorf("ndotsAdvice(%v) = %d, want %d", c.ls, got, c.want)
		}
	}
}
