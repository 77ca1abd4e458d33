package pipeline

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/zonefile"
)

// testZoneText is a zone of example.org with the cases the pipeline
// handles beyond the zone's own answers: CNAME targets outside the zone
// and missing in it.
const testZoneText = `$ORIGIN example.org.
$TTL 300
@        IN SOA ns1 hostmaster 1 7200 1800 86400 60
@        IN NS  ns1
ns1      IN A   192.0.2.53
www      IN A   192.0.2.80
outside  IN CNAME www.example.net.
dangling IN CNAME nothere
`

func mustZoneFiles(tb testing.TB) *zonefile.Files {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "db.example.org")
	if err := os.WriteFile(p, []byte(testZoneText), 0o644); err != nil {
		tb.Fatal(err)
	}
	f, err := zonefile.New(zonefile.Config{Zones: []zonefile.Zone{{File: p, Origins: []string{"example.org."}}}})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// withZoneFiles serves example.org from a zone file, a zone none of the
// hot-path questions is in.
func withZoneFiles(tb testing.TB) func(*Config) {
	f := mustZoneFiles(tb)
	return func(c *Config) { c.Files = f }
}

// withNSID turns nsid on (the hot-path questions carry no NSID option).
func withNSID(c *Config) {
	if c.Plugins == nil {
		c.Plugins = &Plugins{}
	}
	pl := *c.Plugins
	pl.NSID = &NSID{Data: "node-1"}
	c.Plugins = &pl
}

// TestZoneFile: the zone's answers, authoritative; a CNAME to an outside
// name gets the target's records through the stages (the upstream here);
// a CNAME to a missing name of the zone gets the zone's NXDOMAIN.
func TestZoneFile(t *testing.T) {
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Cluster: testCluster(), Files: mustZoneFiles(t)})
	r := dnstest.Exchange(t, addr, "udp", q("www.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 || len(r.Ns) != 1 {
		t.Fatalf("www: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("outside.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 2 || r.Answer[1].(*dns.A).A.String() != "192.0.2.7" {
		t.Fatalf("outside: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("dangling.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 1 || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("dangling: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("nope.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError || !r.Authoritative || len(r.Ns) != 1 {
		t.Fatalf("nope: %v", r)
	}
	// The cluster zone and the rest are untouched.
	if r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("cluster: %v", r)
	}
}

// BenchmarkPluginsMatching is the cost of the file and nsid plugins when
// they match: a zone file's answer on the reader, and a cache hit and a
// cluster answer carrying NSID (against the same without NSID).
func BenchmarkPluginsMatching(b *testing.B) {
	s := hotServer(b, withZoneFiles(b), withNSID)
	nsid := func(name string, qtype uint16) []byte {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
		return dnstest.Pack(m)
	}
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"file answer", packet(b, "www.example.org.", dns.TypeA, true)},
		{"file NXDOMAIN", packet(b, "nope.example.org.", dns.TypeA, true)},
		{"cache hit", packet(b, "www.example.test.", dns.TypeA, true)},
		{"cache hit with NSID", nsid("www.example.test.", dns.TypeA)},
		{"cluster answer", packet(b, "web.team-a.svc.cluster.local.", dns.TypeA, true)},
		{"cluster answer with NSID", nsid("web.team-a.svc.cluster.local.", dns.TypeA)},
	} {
		out := make([]byte, 0, 4096)
		if _, v := serveOnce(s, c.pkt, out); v != server.Reply {
			b.Fatalf("%s: verdict %d, want a reply on the reader", c.name, v)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serveOnce(s, c.pkt, out)
			}
		})
	}
}

// TestZoneFileFailed: a zone whose file is missing (reload set) is
// SERVFAIL, written by the pipeline (no NSID, as CoreDNS's server writes
// it); a zone with fallthrough passes its NXDOMAIN on.
func TestZoneFileFailed(t *testing.T) {
	missing, err := zonefile.New(zonefile.Config{Zones: []zonefile.Zone{{File: filepath.Join(t.TempDir(), "absent"),
		Origins: []string{"example.org."}, Reload: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Files: missing, Plugins: &Plugins{NSID: &NSID{Data: "n"}}})
	r := dnstest.Exchange(t, addr, "udp", qNSID("www.example.org.", dns.TypeA))
	if _, ok := nsidOf(r); r.Rcode != dns.RcodeServerFailure || ok {
		t.Fatalf("missing zone: %v", r)
	}

	p := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(p, []byte(testZoneText), 0o644); err != nil {
		t.Fatal(err)
	}
	fall, err := zonefile.New(zonefile.Config{Zones: []zonefile.Zone{{File: p, Origins: []string{"example.org."}, Fall: true}}})
	if err != nil {
		t.Fatal(err)
	}
	_, addr = start(t, Config{Resolver: &fakeResolver{}, Files: fall})
	r = dnstest.Exchange(t, addr, "udp", q("nope.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
		t.Fatalf("fallthrough: want the upstream's answer, got %v", r)
	}
}
