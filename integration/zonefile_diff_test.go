//go:build integration

package integration

// Differential test of CoreDNS's file and nsid plugins beside kubernetes
// and forward: CoreDNS 1.15 with a Corefile, and the nodedns binary with
// what `nodedns migrate` makes of the same Corefile (its zone-files, nsid
// and nsid-data keys), on one kube-apiserver, reading the same zone file,
// asked the same questions over UDP and TCP, with and without the NSID
// option. Zero differences: rcode, AA, every record as a set (the TTLs of
// authoritative answers too, but for records the upstream gave), the NSID
// payload; the cluster zone's SOA serial (the time of each one's last
// index change) is not compared. Then the zone file is edited (serial bumped) and both must
// answer the new records within the reload period, after which every
// question is asked again.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/internal/migrate"
)

// zfZone is the zone of the test: apex, CNAMEs in and out of the zone (to
// a name that exists upstream and to one that does not), a dangling
// CNAME, a wildcard and a wildcard CNAME, a delegation with glue, an
// empty non-terminal, an SRV with its target in the zone. SERIAL and
// WWW are replaced.
const zfZone = `$ORIGIN example.org.
$TTL 300
@        IN SOA ns1.example.org. hostmaster.example.org. SERIAL 7200 1800 86400 60
@        IN NS  ns1.example.org.
@        IN NS  ns2.example.org.
@        IN MX  10 mail.example.org.
ns1      IN A   192.0.2.53
ns2      IN A   192.0.2.54
mail     IN A   192.0.2.25
www      IN A   WWW
www      IN AAAA 2001:db8::80
alias    IN CNAME www
chain    IN CNAME alias
outside  IN CNAME www.example.net.
outnx    IN CNAME nx.example.net.
dangling IN CNAME nothere
*.wild   IN A   192.0.2.99
*.wild   IN TXT "wild"
*.cw     IN CNAME www
sub      IN NS  ns.sub
ns.sub   IN A   192.0.2.77
a.b.ent  IN A   192.0.2.1
_http._tcp IN SRV 0 0 80 www
`

func zfZoneText(serial, www string) string {
	return strings.NewReplacer("SERIAL", serial, "WWW", www).Replace(zfZone)
}

// zfReload is the reload period of both: short, so the edit shows soon.
const zfReload = 2 * time.Second

// zfOther is a second zone, served by a server block of its own without
// nsid: its answers carry no NSID in CoreDNS; its CNAMEs go to the
// cluster zone and out.
const zfOther = `$ORIGIN other.test.
@     300 IN SOA ns.other.test. hm.other.test. 7 7200 1800 86400 30
@     300 IN NS  ns.other.test.
ns    300 IN A   192.0.2.60
host  300 IN A   192.0.2.61
web   300 IN CNAME web.NAMESPACE.svc.cluster.local.
ext   300 IN CNAME www.example.com.
`

// zfCorefile is the Corefile of the test: nsid, kubernetes, file in the
// same server block, forward; another block serving a zone from a file,
// without nsid.
func zfCorefile(port, ready int, kubeconfig, zonefile, other, upstream string) string {
	return fmt.Sprintf(`other.test:%d {
  bind 127.0.0.1
  errors
  file %s
}
.:%d {
  bind 127.0.0.1
  errors
  ready 127.0.0.1:%d
  nsid test-node-1
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig %s
    pods insecure
    ttl 5
    fallthrough in-addr.arpa ip6.arpa
  }
  file %s example.org {
    reload %s
  }
  forward . %s
}
`, port, other, port, ready, kubeconfig, zonefile, zfReload, upstream)
}

// zfQuestion is one question over one transport, with or without NSID.
type zfQuestion struct {
	name  string
	qtype uint16
	proto string
	nsid  bool
}

func (q zfQuestion) String() string {
	s := q.name + " " + dns.TypeToString[q.qtype] + " over " + q.proto
	if q.nsid {
		s += " with NSID"
	}
	return s
}

func zfAsk(t *testing.T, addr string, q zfQuestion) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	m.SetEdns0(4096, false)
	if q.nsid {
		o := m.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
	}
	cl := &dns.Client{Net: q.proto, Timeout: 3 * time.Second, UDPSize: 4096}
	var err error
	for range 3 {
		var r *dns.Msg
		if r, _, err = cl.Exchange(m, addr); err == nil {
			return r
		}
	}
	t.Fatalf("%s of %s: %v", q, addr, err)
	return nil
}

// zfRender is diffRender with the TTLs of the records the upstream gave
// zeroed (nodedns's cache counts them down, CoreDNS here has no cache) and
// the NSID payload in the head.
func zfRender(m *dns.Msg) string {
	c := m.Copy()
	for _, sec := range [][]dns.RR{c.Answer, c.Ns, c.Extra} {
		for _, rr := range sec {
			n := strings.ToLower(rr.Header().Name)
			if !dns.IsSubDomain("example.org.", n) && !dns.IsSubDomain("cluster.local.", n) && !dns.IsSubDomain("other.test.", n) {
				rr.Header().Ttl = 0
			}
			if soa, ok := rr.(*dns.SOA); ok && n == "cluster.local." {
				soa.Serial = 0 // the time of the index's last change, each its own
			}
		}
	}
	s := diffRender(c)
	head, rest, _ := strings.Cut(s, "\n")
	head += nsidNote(m)
	if rest == "" {
		return head
	}
	return head + "\n" + rest
}

// nsidNote is m's NSID payload as " nsid=%q" (the hex undecodable
// shown as such), or "".
func nsidNote(m *dns.Msg) string {
	o := m.IsEdns0()
	if o == nil {
		return ""
	}
	var s string
	for _, e := range o.Option {
		if x, ok := e.(*dns.EDNS0_NSID); ok {
			b, err := hex.DecodeString(x.Nsid)
			if err != nil {
				s += fmt.Sprintf(" nsid=bad-hex(%q)", x.Nsid)
				continue
			}
			s += fmt.Sprintf(" nsid=%q", b)
		}
	}
	return s
}

// TestZoneFileDifferential: see the file's comment.
func TestZoneFileDifferential(t *testing.T) {
	cp := controlPlane(t)
	coredns := coreDNSBin(t)
	ns := clusterNS(t, cp.Client, "zf")
	single := corev1.IPFamilyPolicySingleStack
	createSvc(t, cp.Client, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &single, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, Ports: []corev1.ServicePort{svcPort("http", 80)}}})

	zonefile := filepath.Join(t.TempDir(), "db.example.org")
	if err := os.WriteFile(zonefile, []byte(zfZoneText("2026120201", "192.0.2.80")), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "db.other.test")
	if err := os.WriteFile(other, []byte(strings.ReplaceAll(zfOther, "NAMESPACE", ns)), 0o644); err != nil {
		t.Fatal(err)
	}
	cup, nup := plUpstream(t), plUpstream(t)
	cdns, _ := startCoreDNSCorefile(t, coredns, func(port, ready int) string {
		return zfCorefile(port, ready, cp.Kubeconfig, zonefile, other, cup.Addr)
	})

	// nodedns: what `nodedns migrate` makes of the same Corefile, nothing
	// dropped; its file and nsid keys, with the cluster and the upstream
	// as startAgent gives them.
	res, err := migrate.Migrate([]byte(zfCorefile(53, 8181, cp.Kubeconfig, zonefile, other, nup.Addr)), migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Dropped) > 0 {
		t.Fatalf("migrate dropped %v", res.Dropped)
	}
	if !res.Config.NSID || res.Config.NSIDData != "test-node-1" || len(res.Config.ZoneFiles) != 2 || strings.Join(res.Config.NSIDExcept, ",") != "other.test" {
		t.Fatalf("migrate: nsid %v %q except %v, zone files %+v", res.Config.NSID, res.Config.NSIDData, res.Config.NSIDExcept, res.Config.ZoneFiles)
	}
	var b strings.Builder
	for k, v := range map[string]any{"nsid": res.Config.NSID, "nsid-data": res.Config.NSIDData, "nsid-except": res.Config.NSIDExcept,
		"zone-files": res.Config.ZoneFiles} {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %s\n", k, j)
	}
	cfgPath := filepath.Join(t.TempDir(), "nodedns.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ndns := startAgent(t, cp, nup.Addr, "--config", cfgPath)

	A, AAAA, MX, TXT, SOA, NS, SRV, CNAME := dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT, dns.TypeSOA, dns.TypeNS, dns.TypeSRV, dns.TypeCNAME
	svc := "web." + ns + ".svc.cluster.local."
	base := []struct {
		name  string
		types []uint16
	}{
		{"example.org.", []uint16{SOA, NS, MX, A}},
		{"Example.ORG.", []uint16{SOA}},
		{"www.example.org.", []uint16{A, AAAA, TXT}},
		{"alias.example.org.", []uint16{A, CNAME, MX}},
		{"chain.example.org.", []uint16{AAAA}},
		{"outside.example.org.", []uint16{A, TXT}},
		{"outnx.example.org.", []uint16{A}},
		{"dangling.example.org.", []uint16{A}},
		{"x.wild.example.org.", []uint16{A, TXT, MX}},
		{"y.x.wild.example.org.", []uint16{A}},
		{"q.cw.example.org.", []uint16{A}},
		{"sub.example.org.", []uint16{NS, A}},
		{"host.sub.example.org.", []uint16{A}},
		{"nope.example.org.", []uint16{A, AAAA}},
		{"b.ent.example.org.", []uint16{A}},
		{"x.ent.example.org.", []uint16{A}},
		{"_http._tcp.example.org.", []uint16{SRV}},
		{svc, []uint16{A, AAAA}},
		{"nope." + ns + ".svc.cluster.local.", []uint16{A}},
		{"www.example.com.", []uint16{A}},
		{"nx.example.com.", []uint16{A}},
		{"other.test.", []uint16{SOA, NS}},
		{"host.other.test.", []uint16{A, TXT}},
		{"web.other.test.", []uint16{A}},
		{"ext.other.test.", []uint16{A}},
		{"nope.other.test.", []uint16{A}},
	}
	var qs []zfQuestion
	for _, proto := range []string{"udp", "tcp"} {
		for _, nsid := range []bool{true, false} {
			for _, n := range base {
				for _, qt := range n.types {
					qs = append(qs, zfQuestion{name: n.name, qtype: qt, proto: proto, nsid: nsid})
				}
			}
		}
	}
	compare := func(phase string) {
		t.Helper()
		diffs := 0
		for _, q := range qs {
			want, got := zfRender(zfAsk(t, cdns, q)), zfRender(zfAsk(t, ndns, q))
			if want != got {
				diffs++
				t.Errorf("%s, %s:\n  CoreDNS: %s\n  nodedns: %s", phase, q, strings.ReplaceAll(want, "\n", "\n           "),
					strings.ReplaceAll(got, "\n", "\n           "))
			}
		}
		t.Logf("FIGURE zone file differential, %s: %d questions (UDP and TCP, with and without NSID), %d differences", phase, len(qs), diffs)
	}
	compare("before the edit")

	// The edit: a new address for www and a new serial. Both must answer
	// it within the reload period (plus one for the tick's phase and the
	// machine's load); the time each took is reported.
	edited := time.Now()
	if err := os.WriteFile(zonefile, []byte(zfZoneText("2026120202", "192.0.2.81")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ who, addr string }{{"CoreDNS", cdns}, {"nodedns", ndns}} {
		q := zfQuestion{name: "www.example.org.", qtype: A, proto: "udp"}
		dnstest.WaitFor(t, 2*zfReload+3*time.Second, s.who+" answering the edited zone", func() bool {
			r := zfAsk(t, s.addr, q)
			return len(r.Answer) == 1 && r.Answer[0].(*dns.A).A.String() == "192.0.2.81"
		})
		t.Logf("FIGURE zone file edit seen by %s after %v (reload %v)", s.who, time.Since(edited).Round(10*time.Millisecond), zfReload)
	}
	compare("after the edit")
}
