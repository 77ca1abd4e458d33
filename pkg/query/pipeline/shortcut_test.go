package pipeline

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// genCluster is a cluster zone that changes while the server runs, as the
// index does: the same message for a question until a change, and a
// generation that moves with every change.
type genCluster struct {
	mu    sync.Mutex
	names map[string][]dns.RR
	msgs  map[stableKey]*dns.Msg
	gen   atomic.Uint64
}

func newGenCluster() *genCluster {
	c := &genCluster{names: map[string][]dns.RR{}, msgs: map[stableKey]*dns.Msg{}}
	c.gen.Store(1)
	for name, rrs := range testCluster().names {
		c.names[name] = rrs
	}
	return c
}

func (c *genCluster) Zone() string       { return "cluster.local." }
func (c *genCluster) Generation() uint64 { return c.gen.Load() }

func (c *genCluster) Lookup(name string, qtype uint16) (stage.Result, bool) {
	if !strings.HasSuffix(name, ".cluster.local.") {
		return stage.Result{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := stableKey{name, qtype}
	if m, ok := c.msgs[k]; ok {
		return stage.Result{Msg: m}, true
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}}
	rrs, ok := c.names[name]
	if !ok {
		m.Rcode = dns.RcodeNameError
	}
	for _, rr := range rrs {
		if rr.Header().Rrtype == qtype {
			m.Answer = append(m.Answer, rr)
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{clusterSOA}
	}
	k.name = strings.Clone(name)
	c.msgs[k] = m
	return stage.Result{Msg: m}, true
}

// set gives name these records (none: the name is gone).
func (c *genCluster) set(name string, rrs ...string) {
	c.mu.Lock()
	if len(rrs) == 0 {
		delete(c.names, name)
	} else {
		c.names[name] = nil
		for _, s := range rrs {
			c.names[name] = append(c.names[name], dnstest.MustRRf("%s", s))
		}
	}
	c.msgs = map[stableKey]*dns.Msg{}
	c.mu.Unlock()
	c.gen.Add(1)
}

// mutablePods maps addresses to namespaces and may change.
type mutablePods struct {
	mu sync.Mutex
	m  map[netip.Addr]string
}

func (p *mutablePods) PodNamespace(ip netip.Addr) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns, ok := p.m[ip]
	return ns, ok
}

func (p *mutablePods) set(ip netip.Addr, ns string) {
	p.mu.Lock()
	p.m[ip] = ns
	p.mu.Unlock()
}

// scEnv is a pipeline (no transport) with a changing cluster, the real cache
// in front of ppUpstream (clock injectable), and the pod podClient in
// team-a.
type scEnv struct {
	s     *Pipeline
	cl    *genCluster
	c     *cache.Cache
	pods  *mutablePods
	clock atomic.Int64 // the cache's clock, nanoseconds after the start
}

func newSCEnv(t *testing.T, search []string) *scEnv {
	t.Helper()
	return newSCEnvHosts(t, search, nil)
}

// newSCEnvHosts is newSCEnv with static records (nil: none).
func newSCEnvHosts(t *testing.T, search []string, h stage.Hosts) *scEnv {
	t.Helper()
	e := &scEnv{cl: newGenCluster(), pods: &mutablePods{m: map[netip.Addr]string{podClient: "team-a"}}}
	c, err := cache.New(cache.Config{Size: 1000, Clock: func() time.Duration { return time.Hour + time.Duration(e.clock.Load()) }}, ppUpstream{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.c = c
	e.s, err = New(Config{Resolver: c, Cluster: e.cl, Pods: e.pods,
		Autopath: true, Search: search, Hosts: h})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// ask answers one query from podClient as the reader would, off the reader
// when it must, and says whether the kept shortcut answered it.
func (e *scEnv) ask(t *testing.T, name string, qtype uint16) (m *dns.Msg, fromShortcut bool) {
	t.Helper()
	return e.askFrom(t, podClient, name, qtype)
}

// askFrom is ask from client.
func (e *scEnv) askFrom(t *testing.T, client netip.Addr, name string, qtype uint16) (m *dns.Msg, fromShortcut bool) {
	t.Helper()
	ev := &events{}
	e.s.cfg.Observer = ev
	defer func() { e.s.cfg.Observer = nil }()
	r := new(server.Request)
	r.Read("udp", 0, client, time.Now(), packet(t, name, qtype, false))
	asked := strings.ToLower(name)
	kept := e.s.search.Kept(asked, qtype, false, false)
	out, v := e.s.Answer(make([]byte, 0, 4096), r)
	if v == server.Wait {
		out = e.s.Resolve(context.Background(), nil, r)
	}
	m = new(dns.Msg)
	if err := m.Unpack(out); err != nil {
		t.Fatalf("%s: unpacking the reply: %v", name, err)
	}
	// From the shortcut: answered on the reader by the entry that was
	// kept before (a failed check removes it; a rebuild is another one).
	return m, kept != nil && v == server.Reply && ev.last().Source == stage.SourceAutopath && e.s.search.Kept(asked, qtype, false, false) == kept
}

// warm asks name until the reply comes from a kept shortcut (the first
// query walks, the second builds the shortcut).
func (e *scEnv) warm(t *testing.T, name string, qtypes ...uint16) {
	t.Helper()
	for _, qt := range qtypes {
		for i := 0; ; i++ {
			if _, sc := e.ask(t, name, qt); sc {
				break
			}
			if i == 3 {
				t.Fatalf("%s %s: never answered from a shortcut", name, dns.TypeToString[qt])
			}
		}
	}
}

func cnameTarget(m *dns.Msg) string {
	if len(m.Answer) > 0 {
		if c, ok := m.Answer[0].(*dns.CNAME); ok {
			return c.Target
		}
	}
	return ""
}

// A Service created at an earlier step of a kept shortcut: the client
// walking its own list would stop there, so A and AAAA both do, at once.
func TestShortcutEarlierStepCreated(t *testing.T) {
	e := newSCEnv(t, nil)
	const name = "db.team-b.team-a.svc.cluster.local."
	e.warm(t, name, dns.TypeA, dns.TypeAAAA)
	if m, _ := e.ask(t, name, dns.TypeA); cnameTarget(m) != "db.team-b.svc.cluster.local." {
		t.Fatalf("before: %v", m)
	}
	// Step 0 now exists (an endpoint "db" of a Service "team-b" in
	// team-a, say).
	e.cl.set(name, name+" 5 IN A 10.244.0.9")
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeA, dns.TypeAAAA} {
		m, sc := e.ask(t, name, qt)
		if sc || cnameTarget(m) != "" || m.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s after the earlier step appeared: shortcut %v, reply %v; want the name itself", dns.TypeToString[qt], sc, m)
		}
	}
	if m, _ := e.ask(t, name, dns.TypeA); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.244.0.9" {
		t.Fatalf("A of the new name: %v", m)
	}
}

// A cluster winner that changes is served as it is now; one that goes away
// is walked again (NXDOMAIN everywhere here).
func TestShortcutClusterWinnerChanges(t *testing.T) {
	e := newSCEnv(t, nil)
	const name = "db.team-b.team-a.svc.cluster.local."
	e.warm(t, name, dns.TypeA)
	e.cl.set("db.team-b.svc.cluster.local.", "db.team-b.svc.cluster.local. 5 IN A 10.96.0.99")
	m, _ := e.ask(t, name, dns.TypeA)
	if len(m.Answer) != 2 || m.Answer[1].(*dns.A).A.String() != "10.96.0.99" {
		t.Fatalf("after the change: %v", m)
	}
	e.warm(t, name, dns.TypeA)
	e.cl.set("db.team-b.svc.cluster.local.")
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		if m, sc := e.ask(t, name, qt); sc || m.Rcode != dns.RcodeNameError {
			t.Fatalf("%s after the delete: shortcut %v, %v; want NXDOMAIN", dns.TypeToString[qt], sc, m)
		}
	}
}

// A cached winner: the shortcut's TTLs count down with the cache's, a
// changed cached answer is served as it is, and an expired one is not
// served from the shortcut.
func TestShortcutCachedWinner(t *testing.T) {
	e := newSCEnv(t, []string{"corp.example."})
	const name = "api.example.com.team-a.svc.cluster.local."
	e.warm(t, name, dns.TypeA, dns.TypeAAAA)
	m, _ := e.ask(t, name, dns.TypeA)
	if cnameTarget(m) != "api.example.com." || len(m.Answer) != 2 || m.Answer[0].Header().Ttl != 300 || m.Answer[1].Header().Ttl != 300 {
		t.Fatalf("first: %v", m)
	}
	e.clock.Store(int64(100 * time.Second))
	m, sc := e.ask(t, name, dns.TypeA)
	if !sc || m.Answer[0].Header().Ttl != 200 || m.Answer[1].Header().Ttl != 200 {
		t.Fatalf("100 s later: shortcut %v, %v; want TTLs 200 from the shortcut", sc, m)
	}
	m, sc = e.ask(t, name, dns.TypeAAAA)
	if !sc || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 || len(m.Ns) != 1 || m.Ns[0].Header().Ttl != 200 {
		t.Fatalf("AAAA 100 s later: shortcut %v, %v; want NODATA with the SOA's TTL 200", sc, m)
	}

	// The cache gets another answer for the winner.
	r := new(dns.Msg)
	r.SetQuestion("api.example.com.", dns.TypeA)
	r.Response = true
	r.Answer = []dns.RR{dnstest.MustRRf("api.example.com. 60 IN A 192.0.2.77")}
	e.c.Put(cache.KeyOf(r), r)
	m, sc = e.ask(t, name, dns.TypeA)
	if sc || len(m.Answer) != 2 || m.Answer[1].(*dns.A).A.String() != "192.0.2.77" {
		t.Fatalf("after the cache changed: shortcut %v, %v", sc, m)
	}
	e.warm(t, name, dns.TypeA)

	// Past the winner's TTL: never from the shortcut.
	e.clock.Store(int64(100*time.Second + 61*time.Second))
	if m, sc := e.ask(t, name, dns.TypeA); sc {
		t.Fatalf("past the TTL: served from the shortcut: %v", m)
	}
}

// A new search list (reload) drops every shortcut: the walk's steps
// changed.
func TestShortcutSearchPathChange(t *testing.T) {
	e := newSCEnv(t, []string{"corp.example."})
	const name = "api.example.com.team-a.svc.cluster.local."
	e.warm(t, name, dns.TypeA)
	e.s.SetSearchPath(true, nil)
	if n := e.s.search.Shortcuts(); n != 0 {
		t.Fatalf("%d shortcuts kept across a new search list", n)
	}
	ev := &events{}
	e.s.cfg.Observer = ev
	r := new(server.Request)
	r.Read("udp", 0, podClient, time.Now(), packet(t, name, dns.TypeA, false))
	if _, v := e.s.Answer(make([]byte, 0, 4096), r); v == server.Wait {
		e.s.Resolve(context.Background(), nil, r)
	}
	// Four steps now (no corp.example): the bare name is the fourth.
	if got := ev.last(); got.AutopathSaved != 3 {
		t.Fatalf("after the new search list: saved %d, want 3", got.AutopathSaved)
	}
}

// An address reused by a pod of another namespace: that pod never gets the
// first namespace's shortcuts, and its own walk is its namespace's.
func TestShortcutAddressReused(t *testing.T) {
	e := newSCEnv(t, nil)
	e.warm(t, "api.example.com.team-a.svc.cluster.local.", dns.TypeA)
	e.pods.set(podClient, "team-b")
	m, sc := e.ask(t, "api.example.com.team-a.svc.cluster.local.", dns.TypeA)
	if sc || m.Rcode != dns.RcodeNameError || len(m.Answer) != 0 {
		t.Fatalf("team-a's expansion asked by a team-b pod: shortcut %v, %v; want NXDOMAIN as asked", sc, m)
	}
	m, _ = e.ask(t, "api.example.com.team-b.svc.cluster.local.", dns.TypeA)
	if cnameTarget(m) != "api.example.com." || m.Answer[0].Header().Name != "api.example.com.team-b.svc.cluster.local." {
		t.Fatalf("team-b's own expansion: %v", m)
	}
}

// The shortcut lives no longer than the walk's decision: with a memo that
// expires at once, every query is walked.
func TestShortcutFollowsMemo(t *testing.T) {
	e := newSCEnv(t, nil)
	e.s.search = ndots.New(e.s.cfg.Cluster, time.Nanosecond, *e.s.search.Settings())
	for i := 0; i < 3; i++ {
		if m, sc := e.ask(t, "db.team-b.team-a.svc.cluster.local.", dns.TypeA); sc || cnameTarget(m) != "db.team-b.svc.cluster.local." {
			t.Fatalf("query %d: shortcut %v, %v", i, sc, m)
		}
	}
}
