//go:build integration

package integration

// Differential test of dns64 and k8s_external against CoreDNS 1.15 on one
// kube-apiserver: CoreDNS with a Corefile of dns64, k8s_external, the
// kubernetes plugin and forward; nodedns with `nodedns migrate`'s output
// of the same Corefile. Both are asked the same questions over UDP and
// TCP; no difference is allowed (rcode, AA, RA, TC, every record as a
// set; TTLs zeroed, each side's synthesized TTLs checked against the rule
// apart). The questions avoid the departures of docs/plugins.md (apex NS
// glue, ns1.dns.<zone>, PTR of external addresses, several hostname
// ingresses, the glue of an SRV to a hostname ingress), which have unit
// tests of their own.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// d64Upstream answers for example.com: an IPv4-only name, a dual-stack
// one, a CNAME to the IPv4-only name, the load balancer's hostname
// (IPv4-only), NXDOMAIN with the zone's SOA for the rest. Not
// authoritative, RA set, as a recursive resolver.
func d64Upstream(t *testing.T) *dnstest.Server {
	return dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		soa := dnstest.MustRR("example.com. 60 IN SOA ns.example.com. h.example.com. 1 7200 1800 86400 60")
		a := map[string]string{"v4only.example.com.": "169.254.50.1", "dual.example.com.": "169.254.50.2", "lb.example.com.": "169.254.60.1"}
		switch {
		case name == "cname.example.com.":
			m.Answer = append(m.Answer, dnstest.MustRR("cname.example.com. 300 IN CNAME v4only.example.com."))
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, dnstest.MustRR("v4only.example.com. 120 IN A 169.254.50.1"))
			} else {
				m.Ns = append(m.Ns, soa)
			}
		case a[name] != "" && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, dnstest.MustRR(name+" 300 IN A "+a[name]))
		case name == "dual.example.com." && q.Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, dnstest.MustRR(name+" 300 IN AAAA fd00:50::2"))
		case a[name] != "":
			m.Ns = append(m.Ns, soa)
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, soa)
		}
		_ = w.WriteMsg(m)
	})
}

// d64Objects makes the test's Services in a namespace of their own: an
// IPv4-only and a dual-stack ClusterIP Service, a headless one with IPv4
// endpoints, one with external IPs, a LoadBalancer with an IP and a
// hostname ingress, one with a hostname ingress only, one without
// external addresses. The addresses are data in answers, never
// contacted: ULA, link-local where the API server takes it (load-balancer
// ingress), else TEST-NET-1 (RFC 5737; it refuses link-local external IPs
// and endpoint addresses).
func d64Objects(t *testing.T, cp *ControlPlane) string {
	c := cp.Client
	ns := clusterNS(t, c, "d64")
	single, dual := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyRequireDualStack
	mk := func(name string, typ corev1.ServiceType, mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{svcPort("http", 80)},
				IPFamilyPolicy: &single, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
		if mut != nil {
			mut(s)
		}
		return createSvc(t, c, s)
	}
	mk("v4", corev1.ServiceTypeClusterIP, nil)
	mk("dual", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &dual, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	mk("hl", corev1.ServiceTypeClusterIP, func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	createSlice(t, c, endpointSlice(ns, "hl-1", "hl", discoveryv1.AddressTypeIPv4, 8080,
		testEP{ip: "192.0.2.31", hostname: "a"}, testEP{ip: "192.0.2.32"}))
	mk("ext", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"192.0.2.101", "fd00:100::1"}
		s.Spec.Ports = append(s.Spec.Ports, svcPort("https", 443))
	})
	mk("ext4", corev1.ServiceTypeClusterIP, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.104"} })
	mk("noext", corev1.ServiceTypeClusterIP, nil)
	for name, ingress := range map[string][]corev1.LoadBalancerIngress{
		"lb":     {{IP: "169.254.100.2"}, {IP: "fd00:100::2"}, {Hostname: "lb.example.com"}},
		"lbhost": {{Hostname: "lb.example.com"}},
		"lb2":    {{Hostname: "lb.example.com"}},
	} {
		s := mk(name, corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
			if s.Name == "lb2" { // a hostname ingress of two ports: CoreDNS answers each
				s.Spec.Ports = append(s.Spec.Ports, svcPort("https", 443))
			}
		})
		s.Status.LoadBalancer.Ingress = ingress
		if _, err := c.CoreV1().Services(ns).UpdateStatus(ctxBG, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of %s/%s: %v", ns, name, err)
		}
	}
	return ns
}

func d64Questions(ns string) []zoQuestion {
	A, AAAA, SRV, SOA, TXT := dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeSOA, dns.TypeTXT
	svc := "." + ns + ".svc.cluster.local."
	ext := "." + ns + ".example.org."
	var qs []zoQuestion
	for _, n := range []string{"v4" + svc, "dual" + svc, "hl" + svc, "a.hl" + svc, "nosuch" + svc, ns + ".svc.cluster.local.",
		"v4only.example.com.", "dual.example.com.", "cname.example.com.", "lb.example.com.", "nx.example.com.",
		"ext" + ext, "ext4" + ext, "x.ext4" + ext, "lb" + ext, "lbhost" + ext, "lb2" + ext, "noext" + ext, "hl" + ext, "a.hl" + ext,
		ns + ".example.org.", "nosuchns.example.org.", "example.org.", "dns.example.org."} {
		qs = append(qs, zoQuestion{n, AAAA}, zoQuestion{n, A})
	}
	return append(qs, zoQuestion{"ext" + ext, SRV}, zoQuestion{"_https._tcp.ext" + ext, SRV},
		zoQuestion{"example.org.", SOA}, zoQuestion{"ext" + ext, TXT}, zoQuestion{"a.b.c.d.e.example.org.", A})
}

// d64Render is zoNormalize with the TC flag and the answer count (which
// zoNormalize's set of records hides: CoreDNS repeats a hostname
// ingress's records for each port). Not RA: CoreDNS's
// kubernetes and k8s_external replies leave it clear, nodedns's set it
// (on every reply, a difference of the cluster zone the other
// differential tests leave out too); dns64's synthesized replies clear it
// on both sides (pkg/query/pipeline's TestDNS64).
func d64Render(m *dns.Msg) string {
	s := zoNormalize(m)
	head, rest, _ := strings.Cut(s, "\n")
	if m.Truncated {
		head += " tc"
	}
	head += fmt.Sprintf(" an=%d", len(m.Answer))
	return strings.TrimSuffix(head+"\n"+rest, "\n")
}

func d64Ask(addr, proto string, q zoQuestion) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	m.SetEdns0(4096, false)
	cl := &dns.Client{Net: proto, Timeout: 3 * time.Second, UDPSize: 4096}
	var err error
	for range 2 {
		var r *dns.Msg
		if r, _, err = cl.Exchange(m, addr); err == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s over %s: %w", q, proto, err)
}

// TestDNS64ExternalDifferential: dns64 (allow_ipv4; a prefix of /64 with
// translate_all; the default, which translates nothing for IPv4 clients)
// with k8s_external (default; ttl and headless) and the kubernetes plugin.
func TestDNS64ExternalDifferential(t *testing.T) {
	cp := controlPlane(t)
	coredns := coreDNSBin(t)
	ensureKubeDNS(t, cp.Client)
	ns := d64Objects(t, cp)
	up := d64Upstream(t)
	qs := d64Questions(ns)
	configs := []struct {
		name  string
		lines []string
		// translated are AAAA questions that must carry a synthesized
		// AAAA record (the prefix's) on both sides.
		translated []string
		prefix     string
		// translated6: the same over IPv6, when it differs.
		translated6 []string
	}{
		{"allow_ipv4", []string{"dns64 {", "  allow_ipv4", "}", "k8s_external example.org"},
			[]string{"v4." + ns + ".svc.cluster.local.", "hl." + ns + ".svc.cluster.local.", "v4only.example.com.", "cname.example.com.",
				"ext4." + ns + ".example.org.", "lbhost." + ns + ".example.org."}, "64:ff9b::", nil},
		{"translate_all", []string{"dns64 {", "  prefix fd00:64::/64", "  translate_all", "  allow_ipv4", "}",
			"k8s_external example.org {", "  ttl 30", "  headless", "}"},
			[]string{"dual." + ns + ".svc.cluster.local.", "dual.example.com.", "ext." + ns + ".example.org.", "hl." + ns + ".example.org."}, "fd00:64:", nil},
		// dns64 wraps acl: refused AAAA questions are translated.
		{"acl_block_aaaa", []string{"dns64 {", "  allow_ipv4", "}", "acl {", "  block type AAAA", "}", "k8s_external example.org"},
			[]string{"v4." + ns + ".svc.cluster.local.", "dual." + ns + ".svc.cluster.local.", "dual.example.com.", "ext." + ns + ".example.org."}, "64:ff9b::", nil},
		{"ipv6_clients_only", []string{"dns64", "k8s_external example.org"}, []string{}, "64:ff9b::",
			[]string{"v4." + ns + ".svc.cluster.local.", "v4only.example.com.", "lbhost." + ns + ".example.org."}},
	}
	total := 0
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			var corefile string
			var cdnsPort int
			cdns, _ := startCoreDNSCorefile(t, coredns, func(dnsPort, readyPort int) string {
				cdnsPort = dnsPort
				var b strings.Builder
				fmt.Fprintf(&b, ".:%d {\n  bind 127.0.0.1 ::1\n  errors\n  ready 127.0.0.1:%d\n", dnsPort, readyPort)
				for _, l := range cfg.lines {
					fmt.Fprintf(&b, "  %s\n", l)
				}
				fmt.Fprintf(&b, "  kubernetes cluster.local in-addr.arpa ip6.arpa {\n    kubeconfig %s\n    pods insecure\n    ttl 5\n    fallthrough in-addr.arpa ip6.arpa\n  }\n", cp.Kubeconfig)
				fmt.Fprintf(&b, "  forward . %s\n}\n", up.Addr)
				corefile = b.String()
				return corefile
			})
			mcfg, migrated := migrateCorefile(t, corefile)
			nd, nd6 := d64StartMigrated(t, mcfg, migrated)
			cdns6 := net.JoinHostPort("::1", strconv.Itoa(cdnsPort))
			diffs := 0
			for _, proto := range []string{"udp", "tcp", "udp6", "tcp6"} {
				c, n := cdns, nd
				if strings.HasSuffix(proto, "6") {
					c, n = cdns6, nd6
				}
				for _, q := range qs {
					rc, err := d64Ask(c, proto, q)
					if err != nil {
						t.Errorf("CoreDNS: %v", err)
						continue
					}
					rn, err := d64Ask(n, proto, q)
					if err != nil {
						t.Errorf("nodedns: %v", err)
						continue
					}
					total++
					want, got := d64Render(rc), d64Render(rn)
					if want != got {
						diffs++
						t.Errorf("%s over %s differs:\nCoreDNS:\n%s\nnodedns:\n%s", q, proto, want, got)
					}
					translated := cfg.translated
					if strings.HasSuffix(proto, "6") && cfg.translated6 != nil {
						translated = cfg.translated6
					}
					if cfg.name == "ipv6_clients_only" && !strings.HasSuffix(proto, "6") {
						// IPv4 clients: nothing translated on either side.
						for _, m := range []*dns.Msg{rc, rn} {
							if d64Synthesized(m, cfg.prefix) {
								t.Errorf("%s over %s: translated for an IPv4 client:\n%s", q, proto, m)
							}
						}
					}
					if q.qtype == dns.TypeAAAA && cfg.prefix != "" && containsStr(translated, q.name) {
						for _, m := range []*dns.Msg{rc, rn} {
							if !d64Synthesized(m, cfg.prefix) {
								t.Errorf("%s over %s: no AAAA of %s in\n%s", q, proto, cfg.prefix, m)
							}
						}
					}
				}
			}
			t.Logf("FIGURE dns64/k8s_external differential %s: %d questions over UDP and TCP, IPv4 and IPv6, %d differences", cfg.name, 4*len(qs), diffs)
		})
	}
	t.Logf("FIGURE dns64/k8s_external differential: %d answers compared", total)
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// d64Synthesized reports whether m holds an AAAA record under prefix
// (its text form's start).
func d64Synthesized(m *dns.Msg, prefix string) bool {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.AAAA); ok && strings.HasPrefix(a.AAAA.String(), prefix) {
			return true
		}
	}
	return false
}

// d64StartMigrated is startMigrated listening on 127.0.0.1 and ::1 (the
// same port): the IPv6 clients dns64 translates for by default.
func d64StartMigrated(t *testing.T, cfg map[string]any, migrated string) (addr4, addr6 string) {
	t.Helper()
	dnsPort, adminPort := agentPorts(t)
	addr4 = "127.0.0.1:" + strconv.Itoa(dnsPort)
	addr6 = net.JoinHostPort("::1", strconv.Itoa(dnsPort))
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	cfg["listen"] = []string{addr4, addr6}
	cfg["admin"] = admin
	cfg["lameduck"] = "0s"
	delete(cfg, "local-ip")
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "nodedns.log")
	p, err := startCPProc("nodedns", logPath, nodednsBin, "serve", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("migrate's configuration:\n%s\nnodedns log (last 40 lines):\n%s", migrated, tailFile(logPath, 40))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://"+admin+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("nodedns not ready: %v\n%s", err, tailFile(logPath, 40))
	}
	return addr4, addr6
}
