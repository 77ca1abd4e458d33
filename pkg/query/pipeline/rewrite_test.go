package pipeline

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/rewrite"
)

func mustRewriter(tb testing.TB, rules ...rewrite.Rule) *rewrite.Rewriter {
	tb.Helper()
	rw, err := rewrite.New(rules)
	if err != nil {
		tb.Fatal(err)
	}
	return rw
}

// TestRewriteStage: a rewritten query is resolved under its new name by
// every stage (cluster, static records, cache and upstream), and the client
// gets an answer for the name it asked, in its case, over UDP and TCP.
func TestRewriteStage(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		mu.Lock()
		asked = append(asked, q.Question[0].Name)
		mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(q)
		if strings.HasPrefix(q.Question[0].Name, "nope.") {
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{dnstest.MustRRf("new.example. 60 IN SOA ns.new.example. h.new.example. 1 2 3 4 60")}
			return m, nil
		}
		m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN CNAME edge.cdn.example.", q.Question[0].Name), dnstest.MustRRf("edge.cdn.example. 60 IN A 192.0.2.7")}
		return m, nil
	}}
	h, err := hosts.New(hosts.Config{Entries: []string{"192.0.2.80 static.internal"}, Fallthrough: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	rw := mustRewriter(t,
		rewrite.Rule{From: "api.legacy", To: "web.team-a.svc.cluster.local"},
		rewrite.Rule{Type: "regex", From: `^(.+)\.old\.example\.$`, To: "{1}.new.example"},
		rewrite.Rule{Type: "suffix", From: ".corp", To: ".internal"},
	)
	s, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Hosts: h, Rewriter: rw})
	for _, proto := range []string{"udp", "tcp"} {
		a := addr
		if proto == "tcp" {
			a = s.TCPAddrs()[0].String()
		}
		// To the cluster zone.
		r := dnstest.Exchange(t, a, proto, q("API.Legacy.", dns.TypeA))
		if r.Rcode != dns.RcodeSuccess || r.Question[0].Name != "API.Legacy." || len(r.Answer) != 1 ||
			r.Answer[0].Header().Name != "API.Legacy." || r.Answer[0].(*dns.A).A.String() != "10.96.0.10" {
			t.Fatalf("%s cluster: %v", proto, r)
		}
		// To static records.
		r = dnstest.Exchange(t, a, proto, q("static.corp.", dns.TypeA))
		if len(r.Answer) != 1 || r.Answer[0].Header().Name != "static.corp." || r.Answer[0].(*dns.A).A.String() != "192.0.2.80" {
			t.Fatalf("%s hosts: %v", proto, r)
		}
	}
	// To the upstream: it is asked the new name; the client sees the old.
	r := dnstest.Exchange(t, addr, "udp", q("www.old.example.", dns.TypeA))
	mu.Lock()
	if len(asked) != 1 || asked[0] != "www.new.example." {
		t.Fatalf("upstream asked %q", asked)
	}
	mu.Unlock()
	if len(r.Answer) != 2 || r.Answer[0].Header().Name != "www.old.example." || r.Answer[0].(*dns.CNAME).Target != "edge.cdn.example." {
		t.Fatalf("upstream answer: %v", r)
	}
	// The second time from the cache, on the reader, in the client's case.
	r = dnstest.Exchange(t, addr, "udp", q("WWW.old.example.", dns.TypeA))
	if r.Question[0].Name != "WWW.old.example." || r.Answer[0].Header().Name != "WWW.old.example." {
		t.Fatalf("second answer: %v", r)
	}
	// NXDOMAIN: the question is the client's; the zone's SOA is no
	// rewritten name and stays as it is.
	r = dnstest.Exchange(t, addr, "udp", q("nope.old.example.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError || r.Question[0].Name != "nope.old.example." || len(r.Ns) != 1 || r.Ns[0].Header().Name != "new.example." {
		t.Fatalf("NXDOMAIN: %v", r)
	}
	// Live replacement: rules off.
	s.SetRewriter(nil)
	r = dnstest.Exchange(t, addr, "udp", q("api.legacy.", dns.TypeA))
	if len(r.Answer) != 2 || r.Answer[0].Header().Name != "api.legacy." {
		t.Fatalf("after SetRewriter(nil): %v", r)
	}
}

// TestRewriteBeforeWalk: a rewrite into a pod's search-path expansion is
// walked like one the client sent (rewrite comes before autopath).
func TestRewriteBeforeWalk(t *testing.T) {
	pod := netip.MustParseAddr("127.0.0.1")
	rw := mustRewriter(t, rewrite.Rule{Type: "suffix", From: ".legacy", To: ".team-a.svc.cluster.local"})
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: testCluster(), Pods: fakePods{pod: "team-a"}, Autopath: true,
		Rewriter: rw})
	// web.legacy becomes web.team-a.svc.cluster.local: the walk's first
	// step, which exists.
	r := dnstest.Exchange(t, addr, "udp", q("web.legacy.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].Header().Name != "web.legacy." ||
		r.Answer[0].(*dns.A).A.String() != "10.96.0.10" {
		t.Fatalf("rewritten to the first search step: %v", r)
	}
	// api.example.com.legacy becomes api.example.com.team-a.svc...: the
	// walk ends at api.example.com, and the CNAME is from the name asked.
	r = dnstest.Exchange(t, addr, "udp", q("api.example.com.legacy.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || r.Answer[0].Header().Name != "api.example.com.legacy." ||
		r.Answer[0].(*dns.CNAME).Target != "api.example.com." {
		t.Fatalf("walked after the rewrite: %v", r)
	}
}

// TestRewriteInvalidIsServfail: a rule that produces an invalid name
// answers SERVFAIL with the question as asked (CoreDNS).
func TestRewriteInvalidIsServfail(t *testing.T) {
	rw := mustRewriter(t, rewrite.Rule{Type: "regex", From: `^(.*)$`, To: "{1}{1}{1}{1}{1}"})
	lim := &recordLimiter{}
	_, addr := start(t, Config{Resolver: &fakeResolver{}, Rewriter: rw, Failures: lim})
	name := "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb."
	r := dnstest.Exchange(t, addr, "udp", q(name, dns.TypeA))
	if r.Rcode != dns.RcodeServerFailure || r.Question[0].Name != name {
		t.Fatalf("%v", r)
	}
	if got := lim.got(); len(got) != 1 || got[0] != failRewrite {
		t.Fatalf("reasons %q", got)
	}
}
