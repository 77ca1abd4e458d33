package pipeline

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/server"
)

// The Event says which namespace a pod's query came from, how many of its
// lookups went upstream, and what the search path made of it: the
// expansions a pod sent, the name it looked up, its search list and the
// step that answered.
func TestEventNamespaceAndSearch(t *testing.T) {
	node := netip.MustParseAddr("127.0.0.2")
	for _, autopath := range []bool{true, false} {
		ev := &events{}
		p, err := New(Config{Resolver: externalResolver(), Cluster: testCluster(), Pods: fakePods{podClient: "team-a"},
			Autopath: autopath, Search: []string{"corp.example."}, Observer: ev, ClientNamespaces: true})
		if err != nil {
			t.Fatal(err)
		}
		ask := func(from netip.Addr, name string, qtype uint16) Event {
			t.Helper()
			req := new(server.Request)
			req.Read("udp", 0, from, time.Now(), packet(t, name, qtype, true))
			if _, v := p.Answer(nil, req); v == server.Wait {
				p.Resolve(context.Background(), nil, req)
			}
			return ev.last()
		}
		type want struct {
			ns                         string
			upstream                   int
			expansion                  bool
			base                       string
			list, winner, steps, saved int
		}
		cases := []struct {
			name  string
			from  netip.Addr
			qname string
			qtype uint16
			on    want // autopath on
			off   want // autopath off
		}{
			{"not a pod", node, "api.example.com.", dns.TypeA,
				want{ns: "", upstream: 1, winner: -1}, want{ns: "", upstream: 1, winner: -1}},
			{"a pod asking an FQDN", podClient, "api.example.com.", dns.TypeA,
				want{ns: "team-a", upstream: 1, winner: -1}, want{ns: "team-a", upstream: 1, winner: -1}},
			{"a pod's own Service by its short name", podClient, "web.team-a.svc.cluster.local.", dns.TypeA,
				want{ns: "team-a", winner: -1}, want{ns: "team-a", winner: -1}},
			// The walk: the cluster's three steps are NXDOMAIN, the node's
			// domain too (upstream), the name itself answers (upstream).
			{"an external name's first expansion", podClient, "api.example.com.team-a.svc.cluster.local.", dns.TypeA,
				want{ns: "team-a", upstream: 2, expansion: true, base: "api.example.com", list: 5, winner: 4, steps: 5, saved: 4},
				want{ns: "team-a", expansion: true, base: "api.example.com", list: 5, winner: -1}},
			{"another namespace's Service, first expansion", podClient, "db.team-b.team-a.svc.cluster.local.", dns.TypeA,
				want{ns: "team-a", expansion: true, base: "db.team-b", list: 5, winner: 1, steps: 2, saved: 1},
				want{ns: "team-a", expansion: true, base: "db.team-b", list: 5, winner: -1}},
			{"nothing anywhere", podClient, "nope.team-a.svc.cluster.local.", dns.TypeA,
				want{ns: "team-a", upstream: 2, expansion: true, base: "nope", list: 5, winner: 5, steps: 5},
				want{ns: "team-a", expansion: true, base: "nope", list: 5, winner: -1}},
			{"a later expansion the client sends itself", podClient, "nope.svc.cluster.local.", dns.TypeA,
				want{ns: "team-a", expansion: true, winner: -1}, want{ns: "team-a", expansion: true, winner: -1}},
			{"an expansion under the node's domain", podClient, "nope.corp.example.", dns.TypeA,
				want{ns: "team-a", upstream: 1, expansion: true, winner: -1}, want{ns: "team-a", upstream: 1, expansion: true, winner: -1}},
		}
		for _, c := range cases {
			w := c.on
			if !autopath {
				w = c.off
			}
			got := ask(c.from, c.qname, c.qtype)
			g := want{got.Namespace, got.Upstream, got.Expansion, got.SearchBase, got.SearchList, got.SearchWinner, got.AutopathSteps, got.AutopathSaved}
			if g != w {
				t.Errorf("autopath %v, %s: event %+v, want %+v", autopath, c.name, g, w)
			}
		}
		if !autopath {
			continue
		}
		// Asked again: the shortcut, on the reader, says the same of the
		// search path and that nothing went upstream.
		ask(podClient, "db.team-b.team-a.svc.cluster.local.", dns.TypeA)
		got := ask(podClient, "db.team-b.team-a.svc.cluster.local.", dns.TypeA)
		if got.Source != "autopath" || !got.Expansion || got.SearchBase != "db.team-b" || got.SearchList != 5 || got.SearchWinner != 1 || got.Upstream != 0 {
			t.Errorf("shortcut: event %+v", got)
		}
	}
}

// Without ClientNamespaces, a cache hit from a pod asks no namespace: the
// hot path pays nothing for per-namespace figures that are off.
func TestEventNoNamespaceWhenOff(t *testing.T) {
	s := hotServer(t, func(c *Config) { c.Pods = fakePods{client: "team-a"} })
	obs := &lastEvent{}
	s.cfg.Observer = obs
	serveOnce(s, packet(t, "www.example.test.", dns.TypeA, true), make([]byte, 0, 4096))
	if obs.ev.Namespace != "" {
		t.Fatalf("namespace %q without ClientNamespaces", obs.ev.Namespace)
	}
	s.cfg.ClientNamespaces = true
	serveOnce(s, packet(t, "www.example.test.", dns.TypeA, true), make([]byte, 0, 4096))
	if obs.ev.Namespace != "team-a" {
		t.Fatalf("namespace %q with ClientNamespaces", obs.ev.Namespace)
	}
}
