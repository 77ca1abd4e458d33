package pipeline

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodedns/nodedns/pkg/query/dns64"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/acl"
	"github.com/nodedns/nodedns/pkg/query/builtin"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/rewrite"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/query/template"
)

// noUpstream fails every exchange; the hit-path tests never reach it.
type noUpstream struct{}

func (noUpstream) Exchange(context.Context, stage.Origin, *dns.Msg) (*dns.Msg, error) {
	return nil, context.DeadlineExceeded
}

// hotServer returns a pipeline (no transport) whose cache holds
// www.example.test A and whose cluster knows web.team-a; opts adjust its
// configuration (static records, load balancing).
func hotServer(tb testing.TB, opts ...func(*Config)) *Pipeline {
	tb.Helper()
	c, err := cache.New(cache.Config{Size: 1000}, noUpstream{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	r := new(dns.Msg)
	r.SetQuestion("www.example.test.", dns.TypeA)
	r.Response = true
	r.Answer = []dns.RR{dnstest.MustRRf("www.example.test. 300 IN A 192.0.2.1")}
	c.Put(cache.KeyOf(r), r)
	pool := new(dns.Msg)
	pool.SetQuestion("pool.example.test.", dns.TypeA)
	pool.Response = true
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		pool.Answer = append(pool.Answer, dnstest.MustRRf("pool.example.test. 300 IN A %s", ip))
	}
	c.Put(cache.KeyOf(pool), pool)
	cl := testCluster()
	addHeadless(cl, "small.team-a.svc.cluster.local.", 3)
	addHeadless(cl, "huge.team-a.svc.cluster.local.", hugeEndpoints)
	cfg := Config{Resolver: c, Cluster: &stableCluster{inner: cl}}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// hugeEndpoints is the size of the big headless Service: its A answer is
// about 8 KB, far over any UDP size a client may ask for.
const hugeEndpoints = 500

// addHeadless gives the cluster a headless Service of n ready endpoints.
func addHeadless(c *fakeCluster, name string, n int) {
	rrs := make([]dns.RR, n)
	for i := range rrs {
		rrs[i] = dnstest.MustRRf("%s 5 IN A 10.244.%d.%d", name, i/250, i%250+1)
	}
	c.names[name] = rrs
}

func packet(tb testing.TB, name string, qtype uint16, edns bool) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var client = netip.MustParseAddr("127.0.0.1")

// reqs is reused like a socket reader reuses its request.
var reqs = new(server.Request)

func serveOnce(p *Pipeline, pkt, out []byte) ([]byte, server.Verdict) {
	reqs.Read("udp", 0, client, time.Now(), pkt)
	return p.Answer(out[:0], reqs)
}

// TestHotPathAllocs pins the allocation count of a cache hit and of a
// cluster answer on the reader: the per-query cost a node pays thousands of
// times a second.
//
// The same holds with the drop-in features on: static records consulted
// before everything (and answering), load balancing rotating the answers.
func TestHotPathAllocs(t *testing.T) {
	servers := []struct {
		name string
		s    *Pipeline
	}{
		{"", hotServer(t)},
		{"with hosts", hotServer(t, withHosts(t))},
		{"with rewrite rules", hotServer(t, withRewrite(t))},
		{"with loadbalance", hotServer(t, withLoadBalance)},
		{"with all three", hotServer(t, withHosts(t), withRewrite(t), withLoadBalance)},
		{"with client namespaces", hotServer(t, withNamespaces)},
		{"with plugins", hotServer(t, withPlugins(t))},
		{"with views", hotServer(t, withViews(t))},
		{"with dnstap", hotServer(t, withDnstap(t))},
		{"with file and nsid", hotServer(t, withPlugins(t), withZoneFiles(t), withNSID)},
		{"with dns64 (IPv6 clients only)", hotServer(t, withDNS64(t))},
	}
	out := make([]byte, 0, 4096)
	cases := []struct {
		name string
		pkt  []byte
		max  float64
	}{
		{"cache hit", packet(t, "Www.Example.Test.", dns.TypeA, true), 0},
		{"cluster answer", packet(t, "web.team-a.svc.cluster.local.", dns.TypeA, true), 0},
		// A headless Service too large for UDP: the TC reply costs what a
		// small answer costs, so large Services are no way to load the
		// agent.
		{"huge headless (TC)", packet(t, "huge.team-a.svc.cluster.local.", dns.TypeA, true), 0},
		{"huge headless (TC, no EDNS)", packet(t, "huge.team-a.svc.cluster.local.", dns.TypeA, false), 0},
		{"cache hit of 3 addresses", packet(t, "pool.example.test.", dns.TypeA, true), 0},
	}
	for _, sv := range servers {
		cs := cases
		if sv.s.cfg.Hosts != nil {
			cs = append(cs[:len(cs):len(cs)], struct {
				name string
				pkt  []byte
				max  float64
			}{"hosts answer", packet(t, "Static.Example.", dns.TypeA, true), 0})
		}
		if sv.s.plugins.Load() != nil {
			cs = append(cs[:len(cs):len(cs)], struct {
				name string
				pkt  []byte
				max  float64
			}{"template's fixed answer", packet(t, "Www.Example.Test.", dns.TypeAAAA, true), 0})
		}
		for _, c := range cs {
			if _, v := serveOnce(sv.s, c.pkt, out); v != server.Reply {
				t.Fatalf("%s %s: verdict %d, want a reply on the reader", c.name, sv.name, v)
			}
			n := testing.AllocsPerRun(200, func() { serveOnce(sv.s, c.pkt, out) })
			if n > c.max {
				t.Errorf("%s %s: %.1f allocations per query, want at most %.0f", c.name, sv.name, n, c.max)
			}
		}
	}
}

// withRewrite configures rewrite rules of every kind that the hot-path
// names do not match.
func withRewrite(tb testing.TB) func(*Config) {
	rw := mustRewriter(tb,
		rewrite.Rule{From: "api.legacy", To: "web.team-a.svc.cluster.local"},
		rewrite.Rule{Type: "suffix", From: ".corp", To: ".corp.example"},
		rewrite.Rule{Type: "regex", From: `^(.+)\.old\.example\.$`, To: "{1}.new.example"})
	return func(c *Config) { c.Rewriter = rw }
}

func withLoadBalance(c *Config) { c.LoadBalance = true }

// withNamespaces makes the test client a pod of team-a whose namespace
// every event reports (the per-namespace figures), to an observer.
func withNamespaces(c *Config) {
	c.Pods, c.ClientNamespaces, c.Observer = fakePods{client: "team-a"}, true, &noopObserver{}
}

// withPlugins configures the CoreDNS plugins as clusters use them, none
// answering the hot-path questions but the AAAA template: local and
// chaos, the AKS-style access list (transfers blocked, the client's
// network allowed, the rest blocked), AAAA emptied everywhere, header
// rules.
func withPlugins(tb testing.TB) func(*Config) {
	pl := &Plugins{Local: builtin.NewLocal(true), Chaos: builtin.NewChaos("nodedns", []string{"nodedns"}),
		ACL: mustACL(tb, acl.Rule{Policies: []acl.Policy{{Action: acl.Block, Types: []string{"AXFR", "IXFR"}},
			{Action: acl.Allow, Nets: []string{"10.0.0.0/8", "127.0.0.0/8", "fd00::/8"}}, {Action: acl.Block}}}),
		Templates: mustTemplates(tb, template.Config{Class: "IN", Type: "AAAA", Rcode: "NOERROR"}),
		Header:    Header{Set: dnswire.FlagAA}}
	return func(c *Config) { c.Plugins = pl }
}

// withHosts configures static records (static.example, falling through for
// every other name) in front of the other stages.
func withHosts(tb testing.TB) func(*Config) {
	h, err := hosts.New(hosts.Config{Entries: []string{"192.0.2.50 static.example", "192.0.2.51 static.example"}, Fallthrough: []string{}})
	if err != nil {
		tb.Fatal(err)
	}
	return func(c *Config) { c.Hosts = h }
}

func BenchmarkFastCacheHit(b *testing.B) {
	s := hotServer(b)
	pkt := packet(b, "Www.Example.Test.", dns.TypeA, true)
	out := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		serveOnce(s, pkt, out)
	}
}

// BenchmarkDropIn measures the hit paths (a cache hit of three addresses, a
// cluster answer) with each drop-in feature off and on: static records
// consulted first, rewrite rules that do not match, round-robin rotation.
func BenchmarkDropIn(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []func(*Config)
	}{
		{"off", nil},
		{"hosts", []func(*Config){withHosts(b)}},
		{"rewrite", []func(*Config){withRewrite(b)}},
		{"loadbalance", []func(*Config){withLoadBalance}},
		{"all", []func(*Config){withHosts(b), withRewrite(b), withLoadBalance}},
		{"plugins", []func(*Config){withPlugins(b)}},
		{"dnstap", []func(*Config){withDnstap(b)}},
		{"views", []func(*Config){withViews(b)}},
		{"file+nsid", []func(*Config){withZoneFiles(b), withNSID}},
	} {
		s := hotServer(b, c.opts...)
		for _, q := range []struct{ name, qname string }{{"cache3", "pool.example.test."}, {"cluster", "web.team-a.svc.cluster.local."}} {
			pkt := packet(b, q.qname, dns.TypeA, true)
			out := make([]byte, 0, 4096)
			b.Run(c.name+"/"+q.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					serveOnce(s, pkt, out)
				}
			})
		}
	}
}

func BenchmarkFastClusterAnswer(b *testing.B) {
	s := hotServer(b)
	pkt := packet(b, "web.team-a.svc.cluster.local.", dns.TypeA, true)
	out := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		serveOnce(s, pkt, out)
	}
}

// BenchmarkFastClusterHeadless compares a small headless Service with one
// of hugeEndpoints endpoints over UDP (the huge one is answered with TC):
// per query, the huge one should cost no more than the small one.
func BenchmarkFastClusterHeadless(b *testing.B) {
	for _, c := range []struct {
		name, qname string
	}{{"small", "small.team-a.svc.cluster.local."}, {"huge", "huge.team-a.svc.cluster.local."}} {
		b.Run(c.name, func(b *testing.B) {
			s := hotServer(b)
			pkt := packet(b, c.qname, dns.TypeA, true)
			out := make([]byte, 0, 4096)
			if _, v := serveOnce(s, pkt, out); v != server.Reply {
				b.Fatalf("verdict %d", v)
			}
			b.ReportAllocs()
			for b.Loop() {
				serveOnce(s, pkt, out)
			}
		})
	}
}

// stableCluster returns the same message for the same question, as the
// real index does (it builds messages when objects change, not per query).
type stableCluster struct {
	inner *fakeCluster
	mu    sync.Mutex
	memo  map[stableKey]stage.Result
}

type stableKey struct {
	name  string
	qtype uint16
}

func (c *stableCluster) Zone() string       { return c.inner.Zone() }
func (c *stableCluster) Generation() uint64 { return 0 }

func (c *stableCluster) Lookup(name string, qtype uint16) (stage.Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.memo[stableKey{name, qtype}]; ok {
		return r, true
	}
	r, ok := c.inner.Lookup(name, qtype)
	if ok {
		if c.memo == nil {
			c.memo = map[stableKey]stage.Result{}
		}
		c.memo[stableKey{strings.Clone(name), qtype}] = r
	}
	return r, ok
}

// swapCluster returns a new message for the same name on every change, as
// the index does when a Service changes.
type swapCluster struct {
	mu sync.Mutex
	m  *dns.Msg
}

func (c *swapCluster) Zone() string       { return "cluster.local." }
func (c *swapCluster) Generation() uint64 { return 0 }

func (c *swapCluster) Lookup(name string, qtype uint16) (stage.Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return stage.Result{Msg: c.m}, true
}

func (c *swapCluster) set(ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true},
		Answer: []dns.RR{dnstest.MustRRf("web.team-a.svc.cluster.local. 5 IN A %s", ip)}}
}

// TestPackedRepliesFollowChanges: a changed message is packed again in
// place of the old one (one version per question, whatever the churn), and
// the reply is the new one.
func TestPackedRepliesFollowChanges(t *testing.T) {
	cl := &swapCluster{}
	s, err := New(Config{Resolver: &fakeResolver{}, Cluster: cl})
	if err != nil {
		t.Fatal(err)
	}
	pkt := packet(t, "web.team-a.svc.cluster.local.", dns.TypeA, false)
	out := make([]byte, 0, 4096)
	for i := 0; i < 50; i++ {
		ip := "10.96.0." + strconv.Itoa(i+1)
		cl.set(ip)
		b, v := serveOnce(s, pkt, out)
		if v != server.Reply {
			t.Fatalf("verdict %d", v)
		}
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != ip {
			t.Fatalf("change %d: reply %v (err %v), want %s", i, m.Answer, err, ip)
		}
	}
	if n := s.packed.len(); n != 1 {
		t.Fatalf("%d packed entries after 50 changes of one name, want 1", n)
	}
}

// withDNS64 configures the plugins of withPlugins and dns64 for IPv6
// clients (CoreDNS's default): the hot-path queries, from an IPv4 client,
// are not translated.
func withDNS64(tb testing.TB) func(*Config) {
	var c Config
	withPlugins(tb)(&c)
	pl := *c.Plugins
	pl.DNS64 = mustDNS64(tb, dns64.Config{TranslateAll: true})
	return func(c *Config) { c.Plugins = &pl }
}
