//go:build integration

package integration

// Differential test of the four plugins of issue 33 together, with the
// kubernetes plugin, the access list and forward, against CoreDNS 1.15 on
// one kube-apiserver: one Corefile of nsid, dns64 (allow_ipv4), acl
// (block type ANY), k8s_external, kubernetes, file (reloaded) and
// forward; nodedns runs what `nodedns migrate` makes of it. The questions
// cross the plugins: AAAA questions of zone-file names (IPv4-only, dual,
// CNAMEs to a cluster Service and to an external name, a wildcard,
// NXDOMAIN, a delegation), of Services and of external names through
// dns64, k8s_external's names, ANY questions (REFUSED by the access list
// on both sides), each over UDP and TCP, IPv4 and IPv6, with and without
// the NSID option. Zero differences (czRender: d64Render with the NSID
// payload and the TTLs of the zones both serve).
// Then the zone file is edited (an address changed, the serial bumped):
// both must answer the new address, translated by dns64, within the
// reload period, and every question is asked again. dns64's counter
// (coredns_dns64_requests_translated_total) must go up as much on both
// sides for the same questions. The departures of
// docs/plugins.md (k8s_external's ns1 glue and PTR, several hostname
// ingresses; zone files' DNAME and large replies) are not asked.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/dns64"
)

// czZone is the file zone: an IPv4-only name (WWW, edited), a dual-stack
// one, CNAMEs to the test's Services (NAMESPACE) and to the upstream's
// IPv4-only and dual-stack names, a wildcard, a delegation with glue.
const czZone = `$ORIGIN example.org.
$TTL 300
@        IN SOA ns1.example.org. hostmaster.example.org. SERIAL 7200 1800 86400 60
@        IN NS  ns1.example.org.
@        IN A   192.0.2.10
ns1      IN A   192.0.2.53
v4       IN A   WWW
dual     IN A   192.0.2.80
dual     IN AAAA 2001:db8::80
svc      IN CNAME v4.NAMESPACE.svc.cluster.local.
svcdual  IN CNAME dual.NAMESPACE.svc.cluster.local.
ext      IN CNAME v4only.example.com.
extdual  IN CNAME dual.example.com.
chain    IN CNAME svc
*.wild   IN A   192.0.2.99
sub      IN NS  ns.sub
ns.sub   IN A   192.0.2.77
`

// czOther is a zone served by a server block of its own, without nsid,
// dns64 or acl: CoreDNS answers its names from that block alone, so its
// IPv4-only name is not translated, while its CNAME targets, looked up
// through the whole server, are answered by the root block, dns64
// included.
const czOther = `$ORIGIN other.test.
@     300 IN SOA ns.other.test. hm.other.test. 7 7200 1800 86400 30
@     300 IN NS  ns.other.test.
ns    300 IN A   192.0.2.60
host  300 IN A   192.0.2.61
svc   300 IN CNAME v4.NAMESPACE.svc.cluster.local.
ext   300 IN CNAME v4only.example.com.
`

func czZoneText(ns, serial, v4 string) string {
	return strings.NewReplacer("NAMESPACE", ns, "SERIAL", serial, "WWW", v4).Replace(czZone)
}

// czCorefile is the test's Corefile (one server block, on 127.0.0.1 and
// ::1: dns64 translates for IPv6 clients, and for IPv4 ones with
// allow_ipv4); plugins are the configuration's dns64 and k8s_external.
func czCorefile(port, ready, metrics int, plugins, kubeconfig, zonefile, other, upstream string) string {
	return fmt.Sprintf(`other.test:%d {
  bind 127.0.0.1 ::1
  errors
  file %s
}
.:%d {
  bind 127.0.0.1 ::1
  errors
  ready 127.0.0.1:%d
  prometheus 127.0.0.1:%d
  nsid test-node-1
%s
  acl {
    block type ANY
  }
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
`, port, other, port, ready, metrics, plugins, kubeconfig, zonefile, zfReload, upstream)
}

// czRender is d64Render with the NSID payload in the head and the TTLs of
// the records of the zones both answer themselves (the file zone, the
// cluster zone, the external zone; synthesized AAAA records of their names
// too) as lines of their own; the upstream's are left out (nodedns's
// cache counts them down, CoreDNS here has no cache).
func czRender(m *dns.Msg) string {
	s := d64Render(m)
	head, rest, _ := strings.Cut(s, "\n")
	head += nsidNote(m)
	var ttls []string
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			n := strings.ToLower(h.Name)
			if h.Rrtype == dns.TypeOPT || !dns.IsSubDomain("example.org.", n) && !dns.IsSubDomain("cluster.local.", n) && !dns.IsSubDomain("ext.test.", n) {
				continue
			}
			ttls = append(ttls, fmt.Sprintf("ttl %s %s %d", n, dns.TypeToString[h.Rrtype], h.Ttl))
		}
	}
	slices.Sort(ttls)
	lines := append([]string{head}, slices.Compact(ttls)...)
	if rest != "" {
		lines = append(lines, rest)
	}
	return strings.Join(lines, "\n")
}

// czConfig is one configuration of dns64 and k8s_external.
type czConfig struct {
	name, plugins string
	// prefix is dns64's; allowIPv4: IPv4 clients get translations too;
	// translated are the AAAA questions (names, besides the IPv4-only
	// ones) that must be translated.
	prefix     string
	allowIPv4  bool
	translated []string
}

// TestCoreDNSZonesDifferential: see the file's comment. Two
// configurations: dns64 with allow_ipv4 and k8s_external's defaults;
// dns64 with a /64 prefix and translate_all for IPv6 clients only, and
// k8s_external with ttl and headless.
func TestCoreDNSZonesDifferential(t *testing.T) {
	cp := controlPlane(t)
	coredns := coreDNSBin(t)
	ensureKubeDNS(t, cp.Client)
	ns := d64Objects(t, cp)
	up := d64Upstream(t)
	for _, cfg := range []czConfig{
		{name: "allow_ipv4", plugins: "  dns64 {\n    allow_ipv4\n  }\n  k8s_external ext.test", prefix: dns64.DefaultPrefix, allowIPv4: true},
		{name: "translate_all_ipv6_clients", plugins: "  dns64 {\n    prefix fd00:64::/64\n    translate_all\n  }\n  k8s_external ext.test {\n    ttl 30\n    headless\n  }",
			prefix: "fd00:64::/64", translated: []string{"dual.example.org.", "svcdual.example.org.", "dual." + ns + ".svc.cluster.local.", "dual.example.com.",
				"extdual.example.org.", "ext." + ns + ".ext.test.", "lb." + ns + ".ext.test."}},
	} {
		t.Run(cfg.name, func(t *testing.T) { czRun(t, cp, coredns, ns, up.Addr, cfg) })
	}
}

// czRun is TestCoreDNSZonesDifferential for one configuration.
func czRun(t *testing.T, cp *ControlPlane, coredns, ns, upstream string, cfg czConfig) {
	prefix, err := dns64.ParsePrefix(cfg.prefix)
	if err != nil {
		t.Fatal(err)
	}
	zonefile := filepath.Join(t.TempDir(), "db.example.org")
	if err := os.WriteFile(zonefile, []byte(czZoneText(ns, "2026120201", "192.0.2.81")), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "db.other.test")
	if err := os.WriteFile(other, []byte(strings.ReplaceAll(czOther, "NAMESPACE", ns)), 0o644); err != nil {
		t.Fatal(err)
	}
	var corefile string
	var cPort, cMetrics int
	cdns, _ := startCoreDNSCorefile(t, coredns, func(port, ready int) string {
		cPort, cMetrics = port, dnstest.FreePort(t)
		corefile = czCorefile(port, ready, cMetrics, cfg.plugins, cp.Kubeconfig, zonefile, other, upstream)
		return corefile
	})
	cdns6 := net.JoinHostPort("::1", strconv.Itoa(cPort))
	// migrateCorefile fails the test when anything is not carried.
	mcfg, migrated := migrateCorefile(t, corefile)
	nd, nd6 := d64StartMigrated(t, mcfg, migrated)

	A, AAAA, ANY, SOA, NS, SRV, CNAME := dns.TypeA, dns.TypeAAAA, dns.TypeANY, dns.TypeSOA, dns.TypeNS, dns.TypeSRV, dns.TypeCNAME
	svc := "." + ns + ".svc.cluster.local."
	ext := "." + ns + ".ext.test."
	base := []struct {
		name  string
		types []uint16
	}{
		// file, through dns64
		{"example.org.", []uint16{SOA, NS, A, AAAA, ANY}},
		{"v4.example.org.", []uint16{A, AAAA, ANY, CNAME}},
		{"dual.example.org.", []uint16{AAAA}},
		{"svc.example.org.", []uint16{A, AAAA, CNAME}},
		{"svcdual.example.org.", []uint16{AAAA}},
		{"chain.example.org.", []uint16{AAAA}},
		{"ext.example.org.", []uint16{A, AAAA}},
		{"extdual.example.org.", []uint16{AAAA}},
		{"x.wild.example.org.", []uint16{A, AAAA}},
		{"nope.example.org.", []uint16{A, AAAA}},
		{"sub.example.org.", []uint16{NS, AAAA}},
		{"host.sub.example.org.", []uint16{A, AAAA}},
		// the cluster zone, through dns64
		{"v4" + svc, []uint16{A, AAAA, ANY}},
		{"dual" + svc, []uint16{AAAA}},
		{"hl" + svc, []uint16{AAAA}},
		{"nosuch" + svc, []uint16{AAAA}},
		// k8s_external, through dns64
		{"ext" + ext, []uint16{A, AAAA, SRV}},
		{"hl" + ext, []uint16{A, AAAA}},
		{"ext4" + ext, []uint16{A, AAAA, ANY}},
		{"lb" + ext, []uint16{A, AAAA}},
		{"lbhost" + ext, []uint16{A, AAAA}},
		{"noext" + ext, []uint16{AAAA}},
		{"ext.test.", []uint16{SOA}},
		// another server block's zone: without dns64 (nor nsid), but
		// for its CNAME targets; its ANY questions are left out (the
		// root block's access list applies there too: a departure)
		{"other.test.", []uint16{SOA, AAAA}},
		{"host.other.test.", []uint16{A, AAAA}},
		{"svc.other.test.", []uint16{A, AAAA}},
		{"ext.other.test.", []uint16{AAAA}},
		{"nope.other.test.", []uint16{AAAA}},
		// forwarded, through dns64
		{"v4only.example.com.", []uint16{A, AAAA, ANY}},
		{"cname.example.com.", []uint16{AAAA}},
		{"dual.example.com.", []uint16{AAAA}},
		{"nx.example.com.", []uint16{AAAA}},
	}
	var qs []zfQuestion
	for _, proto := range []string{"udp", "tcp", "udp6", "tcp6"} {
		for _, nsid := range []bool{true, false} {
			for _, n := range base {
				for _, qt := range n.types {
					qs = append(qs, zfQuestion{name: n.name, qtype: qt, proto: proto, nsid: nsid})
				}
			}
		}
	}
	total := 0
	compare := func(phase string) {
		t.Helper()
		diffs := 0
		for _, q := range qs {
			c, n := cdns, nd
			if strings.HasSuffix(q.proto, "6") {
				c, n = cdns6, nd6
			}
			rc, rn := zfAsk(t, c, q), zfAsk(t, n, q)
			total++
			if want, got := czRender(rc), czRender(rn); want != got {
				diffs++
				t.Errorf("%s, %s:\n  CoreDNS: %s\n  nodedns: %s", phase, q, strings.ReplaceAll(want, "\n", "\n           "),
					strings.ReplaceAll(got, "\n", "\n           "))
			}
			// What the test is about happened on both sides: ANY
			// refused, IPv4-only names translated where dns64 applies,
			// nothing translated where it does not.
			applies := cfg.allowIPv4 || strings.HasSuffix(q.proto, "6")
			mustTranslate := q.qtype == AAAA && applies && (q.name == "v4.example.org." || q.name == "svc.example.org." || q.name == "ext.example.org." ||
				q.name == "v4"+svc || q.name == "ext4"+ext || q.name == "svc.other.test." || q.name == "ext.other.test." || slices.Contains(cfg.translated, q.name))
			switch {
			case q.qtype == AAAA && (q.name == "host.other.test." || q.name == "other.test.") && czSynthesized(rc, prefix):
				t.Errorf("%s, %s: CoreDNS translated in another block's zone:\n%s", phase, q, rc)
			case q.qtype == ANY && rc.Rcode != dns.RcodeRefused:
				t.Errorf("%s, %s: CoreDNS answered %s, not REFUSED", phase, q, dns.RcodeToString[rc.Rcode])
			case mustTranslate && !czSynthesized(rc, prefix):
				t.Errorf("%s, %s: CoreDNS did not translate:\n%s", phase, q, rc)
			case !applies && czSynthesized(rc, prefix):
				t.Errorf("%s, %s: CoreDNS translated for an IPv4 client:\n%s", phase, q, rc)
			}
		}
		t.Logf("FIGURE CoreDNS zones differential %s (nsid, dns64, acl, k8s_external, kubernetes, file, forward), %s: %d questions (UDP and TCP, IPv4 and IPv6, with and without NSID), %d differences",
			cfg.name, phase, len(qs), diffs)
	}
	// dns64's counter: the same count of translations on both sides for
	// the same questions (each reply synthesized, a CNAME target's
	// included). nodedns's /metrics is on its admin address (migrate's
	// prometheus, the address d64StartMigrated set). The waits on the
	// edit below ask each side a different number of times: the
	// questions after it are counted from after the waits.
	metrics := map[string]string{"CoreDNS": "http://127.0.0.1:" + strconv.Itoa(cMetrics) + "/metrics",
		"nodedns": fmt.Sprintf("http://%v/metrics", mcfg["admin"])}
	translated := func() map[string]float64 {
		t.Helper()
		counts := map[string]float64{}
		for who, url := range metrics {
			counts[who] = czCounter(t, url, "coredns_dns64_requests_translated_total")
		}
		return counts
	}
	compareTranslated := func(phase string, before map[string]float64) {
		t.Helper()
		// Counted when the reply is sent (nodedns's observer): waited on.
		now := translated()
		for deadline := time.Now().Add(5 * time.Second); now["CoreDNS"]-before["CoreDNS"] != now["nodedns"]-before["nodedns"] && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			now = translated()
		}
		c, n := now["CoreDNS"]-before["CoreDNS"], now["nodedns"]-before["nodedns"]
		if c == 0 || c != n {
			t.Errorf("%s: coredns_dns64_requests_translated_total went up by %v in CoreDNS, %v in nodedns", phase, c, n)
		}
		t.Logf("FIGURE CoreDNS zones differential %s, %s: coredns_dns64_requests_translated_total +%v in CoreDNS, +%v in nodedns", cfg.name, phase, c, n)
	}
	compare("before the edit")
	compareTranslated("before the edit", map[string]float64{})

	// The edit: v4.example.org's address and the serial. Both must
	// answer the AAAA question with the new address translated within
	// the reload period (plus one for the tick's phase and the load).
	edited := time.Now()
	if err := os.WriteFile(zonefile, []byte(czZoneText(ns, "2026120202", "192.0.2.82")), 0o644); err != nil {
		t.Fatal(err)
	}
	want := net.IP(dns64.Embed(prefix, netip.MustParseAddr("192.0.2.82")).AsSlice())
	for _, s := range []struct{ who, addr string }{{"CoreDNS", cdns6}, {"nodedns", nd6}} {
		q := zfQuestion{name: "v4.example.org.", qtype: AAAA, proto: "udp6"}
		dnstest.WaitFor(t, 2*zfReload+3*time.Second, s.who+" answering the edited zone through dns64", func() bool {
			r := zfAsk(t, s.addr, q)
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.AAAA); ok && a.AAAA.Equal(want) {
					return true
				}
			}
			return false
		})
		t.Logf("FIGURE CoreDNS zones differential %s: zone file edit seen by %s after %v (reload %v)", cfg.name, s.who, time.Since(edited).Round(10*time.Millisecond), zfReload)
	}
	afterWaits := translated()
	compare("after the edit")
	compareTranslated("after the edit", afterWaits)
	t.Logf("FIGURE CoreDNS zones differential %s: %d answers compared", cfg.name, total)
}

// czSynthesized reports whether m holds an AAAA record in prefix.
func czSynthesized(m *dns.Msg, prefix netip.Prefix) bool {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.AAAA); ok {
			if ip, ok := netip.AddrFromSlice(a.AAAA); ok && prefix.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// czCounter is the sum over its series of the counter name at url.
func czCounter(t *testing.T, url, name string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	var v float64
	if mf := mfs[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			v += counterValue(m)
		}
	}
	return v
}
