package pipeline

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/template"
)

// TestHostsStage: static records answer before the cluster zone and the
// resolver, authoritatively, in the client's case, over UDP and TCP; other
// names fall through; without fallthrough an unknown name in the zones is
// SERVFAIL (CoreDNS); PTR comes from the records.
func TestHostsStage(t *testing.T) {
	h, err := hosts.New(hosts.Config{Entries: []string{
		"192.0.2.50 static.example",
		"10.96.9.9 web.team-a.svc.cluster.local",
	}, Fallthrough: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	res := &fakeResolver{}
	s, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Hosts: h})
	for _, proto := range []string{"udp", "tcp"} {
		a := addr
		if proto == "tcp" {
			a = s.TCPAddrs()[0].String()
		}
		r := dnstest.Exchange(t, a, proto, q("StAtIc.Example.", dns.TypeA))
		if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 || r.Answer[0].Header().Name != "StAtIc.Example." ||
			r.Answer[0].(*dns.A).A.String() != "192.0.2.50" || r.Answer[0].Header().Ttl != 3600 {
			t.Fatalf("%s: %v", proto, r)
		}
	}
	// Before the cluster zone, as in CoreDNS's plugin order.
	r := dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.96.9.9" {
		t.Fatalf("hosts before cluster: %v", r)
	}
	// NODATA for the other family.
	r = dnstest.Exchange(t, addr, "udp", q("static.example.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 0 {
		t.Fatalf("AAAA: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("50.2.0.192.in-addr.arpa.", dns.TypePTR))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "static.example." {
		t.Fatalf("PTR: %v", r)
	}
	calls := res.calls.Load()
	r = dnstest.Exchange(t, addr, "udp", q("other.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || res.calls.Load() != calls+1 {
		t.Fatalf("fallthrough to the resolver: %v", r)
	}

	// Without fallthrough: SERVFAIL in the zones, others go on.
	h2, err := hosts.New(hosts.Config{Entries: []string{"192.0.2.50 static.example"}, Zones: []string{"example"}})
	if err != nil {
		t.Fatal(err)
	}
	_, addr2 := start(t, Config{Resolver: res, Hosts: h2})
	if r := dnstest.Exchange(t, addr2, "udp", q("other.example.", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("no fallthrough: %v", r)
	}
	if r := dnstest.Exchange(t, addr2, "udp", q("other.test.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("outside the zones: %v", r)
	}
}

// TestHostsInSearchPathWalk: each step of the walk goes through the static
// records, as CoreDNS's autopath asks the plugins after it.
func TestHostsInSearchPathWalk(t *testing.T) {
	h, err := hosts.New(hosts.Config{Entries: []string{"192.0.2.60 legacy.corp.example"}, Fallthrough: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	pod := netip.MustParseAddr("127.0.0.1")
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Hosts: h,
		Pods: fakePods{pod: "team-a"}, Autopath: true, Search: []string{"corp.example."}})
	r := dnstest.Exchange(t, addr, "udp", q("legacy.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || r.Answer[0].(*dns.CNAME).Target != "legacy.corp.example." ||
		r.Answer[1].(*dns.A).A.String() != "192.0.2.60" {
		t.Fatalf("walk through hosts: %v", r)
	}
}

// TestStageOrderForPodsOwnName: a pod's short name for a name of its own
// namespace (`web` from team-a, asked as web.team-a.svc.cluster.local.,
// the first expansion of its search list) is answered in the one stage
// order, templates and static records before the cluster zone, as the same
// question from a client that is no pod is. Asked twice: the second answer
// comes from what the first kept, if anything.
func TestStageOrderForPodsOwnName(t *testing.T) {
	h, err := hosts.New(hosts.Config{Entries: []string{"10.96.9.9 web.team-a.svc.cluster.local"}, Fallthrough: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	tpl := &Plugins{Templates: mustTemplates(t, template.Config{Class: "IN", Type: "A", Zones: []string{"cluster.local"},
		Match: []string{`^web\.team-a\.svc\.cluster\.local\.$`}, Answer: []string{"{{ .Name }} 60 IN A 10.96.9.8"},
		FallthroughSet: true})}
	pod := netip.MustParseAddr("127.0.0.1")
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"hosts", Config{Hosts: h}, "10.96.9.9"},
		{"template", Config{Plugins: tpl}, "10.96.9.8"},
		{"template before hosts", Config{Hosts: h, Plugins: tpl}, "10.96.9.8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, autopath := range []bool{false, true} {
				cfg := c.cfg
				cfg.Resolver, cfg.Cluster = externalResolver(), testCluster()
				cfg.Pods, cfg.Autopath = fakePods{pod: "team-a"}, autopath
				_, addr := start(t, cfg)
				for i := 0; i < 2; i++ {
					r := dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
					if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
						t.Fatalf("autopath %v, ask %d: %v", autopath, i+1, r)
					}
					a, ok := r.Answer[0].(*dns.A)
					if !ok || a.A.String() != c.want || a.Hdr.Name != "web.team-a.svc.cluster.local." {
						t.Errorf("autopath %v, ask %d: answer %v, want web.team-a.svc.cluster.local. A %s (the cluster's is 10.96.0.10)",
							autopath, i+1, r.Answer[0], c.want)
					}
				}
			}
		})
	}
}
