package pipeline

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/hosts"
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
		r := exchange(t, a, proto, q("StAtIc.Example.", dns.TypeA))
		if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 || r.Answer[0].Header().Name != "StAtIc.Example." ||
			r.Answer[0].(*dns.A).A.String() != "192.0.2.50" || r.Answer[0].Header().Ttl != 3600 {
			t.Fatalf("%s: %v", proto, r)
		}
	}
	// Before the cluster zone, as in CoreDNS's plugin order.
	r := exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.96.9.9" {
		t.Fatalf("hosts before cluster: %v", r)
	}
	// NODATA for the other family.
	r = exchange(t, addr, "udp", q("static.example.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 0 {
		t.Fatalf("AAAA: %v", r)
	}
	r = exchange(t, addr, "udp", q("50.2.0.192.in-addr.arpa.", dns.TypePTR))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "static.example." {
		t.Fatalf("PTR: %v", r)
	}
	calls := res.calls.Load()
	r = exchange(t, addr, "udp", q("other.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || res.calls.Load() != calls+1 {
		t.Fatalf("fallthrough to the resolver: %v", r)
	}

	// Without fallthrough: SERVFAIL in the zones, others go on.
	h2, err := hosts.New(hosts.Config{Entries: []string{"192.0.2.50 static.example"}, Zones: []string{"example"}})
	if err != nil {
		t.Fatal(err)
	}
	_, addr2 := start(t, Config{Resolver: res, Hosts: h2})
	if r := exchange(t, addr2, "udp", q("other.example.", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("no fallthrough: %v", r)
	}
	if r := exchange(t, addr2, "udp", q("other.test.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
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
	r := exchange(t, addr, "udp", q("legacy.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || r.Answer[0].(*dns.CNAME).Target != "legacy.corp.example." ||
		r.Answer[1].(*dns.A).A.String() != "192.0.2.60" {
		t.Fatalf("walk through hosts: %v", r)
	}
}
