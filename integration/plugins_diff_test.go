//go:build integration

package integration

// Differential test of the CoreDNS plugins nodedns carries (template, acl,
// local, chaos, minimal, header): CoreDNS 1.15 with the plugin in front of
// `forward`, and the nodedns binary with the same configuration in its
// keys, asked the same questions from the same client addresses; the
// answers must agree (rcode, AA, every record as a set, TTLs of
// authoritative answers included; flags and Extended DNS Errors where the
// configuration is about them). No difference is allowed: where nodedns
// departs on purpose (docs/plugins.md#departures) the questions avoid it,
// and the departure has a test of its own in pkg/query/pipeline.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// plQuestion is one question, asked from src (a loopback address; ""
// 127.0.0.1), of class IN unless CH, with EDNS unless noEDNS.
type plQuestion struct {
	name   string
	qtype  uint16
	src    string
	ch     bool
	noEDNS bool
}

func (q plQuestion) String() string {
	s := q.name + " " + dns.TypeToString[q.qtype]
	if q.ch {
		s += " CH"
	}
	if q.src != "" {
		s += " from " + q.src
	}
	return s
}

// plConfig is one configuration in both dialects.
type plConfig struct {
	name      string
	corefile  string // plugin lines of the server block (forward is added)
	nodedns   string // YAML keys
	questions []plQuestion
	// flags and ede: the rendering shows the header flags (aa, ra, rd),
	// the EDE codes of EDNS replies.
	flags, ede bool
}

// plUpstream answers like a recursive resolver: www/target names of
// example.com and example.net, full.example.com with its zone's NS and
// glue (for minimal), NXDOMAIN with the zone's SOA for the rest. Never
// authoritative, RA set.
func plUpstream(t *testing.T) *dnstest.Server {
	return dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		zone := "example.com."
		for _, z := range []string{"example.org.", "example.net.", "in-addr.arpa.", "localhost."} {
			if strings.HasSuffix(name, "."+z) || name == z {
				zone = z
			}
		}
		soa := dnstest.MustRR(zone + " 300 IN SOA ns." + zone + " h." + zone + " 1 7200 1800 86400 300")
		switch {
		case strings.HasPrefix(name, "www.") && q.Qtype == dns.TypeA && !strings.HasSuffix(name, ".example.org."):
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN A 192.0.2.1")}
		case strings.HasPrefix(name, "www.") && q.Qtype == dns.TypeAAAA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN AAAA 2001:db8::1")}
		case name == "full.example.com." && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN A 192.0.2.2")}
			m.Ns = []dns.RR{dnstest.MustRR("example.com. 300 IN NS ns.example.com.")}
			m.Extra = []dns.RR{dnstest.MustRR("ns.example.com. 300 IN A 192.0.2.53")}
		case strings.HasPrefix(name, "www.") || name == "full.example.com.":
			m.Ns = []dns.RR{soa}
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		}
		_ = w.WriteMsg(m)
	})
}

// plAsk asks q of addr; a timeout is no reply (errNoReply).
func plAsk(addr string, q plQuestion) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	if q.ch {
		m.Question[0].Qclass = dns.ClassCHAOS
	}
	if !q.noEDNS {
		m.SetEdns0(4096, false)
	}
	src := q.src
	if src == "" {
		src = "127.0.0.1"
	}
	cl := &dns.Client{Net: "udp", Timeout: 1500 * time.Millisecond, UDPSize: 4096,
		Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}, Timeout: 1500 * time.Millisecond}}
	r, _, err := cl.Exchange(m, addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errNoReply
		}
		return nil, err
	}
	return r, nil
}

var errNoReply = errors.New("no reply")

// plRender is diffRender, with the header flags (TTLs then zeroed) and
// EDE codes when the configuration is about them.
func plRender(cfg plConfig, q plQuestion, m *dns.Msg) string {
	s := diffRender(m)
	if cfg.flags {
		// The header rules make forwarded answers authoritative, whose
		// TTLs diffRender keeps: nodedns's cache counts a repeated
		// question's down, CoreDNS (no cache here) does not.
		s = zoNormalize(m)
	}
	head, rest, _ := strings.Cut(s, "\n")
	if cfg.flags {
		for _, f := range []struct {
			on   bool
			name string
		}{{m.RecursionAvailable, "ra"}, {m.RecursionDesired, "rd"}} {
			if f.on {
				head += " " + f.name
			}
		}
	}
	if cfg.ede && !q.noEDNS {
		if o := m.IsEdns0(); o != nil {
			for _, e := range o.Option {
				if x, ok := e.(*dns.EDNS0_EDE); ok {
					head += fmt.Sprintf(" ede=%d", x.InfoCode)
				}
			}
		}
	}
	if rest == "" {
		return head
	}
	return head + "\n" + rest
}

func plConfigs() []plConfig {
	A, AAAA, MX, TXT, SOA, NS, PTR, HINFO, ANY := dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT, dns.TypeSOA, dns.TypeNS, dns.TypePTR, dns.TypeHINFO, dns.TypeANY
	q := func(name string, types ...uint16) []plQuestion {
		var out []plQuestion
		for _, t := range types {
			out = append(out, plQuestion{name: name, qtype: t})
		}
		return out
	}
	from := func(src string, qs []plQuestion) []plQuestion {
		for i := range qs {
			qs[i].src = src
		}
		return qs
	}
	cat := func(qss ...[]plQuestion) []plQuestion { return slices.Concat(qss...) }
	templates := `template IN A apps.example.org {
  match "^(?P<app>[a-z0-9-]+)[.]apps[.]example[.]org[.]$"
  answer "{{ .Name }} 60 IN A 192.0.2.100"
  answer "{{ .Name }} 60 IN TXT \"{{ .Group.app }} {{ index .Match 1 }} {{ .Zone }} {{ .Type }}\""
  additional "ns.{{ .Zone }} 60 IN A 192.0.2.53"
  authority "{{ .Zone }} 60 IN NS ns.{{ .Zone }}"
  fallthrough
}
template IN AAAA apps.example.org {
  match "[.]apps[.]example[.]org[.]$"
  fallthrough
}
template IN A strict.example.org {
  match "^www[.]"
  answer "{{ .Name }} 30 IN A 192.0.2.7"
}
template ANY ANY blocked.example.org {
  rcode NXDOMAIN
  authority "blocked.example.org. 60 IN SOA ns.blocked.example.org. h.blocked.example.org. 1 60 60 60 60"
  ederror 15 "Blocked by policy"
}
template IN A cname.example.org {
  answer "{{ .Name }} 60 IN CNAME www.example.net."
}`
	templatesYAML := `templates:
  - type: A
    zones: [apps.example.org]
    match: ['^(?P<app>[a-z0-9-]+)[.]apps[.]example[.]org[.]$']
    answer: ['{{ .Name }} 60 IN A 192.0.2.100', '{{ .Name }} 60 IN TXT "{{ .Group.app }} {{ index .Match 1 }} {{ .Zone }} {{ .Type }}"']
    additional: ['ns.{{ .Zone }} 60 IN A 192.0.2.53']
    authority: ['{{ .Zone }} 60 IN NS ns.{{ .Zone }}']
    fallthrough: []
  - {type: AAAA, zones: [apps.example.org], match: ['[.]apps[.]example[.]org[.]$'], fallthrough: []}
  - {type: A, zones: [strict.example.org], match: ['^www[.]'], answer: ['{{ .Name }} 30 IN A 192.0.2.7']}
  - class: ANY
    type: ANY
    zones: [blocked.example.org]
    rcode: NXDOMAIN
    authority: ['blocked.example.org. 60 IN SOA ns.blocked.example.org. h.blocked.example.org. 1 60 60 60 60']
    ede: {code: 15, reason: Blocked by policy}
  - {type: A, zones: [cname.example.org], answer: ['{{ .Name }} 60 IN CNAME www.example.net.']}
`
	localQs := cat(q("localhost.", A, AAAA, MX, SOA, NS, TXT), q("foo.localhost.", A, AAAA, TXT), q("a.b.localhost.", A),
		q("LocalHost.", A), q("localhost.example.com.", A, MX), q("1.0.0.127.in-addr.arpa.", PTR, A), q("2.0.0.127.in-addr.arpa.", PTR),
		q("127.in-addr.arpa.", NS, SOA, A), q("0.in-addr.arpa.", SOA, PTR), q("1.0.0.0.in-addr.arpa.", PTR), q("255.255.255.255.in-addr.arpa.", PTR),
		q("10.in-addr.arpa.", PTR), q("www.example.com.", A))
	return []plConfig{
		{name: "template AAAA suppression", corefile: "template IN AAAA . {\n  rcode NOERROR\n}",
			nodedns:   "templates:\n  - {type: AAAA, rcode: NOERROR}\n",
			questions: cat(q("www.example.com.", A, AAAA, MX, TXT), q("nx.example.com.", AAAA, A), q("www.example.net.", AAAA))},
		{name: "templates", corefile: templates, nodedns: templatesYAML, ede: true,
			questions: cat(q("a.cname.example.org.", A), q("web-1.apps.example.org.", A, AAAA, MX), q("Web-1.APPS.example.org.", A),
				q("deep.x.apps.example.org.", A, AAAA), q("apps.example.org.", A), q("www.strict.example.org.", A), q("ftp.strict.example.org.", A, MX),
				q("x.blocked.example.org.", A, MX, TXT), q("blocked.example.org.", SOA), q("a.cname.example.org.", AAAA), q("www.example.com.", A))},
		{name: "acl", ede: true, corefile: `acl {
  filter type MX net 127.0.25.8
  drop type TXT net 127.0.25.8
  allow net 127.0.25.7
  block net 127.0.25.8/32
}
acl internal.example.com {
  block
}`, nodedns: `acl:
  - policies:
      - {action: filter, types: [MX], nets: [127.0.25.8]}
      - {action: drop, types: [TXT], nets: [127.0.25.8]}
      - {action: allow, nets: [127.0.25.7]}
      - {action: block, nets: [127.0.25.8/32]}
  - zones: [internal.example.com]
    policies: [{action: block}]
`, questions: cat(q("www.example.com.", A, MX, TXT, HINFO), q("x.internal.example.com.", A, MX),
			from("127.0.25.7", cat(q("www.example.com.", A, MX, TXT), q("x.internal.example.com.", A, TXT))),
			from("127.0.25.8", cat(q("www.example.com.", A, MX, TXT, HINFO), q("x.internal.example.com.", A, MX, TXT))))},
		// An ANY question is the access list's first: CoreDNS (without its
		// any plugin) refuses it, where nodedns answered RFC 8482's HINFO.
		{name: "acl block type ANY", ede: true, corefile: "acl {\n  block type ANY\n}",
			nodedns:   "acl:\n  - policies: [{action: block, types: [ANY]}]\n",
			questions: cat(q("www.example.com.", ANY, A), q("nx.example.com.", ANY))},
		{name: "local", corefile: "local", nodedns: "local: true\n", questions: localQs},
		{name: "local localhost_prefix off", corefile: "local {\n  localhost_prefix off\n}",
			nodedns: "local: true\nlocal-localhost-prefix: false\n", questions: localQs},
		{name: "chaos", corefile: "chaos nodedns-test alice bob alice", nodedns: "chaos: true\nchaos-version: nodedns-test\nchaos-authors: [alice, bob, alice]\n",
			questions: []plQuestion{{name: "version.bind.", qtype: TXT, ch: true}, {name: "version.server.", qtype: TXT, ch: true},
				{name: "authors.bind.", qtype: TXT, ch: true}, {name: "hostname.bind.", qtype: TXT, ch: true}, {name: "id.server.", qtype: TXT, ch: true},
				{name: "www.example.com.", qtype: A}}},
		{name: "minimal", corefile: "minimal\n" + templates, nodedns: "minimal-responses: true\n" + templatesYAML,
			questions: cat(q("full.example.com.", A), q("nx.example.com.", A), q("www.example.com.", MX), q("web-1.apps.example.org.", A),
				q("x.blocked.example.org.", A))},
		{name: "header", flags: true, corefile: "header {\n  query clear rd\n  response set aa\n  response clear ra\n}\ntemplate IN AAAA . {\n  rcode NOERROR\n}",
			nodedns:   "header:\n  query: {clear: [rd]}\n  response: {set: [aa], clear: [ra]}\ntemplates:\n  - {type: AAAA, rcode: NOERROR}\n",
			questions: cat(q("www.example.com.", A, AAAA), q("nx.example.com.", A), q("www.example.com.", A))},
		{name: "header set ra", flags: true, corefile: "header {\n  response clear aa\n  response set ra\n}\ntemplate IN AAAA . {\n  rcode NOERROR\n}",
			nodedns:   "header:\n  response: {set: [ra], clear: [aa]}\ntemplates:\n  - {type: AAAA, rcode: NOERROR}\n",
			questions: cat(q("www.example.com.", AAAA, A))},
	}
}

// TestPluginsDifferential asks CoreDNS and nodedns, configured alike, the
// questions of each configuration.
func TestPluginsDifferential(t *testing.T) {
	coredns := coreDNSBin(t)
	total := 0
	for _, cfg := range plConfigs() {
		t.Run(strings.ReplaceAll(cfg.name, " ", "_"), func(t *testing.T) {
			// One upstream each: CoreDNS has no cache here, nodedns
			// always has one; neither sees the other's queries.
			cup, nup := plUpstream(t), plUpstream(t)
			cdns := startCoreDNSPlugins(t, coredns, "  "+strings.ReplaceAll(cfg.corefile, "\n", "\n  "), cup.Addr)
			ndns, _ := startDropinAgent(t, fmt.Sprintf("upstream: [%s]\n", nup.Addr)+cfg.nodedns)
			for _, q := range cfg.questions {
				want, got := "no reply", "no reply"
				a, err := plAsk(cdns, q)
				if err == nil {
					want = plRender(cfg, q, a)
				} else if !errors.Is(err, errNoReply) {
					t.Fatalf("CoreDNS %s: %v", q, err)
				}
				b, err := plAsk(ndns, q)
				if err == nil {
					got = plRender(cfg, q, b)
				} else if !errors.Is(err, errNoReply) {
					t.Fatalf("nodedns %s: %v", q, err)
				}
				total++
				if want != got {
					t.Errorf("%s:\n  CoreDNS: %s\n  nodedns: %s", q, strings.ReplaceAll(want, "\n", "\n           "),
						strings.ReplaceAll(got, "\n", "\n           "))
				}
			}
		})
	}
	t.Logf("FIGURE plugins differential: %d questions in %d configurations", total, len(plConfigs()))
}

// TestPluginsClusterDifferential: the plugins where they meet the cluster
// zone, on the zone-options fixture: a template that empties AAAA answers
// cluster names too (it sits before kubernetes), minimal drops the
// additional records of cluster answers, local answers
// localhost.cluster.local (before kubernetes) and localhost.<ns>.svc.
func TestPluginsClusterDifferential(t *testing.T) {
	cp := controlPlane(t)
	coredns := coreDNSBin(t)
	ensureKubeDNS(t, cp.Client)
	f := zoCreate(t, cp.Client)
	up := zoUpstream(t, f)
	A, AAAA, SRV, PTR := dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR
	svcA := "." + f.a + ".svc.cluster.local."
	qs := append(zoQuestions(f, "cluster.local."), zoReverse(f)...)
	qs = append(qs, zoQuestion{"localhost.", A}, zoQuestion{"localhost.", AAAA}, zoQuestion{"localhost.cluster.local.", A},
		zoQuestion{"localhost" + svcA, AAAA}, zoQuestion{"x.localhost.", A}, zoQuestion{"1.0.0.127.in-addr.arpa.", PTR})
	tmpl := filepath.Join(t.TempDir(), "templates.yaml")
	if err := os.WriteFile(tmpl, []byte("templates:\n  - {type: AAAA, rcode: NOERROR}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	configs := []zoConfig{
		{name: "template_aaaa", block: []string{"template IN AAAA . {", "  rcode NOERROR", "}"}, flags: []string{"--config", tmpl},
			effects: []zoQuestion{{"web" + svcA, AAAA}, {"hl" + svcA, AAAA}, {"hl-v6-pod.hl" + svcA, AAAA}, {"localhost.", AAAA}}},
		{name: "minimal", block: []string{"minimal"}, flags: []string{"--minimal-responses"},
			effects: []zoQuestion{{"hl" + svcA, SRV}, {"_http._tcp.hl" + svcA, SRV}}},
		{name: "local", block: []string{"local"}, flags: []string{"--local"},
			effects: []zoQuestion{{"localhost.", A}, {"localhost.cluster.local.", A}, {"localhost" + svcA, AAAA}, {"x.localhost.", A},
				{"1.0.0.127.in-addr.arpa.", PTR}}},
	}
	allowedSeen := map[int]bool{}
	var base map[zoQuestion]string
	t.Run("default", func(t *testing.T) {
		base = zoDiff(t, cp, coredns, up.Addr, f, zoConfig{name: "default"}, qs, nil, allowedSeen)
	})
	ran := []string{"default"}
	for _, cfg := range configs {
		ran = append(ran, cfg.name)
		t.Run(cfg.name, func(t *testing.T) {
			zoDiff(t, cp, coredns, up.Addr, f, cfg, qs, base, allowedSeen)
		})
	}
	zoCheckAllowUsed(t, allowedSeen, ran)
}
