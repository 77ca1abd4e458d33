package pipeline

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/acl"
	"github.com/nodedns/nodedns/pkg/query/builtin"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/rewrite"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/query/template"
)

func mustACL(tb testing.TB, rules ...acl.Rule) *acl.ACL {
	tb.Helper()
	a, err := acl.New(rules)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func mustTemplates(tb testing.TB, cfgs ...template.Config) *template.Set {
	tb.Helper()
	s, err := template.New(cfgs)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// edeCodes lists the EDE codes of r's OPT.
func edeCodes(r *dns.Msg) []uint16 {
	var out []uint16
	if o := r.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if x, ok := e.(*dns.EDNS0_EDE); ok {
				out = append(out, x.InfoCode)
			}
		}
	}
	return out
}

func qEDNS(name string, qtype uint16) *dns.Msg {
	m := q(name, qtype)
	m.SetEdns0(1232, false)
	return m
}

// TestPluginOrder: local answers before rewrites and the access list (a
// blocked client still gets localhost), the access list judges the
// rewritten name, templates answer before the cluster zone.
func TestPluginOrder(t *testing.T) {
	rw, err := rewrite.New([]rewrite.Rule{{Type: "suffix", From: ".localhost", To: ".example.com"},
		{From: "alias.example.org", To: "blocked.example.net"}})
	if err != nil {
		t.Fatal(err)
	}
	pl := &Plugins{Local: builtin.NewLocal(true),
		ACL:       mustACL(t, acl.Rule{Zones: []string{"example.net"}, Policies: []acl.Policy{{Action: acl.Block}}}),
		Templates: mustTemplates(t, template.Config{Class: "IN", Type: "AAAA", Rcode: "NOERROR"})}
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Cluster: testCluster(), Rewriter: rw, Plugins: pl})

	r := dnstest.Exchange(t, addr, "udp", q("www.localhost.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "127.0.0.1" {
		t.Fatalf("localhost rewritten before local answered: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", qEDNS("alias.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeRefused || !slices.Equal(edeCodes(r), []uint16{dns.ExtendedErrorCodeBlocked}) {
		t.Fatalf("the rewritten name is blocked: rcode %d EDE %v", r.Rcode, edeCodes(r))
	}
	r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer)+len(r.Ns) != 0 || !r.Authoritative {
		t.Fatalf("template before the cluster zone: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 1 {
		t.Fatalf("A passed to the cluster zone: %v", r)
	}
}

func TestACLReplies(t *testing.T) {
	a := mustACL(t, acl.Rule{Policies: []acl.Policy{
		{Action: acl.Filter, Types: []string{"MX"}},
		{Action: acl.Drop, Types: []string{"TXT"}},
		{Action: acl.Block, Types: []string{"HINFO"}},
	}})
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Plugins: &Plugins{ACL: a}})
	r := dnstest.Exchange(t, addr, "udp", qEDNS("www.example.com.", dns.TypeHINFO))
	if r.Rcode != dns.RcodeRefused || len(r.Question) != 1 || !slices.Equal(edeCodes(r), []uint16{dns.ExtendedErrorCodeBlocked}) {
		t.Fatalf("block: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", qEDNS("www.example.com.", dns.TypeMX))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer)+len(r.Ns) != 0 || !slices.Equal(edeCodes(r), []uint16{dns.ExtendedErrorCodeFiltered}) {
		t.Fatalf("filter: %v", r)
	}
	// Without EDNS no OPT, so no EDE (CoreDNS adds an OPT anyway).
	if r = dnstest.Exchange(t, addr, "udp", q("www.example.com.", dns.TypeMX)); r.IsEdns0() != nil {
		t.Fatalf("OPT for a client without EDNS: %v", r)
	}
	if b := dnstest.ExchangeRawUDP(t, addr, dnstest.Pack(q("www.example.com.", dns.TypeTXT))); b != nil {
		t.Fatalf("drop: a reply of %d bytes", len(b))
	}
	if r = dnstest.Exchange(t, addr, "udp", q("www.example.com.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("pass: %v", r)
	}
}

func TestTemplateCNAMETarget(t *testing.T) {
	res := &fakeResolver{}
	pl := &Plugins{Templates: mustTemplates(t, template.Config{Class: "IN", Type: "A", Zones: []string{"apps.example"},
		Answer: []string{"{{ .Name }} 60 IN CNAME web.team-a.svc.cluster.local.", "{{ .Name }} 60 IN TXT \"x\""}},
		template.Config{Class: "IN", Type: "A", Zones: []string{"ext.example"}, Answer: []string{"{{ .Name }} 60 IN CNAME www.example.net."}})}
	_, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Plugins: pl})
	r := dnstest.Exchange(t, addr, "udp", q("App.Apps.Example.", dns.TypeA))
	var got []string
	for _, rr := range r.Answer {
		got = append(got, strings.ToLower(strings.ReplaceAll(rr.String(), "\t", " ")))
	}
	slices.Sort(got)
	want := []string{"app.apps.example. 60 in cname web.team-a.svc.cluster.local.", "app.apps.example. 60 in txt \"x\"",
		"web.team-a.svc.cluster.local. 5 in a 10.96.0.10"}
	if !slices.Equal(got, want) || !r.Authoritative {
		t.Fatalf("answer %q (aa %v), want %q", got, r.Authoritative, want)
	}
	r = dnstest.Exchange(t, addr, "udp", q("x.ext.example.", dns.TypeA))
	if len(r.Answer) != 2 || r.Answer[1].(*dns.A).A.String() != "192.0.2.7" {
		t.Fatalf("target through the resolver: %v", r)
	}
}

func TestHeaderRules(t *testing.T) {
	pl := &Plugins{Local: builtin.NewLocal(true),
		Header: Header{Set: dnswire.FlagAA, Clear: dnswire.FlagRA | dnswire.FlagRD}}
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Cluster: testCluster(), Plugins: pl})
	for _, name := range []string{"www.example.com.", "web.team-a.svc.cluster.local."} {
		r := dnstest.Exchange(t, addr, "udp", q(name, dns.TypeA))
		if !r.Authoritative || r.RecursionAvailable || r.RecursionDesired {
			t.Errorf("%s: aa %v ra %v rd %v, want aa only", name, r.Authoritative, r.RecursionAvailable, r.RecursionDesired)
		}
	}
	// Not on what the pipeline answers itself (local, errors).
	for _, m := range []*dns.Msg{q("localhost.", dns.TypeA), q("www.example.com.", dns.TypeAXFR)} {
		r := dnstest.Exchange(t, addr, "udp", m)
		if r.Authoritative || !r.RecursionAvailable || !r.RecursionDesired {
			t.Errorf("%s %s: header rules applied: %+v", m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], r.MsgHdr)
		}
	}
}

func TestMinimalResponses(t *testing.T) {
	cl := testCluster()
	cl.names["_http._tcp.web.team-a.svc.cluster.local."] = []dns.RR{dnstest.MustRRf("_http._tcp.web.team-a.svc.cluster.local. 5 IN SRV 0 100 80 web.team-a.svc.cluster.local.")}
	withExtra := &extraCluster{fakeCluster: cl}
	for _, minimal := range []bool{false, true} {
		_, addr := start(t, Config{Resolver: &fakeResolver{}, Cluster: withExtra, MinimalResponses: minimal})
		r := dnstest.Exchange(t, addr, "udp", q("_http._tcp.web.team-a.svc.cluster.local.", dns.TypeSRV))
		if len(r.Answer) != 1 || (len(r.Extra) == 0) != minimal {
			t.Errorf("minimal %v: %v", minimal, r)
		}
		// A denial keeps its SOA.
		r = dnstest.Exchange(t, addr, "udp", q("nope.team-a.svc.cluster.local.", dns.TypeA))
		if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			t.Errorf("minimal %v: denial %v", minimal, r)
		}
	}
}

// extraCluster adds the target's address to SRV answers, as the index
// does.
type extraCluster struct{ *fakeCluster }

func (e *extraCluster) Lookup(name string, qtype uint16) (stage.Result, bool) {
	res, ok := e.fakeCluster.Lookup(name, qtype)
	if ok && qtype == dns.TypeSRV && len(res.Msg.Answer) > 0 {
		res.Msg.Extra = []dns.RR{dnstest.MustRRf("web.team-a.svc.cluster.local. 5 IN A 10.96.0.10")}
	}
	return res, ok
}

func TestChaosClass(t *testing.T) {
	pl := &Plugins{Chaos: builtin.NewChaos("nodedns-test", []string{"a"})}
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Plugins: pl})
	m := q("version.bind.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	r := dnstest.Exchange(t, addr, "udp", m)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.TXT).Txt[0] != "nodedns-test" {
		t.Fatalf("version.bind: %v", r)
	}
	m = q("other.bind.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	if r = dnstest.Exchange(t, addr, "udp", m); r.Rcode != dns.RcodeRefused {
		t.Fatalf("other CH name: %v", r)
	}
}

// TestACLStepsOfTheWalk: a walk visiting a name the access list does not
// answer stops: the client walks its list itself, each name judged.
func TestACLStepsOfTheWalk(t *testing.T) {
	cl := testCluster()
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): "team-a"}
	pl := &Plugins{ACL: mustACL(t, acl.Rule{Zones: []string{"example.com"}, Policies: []acl.Policy{{Action: acl.Block}}})}
	p, err := New(Config{Resolver: externalResolver(), Cluster: cl, Pods: pods, Autopath: true, Plugins: pl})
	if err != nil {
		t.Fatal(err)
	}
	req := new(server.Request)
	req.Read("udp", 0, netip.MustParseAddr("127.0.0.1"), time.Now(), dnstest.Pack(q("api.example.com.team-a.svc.cluster.local.", dns.TypeA)))
	out := p.Resolve(context.Background(), nil, req)
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Fatalf("walked into a blocked name: %v", r)
	}
}
