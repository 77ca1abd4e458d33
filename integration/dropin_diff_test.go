//go:build integration

package integration

// Differential test of hosts and rewrite, which must answer as the
// CoreDNS configuration they replace: CoreDNS 1.15 with
// `hosts` (and `rewrite ... answer auto`) in front of `forward`, and the
// nodedns binary with the same records and rules, are asked the same
// questions; the answers must agree (rcode, AA and every record, TTLs
// included, compared as sets). Both forward to one scripted upstream.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// diffHostsFile and diffInline are the records of every configuration.
const diffHostsFile = `# a hosts file
192.0.2.10 web.example.org www.example.org
2001:db8::10 web.example.org
192.0.2.11 v4only.example.org
192.0.2.20 *.apps.example.org
192.0.2.21 exact.apps.example.org
192.0.2.30 host.example.net
`

var diffInline = []string{"192.0.2.12 inline.example.org", "192.0.2.10 alias.example.org", "192.0.2.40 chain.example.org"}

// diffConfig is one configuration in both dialects.
type diffConfig struct {
	name      string
	corefile  string // the server block's plugins (FILE and INLINE are filled in)
	nodedns   string // YAML keys (FILE is filled in)
	questions []zoQuestion
}

func diffQuestions() []zoQuestion {
	q := func(name string, t uint16) zoQuestion { return zoQuestion{name: name, qtype: t} }
	rev := func(ip string) string { r, _ := dns.ReverseAddr(ip); return r }
	return []zoQuestion{
		q("web.example.org.", dns.TypeA), q("web.example.org.", dns.TypeAAAA), q("web.example.org.", dns.TypeMX),
		q("web.example.org.", dns.TypeTXT), q("WEB.Example.ORG.", dns.TypeA), q("www.example.org.", dns.TypeA),
		q("v4only.example.org.", dns.TypeAAAA), q("inline.example.org.", dns.TypeA), q("alias.example.org.", dns.TypeA),
		q("foo.apps.example.org.", dns.TypeA), q("foo.apps.example.org.", dns.TypeAAAA), q("exact.apps.example.org.", dns.TypeA),
		q("apps.example.org.", dns.TypeA), q("a.b.apps.example.org.", dns.TypeA), q("host.example.net.", dns.TypeA),
		q("nope.example.org.", dns.TypeA), q("nope.example.net.", dns.TypeA), q("www.example.com.", dns.TypeA),
		q("nope.example.com.", dns.TypeA),
		q(rev("192.0.2.10"), dns.TypePTR), q(rev("192.0.2.11"), dns.TypePTR), q(rev("192.0.2.20"), dns.TypePTR),
		q(rev("192.0.2.99"), dns.TypePTR), q(rev("2001:db8::10"), dns.TypePTR), q("2.0.192.in-addr.arpa.", dns.TypePTR),
	}
}

func diffConfigs() []diffConfig {
	base := diffQuestions()
	rw := append(slices.Clone(base),
		zoQuestion{name: "db.legacy.example.", qtype: dns.TypeA}, zoQuestion{name: "web.corp.internal.", qtype: dns.TypeAAAA},
		zoQuestion{name: "nope.corp.internal.", qtype: dns.TypeA}, zoQuestion{name: "www.old.example.", qtype: dns.TypeA},
		zoQuestion{name: "alias.old.example.", qtype: dns.TypeA}, zoQuestion{name: "stage.example.org.", qtype: dns.TypeA},
		zoQuestion{name: "chain.internal.", qtype: dns.TypeA}, zoQuestion{name: "cdn-legacy.example.com.", qtype: dns.TypeA})
	return []diffConfig{
		{name: "no fallthrough", corefile: "hosts FILE {\nINLINE\n  ttl 120\n}",
			nodedns: "hosts:\n  file: FILE\n  entries: INLINE\n  ttl: 120s\n", questions: base},
		{name: "zone, fallthrough", corefile: "hosts FILE example.org {\nINLINE\n  fallthrough\n}",
			nodedns: "hosts:\n  file: FILE\n  entries: INLINE\n  zones: [example.org]\n  fallthrough: []\n", questions: base},
		{name: "two zones, fallthrough in one", corefile: "hosts FILE example.org example.net {\nINLINE\n  fallthrough example.org\n}",
			nodedns: "hosts:\n  file: FILE\n  entries: INLINE\n  zones: [example.org, example.net]\n  fallthrough: [example.org]\n", questions: base},
		{name: "no_reverse", corefile: "hosts FILE {\nINLINE\n  no_reverse\n  fallthrough\n}",
			nodedns: "hosts:\n  file: FILE\n  entries: INLINE\n  no-reverse: true\n  fallthrough: []\n", questions: base},
		{name: "fallthrough_unsupported", corefile: "hosts FILE {\nINLINE\n  fallthrough\n  fallthrough_unsupported\n}",
			nodedns: "hosts:\n  file: FILE\n  entries: INLINE\n  fallthrough: []\n  fallthrough-unsupported: true\n", questions: base},
		{name: "rewrite", corefile: `rewrite continue name exact chain.internal. chain.corp.internal.
rewrite name exact db.legacy.example. web.example.org.
rewrite name suffix .corp.internal. .example.org. answer auto
rewrite name regex ^(.+)\.old\.example\.$ {1}.new.example. answer auto
rewrite continue name prefix stage. web. answer auto
rewrite name substring cdn-legacy cdn answer auto
hosts FILE {
INLINE
  fallthrough
}`,
			nodedns: `rewrite:
  - {type: exact, from: chain.internal., to: chain.corp.internal., mode: continue}
  - {type: exact, from: db.legacy.example., to: web.example.org.}
  - {type: suffix, from: .corp.internal., to: .example.org.}
  - {type: regex, from: '^(.+)\.old\.example\.$', to: '{1}.new.example.'}
  - {type: prefix, from: stage., to: web., mode: continue}
  - {type: substring, from: cdn-legacy, to: cdn}
hosts:
  file: FILE
  entries: INLINE
  fallthrough: []
`, questions: rw},
	}
}

// diffUpstream: www.example.com and cdn.example.com exist, names under
// new.example exist (alias.new.example is a CNAME to www.new.example),
// everything else is NXDOMAIN with its zone's SOA. Never authoritative,
// so AA in a reply says who answered.
func diffUpstream(t *testing.T) *dnstest.Server {
	return dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		switch {
		case (name == "www.example.com." || name == "cdn.example.com.") && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN A 192.0.2.1")}
		case name == "alias.new.example." && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN CNAME www.new.example."), dnstest.MustRR("www.new.example. 300 IN A 192.0.2.77")}
		case strings.HasSuffix(name, ".new.example.") && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRR(q.Name + " 300 IN A 192.0.2.77")}
		default:
			// Reverse names get their reverse zone's SOA: an SOA that is
			// not an ancestor of the name is not the denial's zone, and
			// the agent drops it from a reply (it cuts replies down to
			// what answers the question) where CoreDNS passes it on.
			zone := "example.com."
			for _, z := range []string{"example.org.", "example.net.", "new.example.", "internal.", "example.", "in-addr.arpa.", "ip6.arpa."} {
				if strings.HasSuffix(name, "."+z) || name == z {
					zone = z
					break
				}
			}
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{dnstest.MustRR(zone + " 300 IN SOA ns." + zone + " h." + zone + " 1 7200 1800 86400 300")}
		}
		_ = w.WriteMsg(m)
	})
}

// startCoreDNSPlugins runs CoreDNS with plugins (a server block's body)
// and forward to upstream; it waits for the ready plugin.
func startCoreDNSPlugins(t *testing.T, bin, plugins, upstream string) string {
	t.Helper()
	addr, _ := startCoreDNSCorefile(t, bin, func(dnsPort, readyPort int) string {
		return fmt.Sprintf(".:%d {\n  bind 127.0.0.1\n  ready 127.0.0.1:%d\n%s\n  forward . %s\n}\n", dnsPort, readyPort, plugins, upstream)
	})
	return addr
}

// diffRender is zoNormalize with the TTLs of authoritative replies kept:
// both servers give the configured TTL for static records. The upstream's
// (never authoritative) are dropped: nodedns's cache counts them down.
func diffRender(m *dns.Msg) string {
	head := dns.RcodeToString[m.Rcode]
	if m.Authoritative {
		head += " aa"
	}
	var lines []string
	for _, s := range []struct {
		p   string
		rrs []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		for _, rr := range s.rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if !m.Authoritative {
				rr = dns.Copy(rr)
				rr.Header().Ttl = 0
			}
			lines = append(lines, s.p+" "+strings.ToLower(strings.ReplaceAll(rr.String(), "\t", " ")))
		}
	}
	slices.Sort(lines)
	return strings.Join(append([]string{head}, lines...), "\n")
}

func TestDropInDifferential(t *testing.T) {
	coredns := coreDNSBin(t)
	up := diffUpstream(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "hosts")
	if err := os.WriteFile(file, []byte(diffHostsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	inlineCore := "    " + strings.Join(diffInline, "\n    ")
	inlineYAML := "[" + strings.Join(diffInline, ", ") + "]"
	total := 0
	for _, cfg := range diffConfigs() {
		t.Run(strings.ReplaceAll(cfg.name, " ", "_"), func(t *testing.T) {
			plugins := strings.NewReplacer("FILE", file, "INLINE", inlineCore).Replace(cfg.corefile)
			cdns := startCoreDNSPlugins(t, coredns, "  "+strings.ReplaceAll(plugins, "\n", "\n  "), up.Addr)
			ndns, _ := startDropinAgent(t, fmt.Sprintf("upstream: [%s]\n", up.Addr)+
				strings.NewReplacer("FILE", file, "INLINE", inlineYAML).Replace(cfg.nodedns))
			for _, q := range cfg.questions {
				a, err := zoAsk(cdns, q)
				if err != nil {
					t.Fatalf("CoreDNS: %v", err)
				}
				b, err := zoAsk(ndns, q)
				if err != nil {
					t.Fatalf("nodedns: %v", err)
				}
				total++
				if ca, nb := diffRender(a), diffRender(b); ca != nb {
					t.Errorf("%s:\n  CoreDNS: %s\n  nodedns: %s", q, strings.ReplaceAll(ca, "\n", "\n           "),
						strings.ReplaceAll(nb, "\n", "\n           "))
				}
			}
		})
	}
	t.Logf("FIGURE dropin differential: %d questions in %d configurations", total, len(diffConfigs()))
}
