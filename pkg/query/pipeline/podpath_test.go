package pipeline

// The pod's path with the real pieces: the pkg/k8s index (over a fake
// clientset, synced by its own informers), the pkg/cache cache in front of
// a scripted upstream, and a client that is a pod on this node. These pin
// what a pod's queries cost on the reader (search-path shortcuts, pod
// records, PTR) and benchmark them next to a plain cache hit.

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// podClient is the address the test queries come from: a pod of team-a on
// this node (ppNode).
var podClient = netip.MustParseAddr("127.0.0.1")

const ppNode = "node-1"

// ppUpstream is the scripted upstream behind the real cache:
// api.example.com has an A record and no AAAA; every other name is
// NXDOMAIN with an SOA (so the negative answers are cached too).
type ppUpstream struct{}

func (ppUpstream) Exchange(_ context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	soa := dnstest.MustRRf("example.com. 300 IN SOA ns.example.com. h.example.com. 1 2 3 4 300")
	switch qq := q.Question[0]; {
	case qq.Name == "api.example.com." && qq.Qtype == dns.TypeA:
		m.Answer = []dns.RR{dnstest.MustRRf("api.example.com. 300 IN A 192.0.2.10")}
	case qq.Name == "api.example.com.":
		m.Ns = []dns.RR{soa}
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	}
	return m, nil
}

func ppObjects() []runtime.Object {
	tcp := corev1.ProtocolTCP
	svc := func(ns, name, ip string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "http", Protocol: tcp, Port: 80}}}}
		if ip != corev1.ClusterIPNone {
			s.Spec.ClusterIPs = []string{ip}
		}
		return s
	}
	pod := func(ns, name, node, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0))},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	port, name, yes := int32(8080), "http", true
	host := "sts-0"
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		svc("team-a", "web", "10.96.0.10"),
		svc("team-b", "db", "10.96.0.11"),
		svc("team-a", "sts", corev1.ClusterIPNone),
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "team-a", Name: "sts-x", Labels: map[string]string{discoveryv1.LabelServiceName: "sts"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &tcp, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, Hostname: &host,
				Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
		},
		pod("team-a", "client", ppNode, podClient.String()),
		pod("team-b", "peer", "node-2", "10.244.2.7"),
		pod("team-b", "peer6", "node-2", "fd00:244::7"),
	}
}

// ppIndex runs a real index (pods verified, so pod records are checked
// against real pods) over a fake clientset and waits for its sync.
func ppIndex(tb testing.TB) *k8s.Index {
	tb.Helper()
	ix, err := k8s.New(fake.NewClientset(ppObjects()...), k8s.Config{Zone: "cluster.local", TTL: 5,
		Pods: k8s.PodsVerified, NodeName: ppNode, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	dnstest.RunUntilCleanup(tb, "index Run", ix.Run)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := ix.PodNamespace(podClient); ok && ix.Synced() {
			return ix
		}
		if time.Now().After(deadline) {
			tb.Fatal("index did not sync within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ppServer is a pipeline (no transport) with the real index, the real cache
// holding a plain external name (www.example.test), and autopath on for
// the pod podClient; opts adjust its configuration.
func ppServer(tb testing.TB, opts ...func(*Config)) *Pipeline {
	tb.Helper()
	c, err := cache.New(cache.Config{Size: 1000}, ppUpstream{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	r := new(dns.Msg)
	r.SetQuestion("www.example.test.", dns.TypeA)
	r.Response = true
	r.Answer = []dns.RR{dnstest.MustRRf("www.example.test. 300 IN A 192.0.2.1")}
	c.Put(cache.KeyOf(r), r)
	ix := ppIndex(tb)
	cfg := Config{Resolver: c, Cluster: ix, Pods: ix, Autopath: true, Search: []string{"corp.example."}}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// ppAnswer answers pkt as the reader would, resolving off the reader when
// it must (the first query of a walk), and returns the reply unpacked.
func ppAnswer(tb testing.TB, s *Pipeline, pkt []byte) *dns.Msg {
	tb.Helper()
	r := new(server.Request)
	r.Read("udp", 0, podClient, time.Now(), pkt)
	out, v := s.Answer(make([]byte, 0, 4096), r)
	if v == server.Wait {
		out = s.Resolve(context.Background(), nil, r)
	} else if v != server.Reply {
		tb.Fatalf("verdict %d", v)
	}
	m := new(dns.Msg)
	if err := m.Unpack(out); err != nil {
		tb.Fatalf("unpacking the reply: %v", err)
	}
	return m
}

// ppCase is one query a pod sends, and what its reply must hold.
type ppCase struct {
	name  string
	qname string
	qtype uint16
	// rcode and answer: the reply's rcode and its answer section in
	// short form ("TYPE rdata", in order).
	rcode  int
	answer []string
}

func ppCases() []ppCase {
	return []ppCase{
		{"shortcut external A", "api.example.com.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess,
			[]string{"CNAME api.example.com.", "A 192.0.2.10"}},
		{"shortcut external AAAA (NODATA)", "api.example.com.team-a.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"shortcut other namespace", "db.team-b.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess,
			[]string{"CNAME db.team-b.svc.cluster.local.", "A 10.96.0.11"}},
		{"shortcut other namespace AAAA (NODATA)", "db.team-b.team-a.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"own namespace service", "web.team-a.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.96.0.10"}},
		{"pod A", "10-244-2-7.team-b.pod.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.244.2.7"}},
		{"pod AAAA", "fd00-244--7.team-b.pod.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, []string{"AAAA fd00:244::7"}},
		{"PTR ClusterIP", "10.0.96.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"PTR web.team-a.svc.cluster.local."}},
		{"PTR endpoint", "5.1.244.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"PTR sts-0.sts.team-a.svc.cluster.local."}},
	}
}

func short(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		f := dns.TypeToString[rr.Header().Rrtype]
		switch v := rr.(type) {
		case *dns.A:
			f += " " + v.A.String()
		case *dns.AAAA:
			f += " " + v.AAAA.String()
		case *dns.CNAME:
			f += " " + v.Target
		case *dns.PTR:
			f += " " + v.Ptr
		}
		out = append(out, f)
	}
	return out
}

// TestHotPathAllocsPodPath pins, with the real index and cache, what a pod's
// repeated queries cost on the reader: a search-path shortcut whose winner
// is known (a cached external name, a cluster name), a pod record and a
// PTR record are served from wire form like a cache hit, at zero
// allocations; and each reply is the right one. The same holds with the
// client's namespace looked up for every query and reported (the
// per-namespace figures).
func TestHotPathAllocsPodPath(t *testing.T) {
	for _, ns := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "client namespaces"}[ns], func(t *testing.T) {
			testHotPathAllocsPodPath(t, ppServer(t, func(c *Config) {
				if ns {
					c.ClientNamespaces, c.Observer = true, &noopObserver{}
				}
			}))
		})
	}
}

func testHotPathAllocsPodPath(t *testing.T, s *Pipeline) {
	out := make([]byte, 0, 4096)
	for _, c := range ppCases() {
		pkt := packet(t, c.qname, c.qtype, true)
		// First asks: walk (off the reader) and warm what it found. The
		// reply built on the reader and the one served from what it
		// kept are the same message.
		var replies []string
		for i := 0; i < 3; i++ {
			m := ppAnswer(t, s, pkt)
			if m.Rcode != c.rcode || !equalStrings(short(m.Answer), c.answer) {
				t.Fatalf("%s (ask %d): rcode %s answer %q, want %s %q", c.name, i+1,
					dns.RcodeToString[m.Rcode], short(m.Answer), dns.RcodeToString[c.rcode], c.answer)
			}
			for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
				for _, rr := range rrs {
					rr.Header().Ttl = 0
				}
			}
			replies = append(replies, m.String())
		}
		if replies[1] != replies[2] {
			t.Errorf("%s: the kept reply differs from the one built:\n%s\n%s", c.name, replies[1], replies[2])
		}
		if _, v := ppServeOnce(s, pkt, out); v != server.Reply {
			t.Errorf("%s: verdict %d, want a reply on the reader", c.name, v)
			continue
		}
		n := testing.AllocsPerRun(200, func() { ppServeOnce(s, pkt, out) })
		if n != 0 {
			t.Errorf("%s: %.1f allocations per query, want 0", c.name, n)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ppReq is reused like a socket reader reuses its request.
var ppReq = new(server.Request)

func ppServeOnce(s *Pipeline, pkt, out []byte) ([]byte, server.Verdict) {
	ppReq.Read("udp", 0, podClient, time.Now(), pkt)
	return s.Answer(out[:0], ppReq)
}

// BenchmarkPodPath: per query on the reader, a pod's repeated queries
// against a plain cache hit from the same server.
func BenchmarkPodPath(b *testing.B) {
	cases := append([]ppCase{{name: "cache hit", qname: "www.example.test.", qtype: dns.TypeA}}, ppCases()...)
	s := ppServer(b)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			pkt := packet(b, c.qname, c.qtype, true)
			for i := 0; i < 3; i++ {
				ppAnswer(b, s, pkt)
			}
			out := make([]byte, 0, 4096)
			b.ReportAllocs()
			for b.Loop() {
				ppServeOnce(s, pkt, out)
			}
		})
	}
}
