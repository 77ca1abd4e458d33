//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// nlZone answers like a tiny central DNS and a tiny upstream: a few
// records by name, NXDOMAIN with the zone's SOA for the rest of zone.
func nlZone(zone string, rrs map[string][]string) dns.HandlerFunc {
	soa := fmt.Sprintf("%s 30 IN SOA ns.%s hostmaster.%s 1 7200 1800 86400 30", zone, zone, zone)
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		found := false
		for _, s := range rrs[name] {
			found = true
			rr := dnstest.MustRR(s)
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		switch {
		case !found:
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, dnstest.MustRR(soa))
		case len(m.Answer) == 0:
			m.Ns = append(m.Ns, dnstest.MustRR(soa))
		}
		dnstest.WriteTruncated(w, r, m)
	}
}

// TestNodeLocalDNSMigratedSameAnswers: NodeLocal DNSCache's Corefile, as
// its iptables and IPVS instructions fill it, run by CoreDNS 1.15 (what
// node-cache runs), and `nodedns migrate`'s configuration of it run by
// nodedns give the same answers: cluster names, a cluster NXDOMAIN and a
// PTR through the central DNS (asked over TCP by both: force_tcp), an
// external name, an external NXDOMAIN and NODATA through the upstream
// (node-cache's __PILLAR__UPSTREAM__SERVERS__). Each side has its own
// central DNS and upstream, on loopback; the cluster domain is not
// cluster.local, which migrate must be told.
func TestNodeLocalDNSMigratedSameAnswers(t *testing.T) {
	const domain = "k8s.example."
	cluster := map[string][]string{
		"kubernetes.default.svc." + domain: {"kubernetes.default.svc." + domain + " 5 IN A 169.254.128.1"},
		"1.128.254.169.in-addr.arpa.":      {"1.128.254.169.in-addr.arpa. 5 IN PTR kubernetes.default.svc." + domain},
	}
	external := map[string][]string{
		"www.example.org.": {"www.example.org. 300 IN A 192.0.2.10"},
	}
	coredns := coreDNSBin(t)
	for _, variant := range []string{"nodelocaldns-runtime", "nodelocaldns-ipvs"} {
		t.Run(variant, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("..", "internal", "migrate", "testdata", variant+".corefile"))
			if err != nil {
				t.Fatal(err)
			}
			base := strings.ReplaceAll(string(src), "cluster.local:53", strings.TrimSuffix(domain, ".")+":53")
			type side struct {
				central, up *dnstest.Server
				addr        string
			}
			newSide := func() *side {
				return &side{central: dnstest.Start(t, nlZone(domain, cluster)), up: dnstest.Start(t, nlZone("example.org.", external))}
			}
			fill := func(s *side, text string) string {
				// The kube-dns-upstream Service (iptables) or the kube-dns
				// ClusterIP (IPVS), and the node's resolvers.
				return strings.NewReplacer("__PILLAR__CLUSTER__DNS__", s.central.Addr, "forward . 10.96.0.10", "forward . "+s.central.Addr,
					"__PILLAR__UPSTREAM__SERVERS__", s.up.Addr).Replace(text)
			}

			// CoreDNS on loopback: bind, health and prometheus moved off
			// the node's addresses, ready added for the start.
			c := newSide()
			c.addr, _ = startCoreDNSCorefile(t, coredns, func(port, ready int) string {
				var out []string
				for _, l := range strings.Split(fill(c, base), "\n") {
					f := strings.Fields(l)
					switch {
					case len(f) > 0 && f[0] == "bind":
						l = "    bind 127.0.0.1"
					case len(f) > 0 && (f[0] == "health" || f[0] == "prometheus"):
						continue
					case strings.HasPrefix(l, ".:53 {"):
						l = ".:53 {\n    ready 127.0.0.1:" + strconv.Itoa(ready)
					}
					out = append(out, l)
				}
				return strings.ReplaceAll(strings.Join(out, "\n"), ":53 {", ":"+strconv.Itoa(port)+" {")
			})

			// nodedns with what migrate made of the same Corefile (its
			// node addresses kept: startMigrated listens on loopback).
			n := newSide()
			path := filepath.Join(t.TempDir(), "Corefile")
			if err := os.WriteFile(path, []byte(fill(n, base)), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, migrated := migrateCorefileArgs(t, path, "--cluster-domain", strings.TrimSuffix(domain, "."))
			if got := fmt.Sprint(cfg["cluster-domain"]); got != "[k8s.example]" {
				t.Fatalf("cluster-domain %s:\n%s", got, migrated)
			}
			n.addr, _ = startMigrated(t, cfg, migrated)

			for _, q := range []struct {
				name  string
				qtype uint16
			}{
				{"kubernetes.default.svc." + domain, dns.TypeA},
				{"nope.default.svc." + domain, dns.TypeA},
				{"kubernetes.default.svc." + domain, dns.TypeAAAA},
				{"1.128.254.169.in-addr.arpa.", dns.TypePTR},
				{"www.example.org.", dns.TypeA},
				{"www.example.org.", dns.TypeAAAA},
				{"nx.example.org.", dns.TypeA},
			} {
				var got [2]string
				for i, s := range []*side{c, n} {
					m, _, err := fdExchange(s.addr, q.name, q.qtype)
					if err != nil {
						t.Fatalf("%s %s from side %d: %v", q.name, dns.TypeToString[q.qtype], i, err)
					}
					got[i] = nlAnswer(m)
				}
				if got[0] != got[1] {
					t.Errorf("%s %s: CoreDNS %q, nodedns %q", q.name, dns.TypeToString[q.qtype], got[0], got[1])
				}
				t.Logf("%s %s: %s", q.name, dns.TypeToString[q.qtype], got[1])
			}
			for i, s := range []*side{c, n} {
				if s.central.TCPCount() == 0 || s.central.Count() != s.central.TCPCount() {
					t.Errorf("side %d: the central DNS was asked %d times, %d over TCP: want TCP only (force_tcp)", i, s.central.Count(), s.central.TCPCount())
				}
			}
		})
	}
}

// nlAnswer is what a client sees of a reply, TTLs aside: rcode, answer and
// the authority's types.
func nlAnswer(m *dns.Msg) string {
	var out []string
	for _, rr := range m.Answer {
		h := *rr.Header()
		out = append(out, strings.TrimPrefix(rr.String(), h.String()))
	}
	slices.Sort(out)
	var ns []string
	for _, rr := range m.Ns {
		ns = append(ns, dns.TypeToString[rr.Header().Rrtype])
	}
	return fmt.Sprintf("%s answer=%v ns=%v", dns.RcodeToString[m.Rcode], out, ns)
}
