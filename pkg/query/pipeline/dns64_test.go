package pipeline

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/acl"
	"github.com/nodedns/nodedns/pkg/query/dns64"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/zonefile"
)

func mustDNS64(tb testing.TB, cfg dns64.Config) *dns64.DNS64 {
	tb.Helper()
	d, err := dns64.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// TestDNS64 pins where dns64 sits and what it answers: the cluster zone's
// NODATA for a Service with only an IPv4 address is translated (dns64 sees
// the cluster's answers), so is an ExternalName whose target has only A
// records; an NXDOMAIN is not; the synthesized reply is neither
// authoritative nor says RA, its TTL bounded by the SOA's.
func TestDNS64(t *testing.T) {
	res := externalResolver()
	pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true})}
	s, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Plugins: pl})
	for _, proto := range []string{"udp", "tcp"} {
		a := addr
		if proto == "tcp" {
			a = s.TCPAddrs()[0].String()
		}
		r := dnstest.Exchange(t, a, proto, q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s: cluster AAAA: %v", proto, r)
		}
		aaaa, ok := r.Answer[0].(*dns.AAAA)
		if !ok || aaaa.AAAA.String() != "64:ff9b::a60:a" || aaaa.Hdr.Ttl != 5 || aaaa.Hdr.Name != "web.team-a.svc.cluster.local." {
			t.Errorf("%s: synthesized %v, want web.team-a.svc.cluster.local. 5 AAAA 64:ff9b::a60:a", proto, r.Answer[0])
		}
		if r.Authoritative || r.RecursionAvailable {
			t.Errorf("%s: AA %v RA %v: want neither (CoreDNS's fresh reply)", proto, r.Authoritative, r.RecursionAvailable)
		}
	}
	// ExternalName to a target with A records only: CNAME kept, A made AAAA
	// with the TTL bounded by the AAAA reply's SOA (cluster SOA, 5).
	r := dnstest.Exchange(t, addr, "udp", q("ext.team-a.svc.cluster.local.", dns.TypeAAAA))
	if len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeCNAME || r.Answer[1].(*dns.AAAA).AAAA.String() != "64:ff9b::c000:20a" {
		t.Fatalf("ExternalName: %v", r)
	}
	// Upstream NODATA with a 60 s SOA, A of 60 s.
	r = dnstest.Exchange(t, addr, "udp", q("api.example.com.", dns.TypeAAAA))
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 60 || r.Answer[0].(*dns.AAAA).AAAA.String() != "64:ff9b::c000:20a" {
		t.Fatalf("upstream name: %v", r)
	}
	// NXDOMAIN stays.
	r = dnstest.Exchange(t, addr, "udp", q("nosuch.team-a.svc.cluster.local.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 || !r.Authoritative {
		t.Fatalf("NXDOMAIN: %v", r)
	}
	// A queries are not touched.
	r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeA || !r.Authoritative {
		t.Fatalf("A: %v", r)
	}
}

// TestDNS64Except: names of the except zones (a Corefile's other server
// blocks) are answered as without dns64, a CNAME target there too; the
// rest are translated.
func TestDNS64Except(t *testing.T) {
	pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true, Except: []string{"team-b.svc.cluster.local.", "example.com."}})}
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Plugins: pl})
	r := dnstest.Exchange(t, addr, "udp", q("db.team-b.svc.cluster.local.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !r.Authoritative {
		t.Errorf("except zone: %v, want the cluster's NODATA", r)
	}
	// ExternalName to api.example.com, its target in an except zone: not
	// translated there (the cluster's reply, the CNAME alone, would keep
	// its AA), so the reply is translated as a whole: CoreDNS's root
	// block's dns64 gets the CNAME without AAAA and synthesizes a fresh
	// reply from the A lookup of the name.
	r = dnstest.Exchange(t, addr, "udp", q("ext.team-a.svc.cluster.local.", dns.TypeAAAA))
	if len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeCNAME || r.Authoritative ||
		r.Answer[1].(*dns.AAAA).AAAA.String() != "64:ff9b::c000:20a" {
		t.Errorf("target in an except zone: %v, want the reply translated as a whole (no AA)", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "64:ff9b::a60:a" {
		t.Errorf("outside the except zones: %v, want the synthesized AAAA", r)
	}
}

// TestDNS64Family: without allow_ipv4 only IPv6 clients get translations.
func TestDNS64Family(t *testing.T) {
	pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{})}
	cfg := Config{Resolver: externalResolver(), Cluster: testCluster(), Plugins: pl}
	_, v4 := start(t, cfg)
	r := dnstest.Exchange(t, v4, "udp", q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("IPv4 client: %v, want NODATA", r)
	}
	_, v6 := startOn(t, "[::1]:0", cfg)
	r = dnstest.Exchange(t, v6, "udp", q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "64:ff9b::a60:a" {
		t.Fatalf("IPv6 client: %v, want the synthesized AAAA", r)
	}
}

// TestDNS64TranslateAll: an AAAA answer is replaced too.
func TestDNS64TranslateAll(t *testing.T) {
	cl := testCluster()
	cl.names["dual.team-a.svc.cluster.local."] = []dns.RR{dnstest.MustRRf("dual.team-a.svc.cluster.local. 5 IN A 169.254.7.7"),
		dnstest.MustRRf("dual.team-a.svc.cluster.local. 5 IN AAAA fd00::7")}
	for _, all := range []bool{false, true} {
		pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true, TranslateAll: all, Prefix: mustPrefix(t, "fd00:64::/64")})}
		_, addr := start(t, Config{Resolver: externalResolver(), Cluster: cl, Plugins: pl})
		r := dnstest.Exchange(t, addr, "udp", q("dual.team-a.svc.cluster.local.", dns.TypeAAAA))
		want := "fd00::7"
		if all {
			want = "fd00:64:0:0:a9:fe07:700:0"
		}
		if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != dnsIP(want) {
			t.Errorf("translate_all %v: %v, want %s", all, r.Answer, want)
		}
	}
}

func mustPrefix(tb testing.TB, s string) netip.Prefix {
	tb.Helper()
	p, err := dns64.ParsePrefix(s)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func dnsIP(s string) string { return netip.MustParseAddr(s).String() }

// TestDNS64Targets: an ExternalName's target is looked up through dns64,
// as CoreDNS's kubernetes plugin looks it up through its whole server:
// the target's synthesized AAAA makes the reply hold an AAAA, which is
// then not translated again, and keeps the cluster's AA.
func TestDNS64Targets(t *testing.T) {
	pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true})}
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Plugins: pl})
	r := dnstest.Exchange(t, addr, "udp", q("ext.team-a.svc.cluster.local.", dns.TypeAAAA))
	if len(r.Answer) != 2 || r.Answer[1].(*dns.AAAA).AAAA.String() != "64:ff9b::c000:20a" || !r.Authoritative {
		t.Fatalf("ExternalName through dns64: %v", r)
	}
}

// TestDNS64ZoneFileTargets: a zone file's CNAME target outside the zone
// (a Service, an upstream name) is looked up through dns64, as CoreDNS's
// file asks its whole server: the target's AAAA comes back synthesized,
// so the zone's reply holds an AAAA record, is not translated again and
// keeps its AA (CoreDNS 1.15, TestCoreDNSZonesDifferential).
func TestDNS64ZoneFileTargets(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db.example.org")
	zone := "$ORIGIN example.org.\n$TTL 300\n@ IN SOA ns1 hm 1 7200 1800 86400 60\n@ IN NS ns1\nns1 IN A 192.0.2.53\n" +
		"svc IN CNAME web.team-a.svc.cluster.local.\next IN CNAME api.example.com.\n"
	if err := os.WriteFile(p, []byte(zone), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := zonefile.New(zonefile.Config{Zones: []zonefile.Zone{{File: p, Origins: []string{"example.org."}}}})
	if err != nil {
		t.Fatal(err)
	}
	pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true})}
	obs := &translatedObserver{}
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Files: files, Plugins: pl, Observer: obs})
	for _, tc := range []struct {
		name, target, aaaa string
		ttl                uint32
	}{
		{"svc.example.org.", "web.team-a.svc.cluster.local.", "64:ff9b::a60:a", 5},
		{"ext.example.org.", "api.example.com.", "64:ff9b::c000:20a", 60},
	} {
		r := dnstest.Exchange(t, addr, "udp", q(tc.name, dns.TypeAAAA))
		if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 2 {
			t.Fatalf("%s: %v, want the zone's authoritative CNAME and the target's synthesized AAAA", tc.name, r)
		}
		cn, ok1 := r.Answer[0].(*dns.CNAME)
		aaaa, ok2 := r.Answer[1].(*dns.AAAA)
		if !ok1 || !ok2 || cn.Target != tc.target || aaaa.Hdr.Name != tc.target || aaaa.AAAA.String() != tc.aaaa || aaaa.Hdr.Ttl != tc.ttl {
			t.Errorf("%s: %v, want CNAME %s and %s %d AAAA %s", tc.name, r.Answer, tc.target, tc.target, tc.ttl, tc.aaaa)
		}
	}
	// Each counted once (the target's translation; the reply holds an
	// AAAA record then, not translated again), as CoreDNS counts its
	// inner request; a direct AAAA question of a Service too.
	dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
	dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	dnstest.WaitFor(t, 5*time.Second, "the 4 answers observed", func() bool { return obs.events.Load() == 4 })
	if n := obs.translated.Load(); n != 3 {
		t.Errorf("%d translations observed, want 3", n)
	}
}

// translatedObserver adds up the events' DNS64Translated.
type translatedObserver struct{ translated, events atomic.Int64 }

func (o *translatedObserver) Observe(ev Event) {
	o.translated.Add(int64(ev.DNS64Translated))
	o.events.Add(1)
}

// TestDNS64BeforeACL: dns64 wraps the access list, as in CoreDNS: an AAAA
// question the list refuses or filters is translated when the A question
// is allowed; refused when the A question is; a dropped AAAA question is
// dropped (no reply), a dropped A question SERVFAIL.
func TestDNS64BeforeACL(t *testing.T) {
	name := "web.team-a.svc.cluster.local."
	for _, tc := range []struct {
		policies []acl.Policy
		rcode    int
		synth    bool
		ede      []uint16
	}{
		{[]acl.Policy{{Action: acl.Block, Types: []string{"AAAA"}}}, dns.RcodeSuccess, true, nil},
		{[]acl.Policy{{Action: acl.Filter, Types: []string{"AAAA"}}}, dns.RcodeSuccess, true, nil},
		{[]acl.Policy{{Action: acl.Block, Types: []string{"A"}}}, dns.RcodeRefused, false, []uint16{dns.ExtendedErrorCodeBlocked}},
		{[]acl.Policy{{Action: acl.Filter, Types: []string{"A"}}}, dns.RcodeSuccess, false, []uint16{dns.ExtendedErrorCodeFiltered}},
		{[]acl.Policy{{Action: acl.Drop, Types: []string{"A"}}}, dns.RcodeServerFailure, false, nil},
	} {
		pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true}), ACL: mustACL(t, acl.Rule{Policies: tc.policies})}
		_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Plugins: pl})
		r := dnstest.Exchange(t, addr, "udp", qEDNS(name, dns.TypeAAAA))
		synth := len(r.Answer) == 1 && r.Answer[0].(*dns.AAAA).AAAA.String() == "64:ff9b::a60:a"
		codes := edeCodes(r)
		if r.Rcode != tc.rcode || synth != tc.synth || (tc.ede != nil && !slices.Equal(codes, tc.ede)) {
			t.Errorf("%+v: rcode %d synthesized %v EDE %v, want %d %v %v", tc.policies, r.Rcode, synth, codes, tc.rcode, tc.synth, tc.ede)
		}
	}
	pl := &Plugins{DNS64: mustDNS64(t, dns64.Config{AllowIPv4: true}),
		ACL: mustACL(t, acl.Rule{Policies: []acl.Policy{{Action: acl.Drop, Types: []string{"AAAA"}}}})}
	a, _ := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Plugins: pl})
	reqs.Read("udp", 0, client, time.Now(), packet(t, name, dns.TypeAAAA, true))
	if _, v := a.Answer(nil, reqs); v != server.Drop {
		t.Errorf("dropped AAAA question: verdict %d, want a drop", v)
	}
}
