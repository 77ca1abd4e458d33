package pipeline

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// edeUpstream is the scripted upstream behind the real cache of the EDE
// table: per name, a reply builder, or an exchanger to delegate to (a real
// forwarder whose servers time out or refuse).
type edeUpstream struct {
	mu    sync.Mutex
	reply map[string]func(q *dns.Msg) (*dns.Msg, error)
	dflt  func(q *dns.Msg) (*dns.Msg, error)
}

func (u *edeUpstream) set(name string, f func(q *dns.Msg) (*dns.Msg, error)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reply[name] = f
}

func (u *edeUpstream) Exchange(ctx context.Context, o stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	u.mu.Lock()
	f, ok := u.reply[q.Question[0].Name]
	if !ok {
		f = u.dflt
	}
	u.mu.Unlock()
	return f(q)
}

// answerA answers with an A record of ttl, and the EDE options given in
// the reply's OPT (as an upstream resolver sets them).
func answerA(ttl uint32, ede ...*dns.EDNS0_EDE) func(q *dns.Msg) (*dns.Msg, error) {
	return func(q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = []dns.RR{dnstest.MustRRf("%s %d IN A 192.0.2.44", q.Question[0].Name, ttl)}
		withEDE(m, ede...)
		return m, nil
	}
}

func rcodeReply(rcode int, ede ...*dns.EDNS0_EDE) func(q *dns.Msg) (*dns.Msg, error) {
	return func(q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetRcode(q, rcode)
		if rcode == dns.RcodeNameError {
			m.Ns = []dns.RR{dnstest.MustRRf("example.test. 1 IN SOA ns.example.test. h.example.test. 1 2 3 4 1")}
		}
		withEDE(m, ede...)
		return m, nil
	}
}

func withEDE(m *dns.Msg, ede ...*dns.EDNS0_EDE) {
	if len(ede) == 0 {
		return
	}
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 1232}}
	for _, e := range ede {
		opt.Option = append(opt.Option, e)
	}
	m.Extra = append(m.Extra, opt)
}

func fails(err error) func(q *dns.Msg) (*dns.Msg, error) {
	return func(*dns.Msg) (*dns.Msg, error) { return nil, err }
}

// forwarderTo is a real forwarder to addr, with short timeouts.
func forwarderTo(t *testing.T, addr string) *upstream.Forwarder {
	t.Helper()
	f, err := upstream.New(upstream.Config{Servers: []string{addr}, TryTimeout: 100 * time.Millisecond, Budget: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// blackhole is a UDP socket that reads nothing: exchanges with it time out.
func blackhole(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// closedPort is a UDP port nothing listens on: exchanges with it are
// refused (ICMP port unreachable).
func closedPort(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// edeRig is a pipeline with the real cache (serve-stale on, a clock the
// test moves) in front of edeUpstream, a cluster that can be unsynced,
// and a pod of team-a at podClient for the search-path walk.
type edeRig struct {
	p     *Pipeline
	up    *edeUpstream
	cl    *fakeCluster
	mu    sync.Mutex
	clock time.Duration
}

func (r *edeRig) advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock += d
}

func newEDERig(t *testing.T) *edeRig {
	t.Helper()
	r := &edeRig{up: &edeUpstream{reply: map[string]func(q *dns.Msg) (*dns.Msg, error){}, dflt: rcodeReply(dns.RcodeNameError)}}
	c, err := cache.New(cache.Config{Size: 100, StaleFor: time.Hour, StaleAnswerAfter: time.Millisecond, PrefetchHits: -1,
		Clock: func() time.Duration { r.mu.Lock(); defer r.mu.Unlock(); return r.clock }}, r.up)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r.cl = testCluster()
	p, err := New(Config{Resolver: c, Cluster: r.cl, Pods: fakePods{podClient: "team-a"}, Autopath: true,
		QueryTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	return r
}

// ask sends m as the transport does: on the reader first, then off it
// when the pipeline says so; refuse answers it as the transport does at
// the in-flight bound.
func (r *edeRig) ask(t *testing.T, m *dns.Msg, refuse bool) *dns.Msg {
	t.Helper()
	pkt, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	req := new(server.Request)
	req.Read("udp", 0, podClient, time.Now(), pkt)
	var out []byte
	switch {
	case refuse:
		out = r.p.Refuse(nil, req)
	default:
		var v server.Verdict
		if out, v = r.p.Answer(nil, req); v == server.Wait {
			out = r.p.Resolve(context.Background(), nil, req)
		}
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(out); err != nil {
		t.Fatalf("%s: reply does not unpack: %v", m.Question[0].Name, err)
	}
	return reply
}

// edeOf lists the EDE codes of a reply's OPT; nil without an OPT.
func edeOf(m *dns.Msg) (codes []uint16, texts []string, hasOPT bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return nil, nil, false
	}
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok {
			codes = append(codes, e.InfoCode)
			texts = append(texts, e.ExtraText)
		}
	}
	return codes, texts, true
}

// TestExtendedDNSErrors is the table of every Extended DNS Error the agent
// sets or passes on (RFC 8914): each case is a query (with EDNS unless
// said) after a setup, the reply's rcode and its EDE codes, in order.
// Clients without EDNS get none: no OPT at all.
func TestExtendedDNSErrors(t *testing.T) {
	edns := func(m *dns.Msg) *dns.Msg { m.SetEdns0(1232, false); return m }
	cases := []struct {
		name   string
		setup  func(t *testing.T, r *edeRig)
		query  *dns.Msg
		refuse bool
		rcode  int
		codes  []uint16
		noEDNS bool // the same query without EDNS must carry no OPT
	}{
		{name: "plain answer: none", setup: func(t *testing.T, r *edeRig) { r.up.set("plain.example.test.", answerA(60)) },
			query: q("plain.example.test.", dns.TypeA), rcode: dns.RcodeSuccess, codes: nil, noEDNS: true},
		{name: "stale answer: 3", setup: func(t *testing.T, r *edeRig) {
			r.up.set("stale.example.test.", answerA(1))
			r.ask(t, edns(q("stale.example.test.", dns.TypeA)), false)
			r.advance(5 * time.Second)
			r.up.set("stale.example.test.", fails(context.DeadlineExceeded))
		}, query: q("stale.example.test.", dns.TypeA), rcode: dns.RcodeSuccess, codes: []uint16{3}},
		{name: "stale NXDOMAIN: 19", setup: func(t *testing.T, r *edeRig) {
			r.up.set("gone.example.test.", rcodeReply(dns.RcodeNameError))
			r.ask(t, edns(q("gone.example.test.", dns.TypeA)), false)
			r.advance(5 * time.Second)
			r.up.set("gone.example.test.", fails(context.DeadlineExceeded))
		}, query: q("gone.example.test.", dns.TypeA), rcode: dns.RcodeNameError, codes: []uint16{19}},
		{name: "cached SERVFAIL: 13", setup: func(t *testing.T, r *edeRig) {
			r.up.set("broken.example.test.", rcodeReply(dns.RcodeServerFailure))
			if got := r.ask(t, edns(q("broken.example.test.", dns.TypeA)), false); got.Rcode != dns.RcodeServerFailure {
				t.Fatalf("first ask: rcode %d", got.Rcode)
			}
		}, query: q("broken.example.test.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{13}, noEDNS: true},
		{name: "every upstream timed out: 22", setup: func(t *testing.T, r *edeRig) {
			f := forwarderTo(t, blackhole(t))
			r.up.set("slow.example.test.", func(q *dns.Msg) (*dns.Msg, error) { return f.Exchange(context.Background(), stage.Origin{}, q) })
		}, query: q("slow.example.test.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{22}, noEDNS: true},
		{name: "every upstream refused: 23", setup: func(t *testing.T, r *edeRig) {
			f := forwarderTo(t, closedPort(t))
			r.up.set("refused.example.test.", func(q *dns.Msg) (*dns.Msg, error) { return f.Exchange(context.Background(), stage.Origin{}, q) })
		}, query: q("refused.example.test.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{23}},
		{name: "no upstream for the name: 22", setup: func(t *testing.T, r *edeRig) {
			r.up.set("nowhere.example.test.", fails(upstream.ErrNoUpstream))
		}, query: q("nowhere.example.test.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{22}},
		{name: "every upstream down (failfast): 22", setup: func(t *testing.T, r *edeRig) {
			r.up.set("down.example.test.", fails(upstream.ErrAllDown))
		}, query: q("down.example.test.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{22}},
		{name: "upstream in-flight bound: 0", setup: func(t *testing.T, r *edeRig) {
			r.up.set("busy.example.test.", fails(upstream.ErrOverloaded))
		}, query: q("busy.example.test.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{0}},
		{name: "in-flight bound: 0", query: q("any.example.test.", dns.TypeA), refuse: true,
			rcode: dns.RcodeServerFailure, codes: []uint16{0}, noEDNS: true},
		{name: "cluster name before the sync: 14", setup: func(t *testing.T, r *edeRig) { r.cl.notSynced = true },
			query: q("web.team-a.svc.cluster.local.", dns.TypeA), rcode: dns.RcodeServerFailure, codes: []uint16{14}, noEDNS: true},
		{name: "zone transfer refused by policy: 18", query: q("cluster.local.", dns.TypeAXFR), rcode: dns.RcodeRefused, codes: []uint16{18}, noEDNS: true},
		{name: "class other than IN: 21", query: func() *dns.Msg { m := q("version.bind.", dns.TypeTXT); m.Question[0].Qclass = dns.ClassCHAOS; return m }(),
			rcode: dns.RcodeRefused, codes: []uint16{21}},
		{name: "search-path CNAME: 29", setup: func(t *testing.T, r *edeRig) { r.up.set("api.example.test.", answerA(60)) },
			query: q("api.example.test.team-a.svc.cluster.local.", dns.TypeA), rcode: dns.RcodeSuccess, codes: []uint16{29}, noEDNS: true},
		{name: "search-path shortcut, served again from wire form: 29", setup: func(t *testing.T, r *edeRig) {
			r.up.set("api2.example.test.", answerA(60))
			for range 2 {
				r.ask(t, edns(q("api2.example.test.team-a.svc.cluster.local.", dns.TypeA)), false)
			}
		}, query: q("api2.example.test.team-a.svc.cluster.local.", dns.TypeA), rcode: dns.RcodeSuccess, codes: []uint16{29}},
		{name: "search-path walk won by a stale answer: 29, then 3", setup: func(t *testing.T, r *edeRig) {
			r.up.set("old2.example.test.", answerA(1))
			r.ask(t, edns(q("old2.example.test.", dns.TypeA)), false)
			r.advance(5 * time.Second)
			r.up.set("old2.example.test.", fails(context.DeadlineExceeded))
		}, query: q("old2.example.test.team-a.svc.cluster.local.", dns.TypeA), rcode: dns.RcodeSuccess, codes: []uint16{29, 3}},
		{name: "a pod's short name of its own namespace: none", query: q("web.team-a.svc.cluster.local.", dns.TypeA), rcode: dns.RcodeSuccess, codes: nil},
		{name: "RFC 8482 answer to ANY: 29", query: q("example.test.", dns.TypeANY), rcode: dns.RcodeSuccess, codes: []uint16{29}},
		{name: "upstream's EDE passed on, forwarded: 18 from upstream", setup: func(t *testing.T, r *edeRig) {
			r.up.set("blocked.example.test.", rcodeReply(dns.RcodeNameError, &dns.EDNS0_EDE{InfoCode: 15, ExtraText: "blocked by policy"}))
		}, query: q("blocked.example.test.", dns.TypeA), rcode: dns.RcodeNameError, codes: []uint16{15}},
		{name: "upstream's EDE kept with the cached answer: a hit from wire form", setup: func(t *testing.T, r *edeRig) {
			r.up.set("filtered.example.test.", answerA(60, &dns.EDNS0_EDE{InfoCode: 17, ExtraText: "filtered"}, &dns.EDNS0_EDE{InfoCode: 4}))
			r.ask(t, edns(q("filtered.example.test.", dns.TypeA)), false)
		}, query: q("filtered.example.test.", dns.TypeA), rcode: dns.RcodeSuccess, codes: []uint16{17, 4}, noEDNS: true},
		{name: "upstream's EDE on a stale answer: ours, then the upstream's", setup: func(t *testing.T, r *edeRig) {
			r.up.set("old.example.test.", answerA(1, &dns.EDNS0_EDE{InfoCode: 20}))
			r.ask(t, edns(q("old.example.test.", dns.TypeA)), false)
			r.advance(5 * time.Second)
			r.up.set("old.example.test.", fails(context.DeadlineExceeded))
		}, query: q("old.example.test.", dns.TypeA), rcode: dns.RcodeSuccess, codes: []uint16{3, 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newEDERig(t)
			if c.setup != nil {
				c.setup(t, r)
			}
			plain := c.query.Copy()
			got := r.ask(t, edns(c.query.Copy()), c.refuse)
			codes, _, hasOPT := edeOf(got)
			if got.Rcode != c.rcode || !hasOPT || !slices.Equal(codes, c.codes) {
				t.Fatalf("rcode %s, EDE %v (OPT %v); want %s, EDE %v\n%v", dns.RcodeToString[got.Rcode], codes, hasOPT,
					dns.RcodeToString[c.rcode], c.codes, got)
			}
			if c.noEDNS {
				got := r.ask(t, plain, c.refuse)
				if got.IsEdns0() != nil || got.Rcode != c.rcode {
					t.Fatalf("without EDNS: rcode %s, OPT %v; want %s and no OPT", dns.RcodeToString[got.Rcode], got.IsEdns0(), dns.RcodeToString[c.rcode])
				}
			}
		})
	}
}

// The EDE options an upstream sends are bounded in the cache: at most
// maxEDE of them, EXTRA-TEXT cut; and a reply carrying them is still
// served from wire form on the reader with no allocation.
func TestEDEKeptBoundedAndHitAllocs(t *testing.T) {
	r := newEDERig(t)
	text := strings.Repeat("é", 150)
	var opts []*dns.EDNS0_EDE
	for code := uint16(1); code <= 6; code++ {
		opts = append(opts, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
	}
	r.up.set("many.example.test.", answerA(60, opts...))
	r.ask(t, q("many.example.test.", dns.TypeA), false)
	m := q("many.example.test.", dns.TypeA)
	m.SetEdns0(1232, false)
	got := r.ask(t, m, false)
	codes, texts, _ := edeOf(got)
	if !slices.Equal(codes, []uint16{1, 2, 3}) {
		t.Fatalf("EDE kept %v, want the first 3", codes)
	}
	for _, x := range texts {
		if len(x) > 64 || !utf8.ValidString(x) {
			t.Fatalf("EXTRA-TEXT kept at %d bytes (valid UTF-8: %v)", len(x), utf8.ValidString(x))
		}
	}
	pkt, _ := m.Pack()
	out := make([]byte, 0, 4096)
	req := new(server.Request)
	n := testing.AllocsPerRun(200, func() {
		req.Read("udp", 0, netip.MustParseAddr("127.0.0.9"), time.Now(), pkt)
		if _, v := r.p.Answer(out[:0], req); v != server.Reply {
			t.Fatalf("verdict %d", v)
		}
	})
	if n != 0 {
		t.Fatalf("%.1f allocations per hit with stored EDE options, want 0", n)
	}
}
