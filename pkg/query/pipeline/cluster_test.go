package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// fakeCluster knows a few names in cluster.local.
type fakeCluster struct {
	names     map[string][]dns.RR // name -> answers (any type; filtered by type)
	external  map[string]string   // ExternalName services: name -> target
	notSynced bool
	lookups   atomic.Int64
}

var clusterSOA = dnstest.MustRRf("cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5")

func (f *fakeCluster) Zone() string { return "cluster.local." }

// Generation is 0: the fakes' names change under the tests without one,
// so every use asks again.
func (f *fakeCluster) Generation() uint64 { return 0 }

func (f *fakeCluster) Lookup(name string, qtype uint16) (stage.Result, bool) {
	f.lookups.Add(1)
	if !strings.HasSuffix(name, ".cluster.local.") && name != "cluster.local." {
		return stage.Result{}, false
	}
	if f.notSynced {
		return stage.Result{NotSynced: true}, true
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}}
	if t, ok := f.external[name]; ok {
		m.Answer = []dns.RR{dnstest.MustRRf("%s 5 IN CNAME %s", name, t)}
		return stage.Result{Msg: m, ExternalTarget: t}, true
	}
	rrs, ok := f.names[name]
	if !ok {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{clusterSOA}
		return stage.Result{Msg: m}, true
	}
	for _, rr := range rrs {
		if rr.Header().Rrtype == qtype {
			m.Answer = append(m.Answer, rr)
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{clusterSOA}
	}
	return stage.Result{Msg: m}, true
}

type fakePods map[netip.Addr]string

func (p fakePods) PodNamespace(ip netip.Addr) (string, bool) {
	ns, ok := p[ip]
	return ns, ok
}

// externalResolver answers api.example.com. (A only; AAAA is NODATA) and
// NXDOMAIN for everything else.
func externalResolver() *fakeResolver {
	return &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		soa := dnstest.MustRRf("example.com. 60 IN SOA ns.example.com. h.example.com. 1 2 3 4 60")
		switch {
		case q.Question[0].Name == "api.example.com." && q.Question[0].Qtype == dns.TypeA:
			m.Answer = []dns.RR{dnstest.MustRRf("api.example.com. 60 IN A 192.0.2.10")}
		case q.Question[0].Name == "api.example.com.":
			m.Ns = []dns.RR{soa}
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		}
		return m, nil
	}}
}

func testCluster() *fakeCluster {
	return &fakeCluster{
		names: map[string][]dns.RR{
			"web.team-a.svc.cluster.local.": {dnstest.MustRRf("web.team-a.svc.cluster.local. 5 IN A 10.96.0.10")},
			"db.team-b.svc.cluster.local.":  {dnstest.MustRRf("db.team-b.svc.cluster.local. 5 IN A 10.96.0.11")},
		},
		external: map[string]string{"ext.team-a.svc.cluster.local.": "api.example.com."},
	}
}

func TestClusterAnswers(t *testing.T) {
	res := externalResolver()
	cl := testCluster()
	_, addr := start(t, Config{Resolver: res, Cluster: cl})
	r := dnstest.Exchange(t, addr, "udp", q("Web.Team-A.svc.Cluster.Local.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 || r.Answer[0].Header().Name != "Web.Team-A.svc.Cluster.Local." {
		t.Fatalf("cluster A: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Fatalf("cluster AAAA NODATA: %v", r)
	}
	r = dnstest.Exchange(t, addr, "udp", q("nope.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
		t.Fatalf("cluster NXDOMAIN: %v", r)
	}
	// ExternalName: the CNAME and the target's answer, resolved upstream.
	r = dnstest.Exchange(t, addr, "udp", q("ext.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeCNAME ||
		r.Answer[1].(*dns.A).A.String() != "192.0.2.10" {
		t.Fatalf("ExternalName: %v", r)
	}
	if res.calls.Load() != 1 {
		t.Fatalf("resolver calls = %d, want 1 (the ExternalName target)", res.calls.Load())
	}
}

func TestClusterNotSynced(t *testing.T) {
	cl := testCluster()
	cl.notSynced = true
	_, addr := start(t, Config{Resolver: externalResolver(), Cluster: cl})
	if r := dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("before sync without --cluster-dns: rcode %d, want SERVFAIL", r.Rcode)
	}
	central := &fakeExchanger{}
	_, addr2 := start(t, Config{Resolver: externalResolver(), Cluster: cl, ClusterDNS: central})
	if r := dnstest.Exchange(t, addr2, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA)); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("before sync with --cluster-dns: %v", r)
	}
	if central.calls.Load() != 1 {
		t.Fatalf("cluster DNS asked %d times", central.calls.Load())
	}
}

type fakeExchanger struct{ calls atomic.Int64 }

func (f *fakeExchanger) Exchange(ctx context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	f.calls.Add(1)
	m := new(dns.Msg)
	m.SetReply(q)
	m.Answer = []dns.RR{dnstest.MustRRf("%s 5 IN A 10.96.0.99", q.Question[0].Name)}
	return m, nil
}

// autopathServer runs a server with a pod 127.0.0.1 in team-a (the test
// client's address).
func autopathServer(t *testing.T, ns string, search []string) (string, *fakeResolver, *fakeCluster) {
	res := externalResolver()
	cl := testCluster()
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): ns}
	_, addr := start(t, Config{Resolver: res, Cluster: cl, Pods: pods, Autopath: true, Search: search})
	return addr, res, cl
}

func TestAutopath(t *testing.T) {
	addr, res, _ := autopathServer(t, "team-a", []string{"corp.example."})

	// An external name: one query, CNAME to the bare name plus its answer.
	r := dnstest.Exchange(t, addr, "udp", q("Api.Example.Com.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("external via autopath: %v", r)
	}
	cname, ok := r.Answer[0].(*dns.CNAME)
	if !ok || cname.Hdr.Name != "Api.Example.Com.team-a.svc.cluster.local." || cname.Target != "api.example.com." {
		t.Fatalf("CNAME %v", r.Answer[0])
	}
	if r.Question[0].Name != "Api.Example.Com.team-a.svc.cluster.local." {
		t.Fatalf("question rewritten: %v", r.Question[0])
	}
	// Walked: corp.example (NXDOMAIN upstream) and then the bare name.
	if n := res.calls.Load(); n != 2 {
		t.Fatalf("upstream steps = %d, want 2", n)
	}

	// AAAA of the same name: NODATA at the winner is NODATA for the name.
	r = dnstest.Exchange(t, addr, "udp", q("api.example.com.team-a.svc.cluster.local.", dns.TypeAAAA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("AAAA via autopath: %v", r)
	}

	// A service in the pod's own namespace: no CNAME, the direct answer.
	r = dnstest.Exchange(t, addr, "udp", q("web.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeA {
		t.Fatalf("own service: %v", r)
	}

	// svc.otherns: found at the second step, in the cluster.
	r = dnstest.Exchange(t, addr, "udp", q("db.team-b.team-a.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 2 || r.Answer[0].(*dns.CNAME).Target != "db.team-b.svc.cluster.local." {
		t.Fatalf("other namespace service: %v", r)
	}

	// Nothing anywhere: NXDOMAIN.
	r = dnstest.Exchange(t, addr, "udp", q("nothing.here.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError {
		t.Fatalf("nowhere: %v", r)
	}
}

func TestAutopathOtherNamespaceNoWalk(t *testing.T) {
	// The client is a pod in team-b asking team-a's expansion: no walk, the
	// name as asked, which does not exist.
	addr, res, _ := autopathServer(t, "team-b", nil)
	r := dnstest.Exchange(t, addr, "udp", q("api.example.com.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError || res.calls.Load() != 0 {
		t.Fatalf("other namespace: rcode %d, upstream calls %d", r.Rcode, res.calls.Load())
	}
}

func TestAutopathOff(t *testing.T) {
	res := externalResolver()
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): "team-a"}
	_, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Pods: pods, Autopath: false})
	r := dnstest.Exchange(t, addr, "udp", q("api.example.com.team-a.svc.cluster.local.", dns.TypeA))
	if r.Rcode != dns.RcodeNameError || res.calls.Load() != 0 {
		t.Fatalf("autopath off: %v", r)
	}
}

// TestAutopathSamePathForAAndAAAA: even when the upstream answers the two
// types inconsistently, the memo keeps A and AAAA on one path.
func TestAutopathSamePathForAAndAAAA(t *testing.T) {
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		soa := dnstest.MustRRf("corp.example. 60 IN SOA ns.corp.example. h.corp.example. 1 2 3 4 60")
		switch q.Question[0].Name {
		case "app.corp.example.":
			// A broken server: the name exists for A, NXDOMAIN for AAAA.
			if q.Question[0].Qtype == dns.TypeA {
				m.Answer = []dns.RR{dnstest.MustRRf("app.corp.example. 60 IN A 192.0.2.20")}
			} else {
				m.Rcode = dns.RcodeNameError
				m.Ns = []dns.RR{soa}
			}
		default:
			m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN AAAA 2001:db8::20", q.Question[0].Name)}
		}
		return m, nil
	}}
	pods := fakePods{netip.MustParseAddr("127.0.0.1"): "team-a"}
	_, addr := start(t, Config{Resolver: res, Cluster: testCluster(), Pods: pods, Autopath: true, Search: []string{"corp.example."}})
	a := dnstest.Exchange(t, addr, "udp", q("app.team-a.svc.cluster.local.", dns.TypeA))
	aaaa := dnstest.Exchange(t, addr, "udp", q("app.team-a.svc.cluster.local.", dns.TypeAAAA))
	if len(a.Answer) == 0 || a.Answer[0].(*dns.CNAME).Target != "app.corp.example." {
		t.Fatalf("A: %v", a)
	}
	if aaaa.Rcode == dns.RcodeNameError {
		t.Fatalf("AAAA took another path and got NXDOMAIN: %v", aaaa)
	}
	for _, rr := range aaaa.Answer {
		if c, ok := rr.(*dns.CNAME); ok && c.Target != "app.corp.example." {
			t.Fatalf("AAAA CNAME to %s, A went to app.corp.example.", c.Target)
		}
	}
}

// TestHugeHeadlessService: a headless Service too large for UDP gets a TC
// reply over UDP (question in the client's case, OPT when asked, no
// records), from the kept packed reply after the first query, and its
// whole answer over TCP.
func TestHugeHeadlessService(t *testing.T) {
	cl := testCluster()
	addHeadless(cl, "huge.team-a.svc.cluster.local.", hugeEndpoints)
	s, addr := start(t, Config{Resolver: &fakeResolver{}, Cluster: &stableCluster{inner: cl}})
	for i, edns := range []bool{false, true, true} {
		m := q("HUGE.team-a.svc.cluster.local.", dns.TypeA)
		m.Id = uint16(100 + i)
		if edns {
			m.SetEdns0(1232, true)
		}
		c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Truncated || r.Id != m.Id || r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 0 || len(r.Ns) != 0 ||
			len(r.Question) != 1 || r.Question[0].Name != "HUGE.team-a.svc.cluster.local." {
			t.Fatalf("UDP query %d: %v", i, r)
		}
		if o := r.IsEdns0(); (o != nil) != edns || (o != nil && !o.Do()) {
			t.Fatalf("UDP query %d: OPT %v, want one only when the query had one", i, o)
		}
	}
	if n := s.packed.len(); n != 1 {
		t.Fatalf("%d packed entries, want the huge reply kept", n)
	}
	r := dnstest.Exchange(t, s.TCPAddrs()[0].String(), "tcp", q("huge.team-a.svc.cluster.local.", dns.TypeA))
	if r.Truncated || len(r.Answer) != hugeEndpoints {
		t.Fatalf("TCP: TC %v, %d answers, want %d", r.Truncated, len(r.Answer), hugeEndpoints)
	}
}
