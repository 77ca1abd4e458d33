package pipeline

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// fakeResolver answers every query with an A record, or as fn says, as
// an upstream would: it has no cache to answer from on the reader.
type fakeResolver struct {
	calls atomic.Int64
	fn    func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
	// swap, when set, replaces fn while the pipeline runs.
	swap atomic.Pointer[func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)]
}

func (f *fakeResolver) Resolve(ctx context.Context, _ stage.Origin, q *dns.Msg) (stage.Result, error) {
	f.calls.Add(1)
	fn := f.fn
	if p := f.swap.Load(); p != nil {
		fn = *p
	}
	up := stage.Result{Source: stage.SourceUpstream}
	if fn != nil {
		m, err := fn(ctx, q)
		up.Msg = m
		return up, err
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Answer = []dns.RR{dnstest.MustRRf("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
	up.Msg = m
	return up, nil
}

func (f *fakeResolver) AppendHit(dst []byte, _ string, _, _ uint16, _, _ bool) ([]byte, int, bool) {
	return dst, 0, false
}

func (f *fakeResolver) AppendHitRef(dst []byte, _ string, _, _ uint16, _, _ bool) ([]byte, int, stage.StoredHit, bool) {
	return dst, 0, nil, false
}

// testAgent is a pipeline behind a real transport, as the agent runs
// them: the pipeline's own state, and the transport's addresses and
// figures.
type testAgent struct {
	*Pipeline
	srv *server.Server
}

func (a *testAgent) TCPAddrs() []netip.AddrPort { return a.srv.TCPAddrs() }
func (a *testAgent) Stats() server.Stats        { return a.srv.Stats() }

// start runs cfg's pipeline behind a transport on 127.0.0.1:0 (set up by
// transport, if given) and stops it at test end.
func start(t *testing.T, cfg Config, transport ...func(*server.Config)) (*testAgent, string) {
	t.Helper()
	return startOn(t, "127.0.0.1:0", cfg, transport...)
}

// startOn runs cfg's pipeline behind a transport on listen and stops it at
// test end (a Shutdown the test made itself first is fine). The two share
// one panic counter, as in the agent.
func startOn(t *testing.T, listen string, cfg Config, transport ...func(*server.Config)) (*testAgent, string) {
	t.Helper()
	if cfg.Panics == nil {
		cfg.Panics = new(recovery.Counter)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := server.Config{Listen: []string{listen}, Handler: p, Panics: cfg.Panics, SocketsPerAddr: 1, Logger: cfg.Logger}
	for _, f := range transport {
		f(&scfg)
	}
	s, err := server.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	s.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	// UDP and TCP share the port only when it was asked for explicitly; with
	// port 0 the TCP listener has its own.
	return &testAgent{Pipeline: p, srv: s}, s.Addrs()[0].String()
}

func q(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

func TestCasePreservedAndID(t *testing.T) {
	s, addr := start(t, Config{Resolver: &fakeResolver{}})
	for _, proto := range []string{"udp", "tcp"} {
		a := addr
		if proto == "tcp" {
			a = s.TCPAddrs()[0].String()
		}
		m := q("WwW.ExAmPle.TEST.", dns.TypeA)
		m.Id = 4242
		r := dnstest.Exchange(t, a, proto, m)
		if r.Id != 4242 || r.Question[0].Name != "WwW.ExAmPle.TEST." {
			t.Fatalf("%s: id %d question %q", proto, r.Id, r.Question[0].Name)
		}
		if len(r.Answer) != 1 || r.Answer[0].Header().Name != "WwW.ExAmPle.TEST." {
			t.Fatalf("%s: answer %v", proto, r.Answer)
		}
		if !r.Response || !r.RecursionAvailable || !r.RecursionDesired {
			t.Fatalf("%s: flags %+v", proto, r.MsgHdr)
		}
	}
}

func TestBadPackets(t *testing.T) {
	_, addr := start(t, Config{Resolver: &fakeResolver{}})
	two := q("a.example.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "b.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	zero := q("a.example.", dns.TypeA)
	zero.Question = nil
	notify := q("a.example.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	resp := q("a.example.", dns.TypeA)
	resp.Response = true
	axfr := q("example.", dns.TypeAXFR)
	chaos := q("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	badvers := q("a.example.", dns.TypeA)
	badvers.SetEdns0(1232, false)
	badvers.IsEdns0().SetVersion(1)
	ptrLoop := dnstest.Pack(q("a.example.", dns.TypeA))
	ptrLoop = append(ptrLoop[:12], 0xC0, 12, 0, 1, 0, 1) // question name pointing at itself
	longLabel := append(dnstest.Pack(q("a.", dns.TypeA))[:12], 64)
	longLabel = append(longLabel, make([]byte, 64)...)
	longLabel = append(longLabel, 0, 0, 1, 0, 1)

	cases := []struct {
		name  string
		pkt   []byte
		rcode int // -1: no reply
	}{
		{"short header", []byte{1, 2, 3}, -1},
		{"response sent as query", dnstest.Pack(resp), -1},
		{"qdcount 0", dnstest.Pack(zero), dns.RcodeFormatError},
		{"qdcount 2", dnstest.Pack(two), dns.RcodeFormatError},
		{"notify", dnstest.Pack(notify), dns.RcodeNotImplemented},
		{"axfr", dnstest.Pack(axfr), dns.RcodeRefused},
		{"chaos class", dnstest.Pack(chaos), dns.RcodeRefused},
		{"edns version 1", dnstest.Pack(badvers), dns.RcodeBadVers},
		{"pointer in question", ptrLoop, dns.RcodeFormatError},
		{"label over 63", longLabel, dns.RcodeFormatError},
		{"truncated question", dnstest.Pack(q("abc.example.", dns.TypeA))[:16], dns.RcodeFormatError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := dnstest.ExchangeRawUDP(t, addr, c.pkt)
			if c.rcode < 0 {
				if b != nil {
					t.Fatalf("got a reply, want silence")
				}
				return
			}
			if b == nil {
				t.Fatalf("no reply, want rcode %d", c.rcode)
			}
			r := new(dns.Msg)
			if err := r.Unpack(b); err != nil {
				t.Fatalf("unpacking reply: %v", err)
			}
			if r.Id != binary.BigEndian.Uint16(c.pkt) || !r.Response {
				t.Fatalf("reply id %d response %v", r.Id, r.Response)
			}
			if r.Rcode != c.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[c.rcode])
			}
		})
	}
}

func TestANYMinimal(t *testing.T) {
	res := &fakeResolver{}
	_, addr := start(t, Config{Resolver: res})
	r := dnstest.Exchange(t, addr, "udp", q("Example.test.", dns.TypeANY))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("ANY: %v", r)
	}
	h, ok := r.Answer[0].(*dns.HINFO)
	if !ok || h.Cpu != "RFC8482" || h.Hdr.Name != "Example.test." {
		t.Fatalf("ANY answer %v", r.Answer[0])
	}
	if res.calls.Load() != 0 {
		t.Fatalf("ANY went upstream")
	}
}

func TestPanicIsServfail(t *testing.T) {
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		if strings.HasPrefix(q.Question[0].Name, "boom") {
			panic("stage exploded")
		}
		m := new(dns.Msg)
		m.SetReply(q)
		return m, nil
	}}
	s, addr := start(t, Config{Resolver: res})
	if r := dnstest.Exchange(t, addr, "udp", q("boom.example.", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %d, want SERVFAIL", r.Rcode)
	}
	if r := dnstest.Exchange(t, addr, "udp", q("fine.example.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after panic: rcode %d", r.Rcode)
	}
	if s.Stats().Panics != 1 {
		t.Fatalf("panics = %d", s.Stats().Panics)
	}
}

func bigResolver() *fakeResolver {
	return &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		for i := 0; i < 10; i++ {
			m.Answer = append(m.Answer, dnstest.MustRRf(`%s 60 IN TXT "%s"`, q.Question[0].Name, strings.Repeat("x", 200)))
		}
		return m, nil
	}}
}

func TestTruncation(t *testing.T) {
	s, addr := start(t, Config{Resolver: bigResolver()})
	// No EDNS: 512 bytes at most.
	r := dnstest.Exchange(t, addr, "udp", q("big.example.", dns.TypeTXT))
	if !r.Truncated || len(r.Answer) != 0 || r.Question[0].Name != "big.example." {
		t.Fatalf("no EDNS: TC %v answers %d", r.Truncated, len(r.Answer))
	}
	// EDNS 4096, but the server caps UDP replies at 1232.
	m := q("big.example.", dns.TypeTXT)
	m.SetEdns0(4096, false)
	r = dnstest.Exchange(t, addr, "udp", m)
	if !r.Truncated || r.IsEdns0() == nil {
		t.Fatalf("EDNS 4096: TC %v OPT %v", r.Truncated, r.IsEdns0())
	}
	// TCP: the whole answer.
	r = dnstest.Exchange(t, s.TCPAddrs()[0].String(), "tcp", q("big.example.", dns.TypeTXT))
	if r.Truncated || len(r.Answer) != 10 {
		t.Fatalf("TCP: TC %v answers %d", r.Truncated, len(r.Answer))
	}
	// Small answers fit and carry our OPT back.
	m = q("small.example.", dns.TypeA)
	m.SetEdns0(1232, true)
	s2, addr2 := start(t, Config{Resolver: &fakeResolver{}})
	_ = s2
	r = dnstest.Exchange(t, addr2, "udp", m)
	if r.Truncated || r.IsEdns0() == nil || !r.IsEdns0().Do() || r.IsEdns0().UDPSize() != ourUDPSize {
		t.Fatalf("EDNS echo: %v", r)
	}
}

// TestWithRealCacheAndUpstream runs the real pipeline: a repeated name is
// served from cache (upstream sees one query), with a counted-down TTL.
func TestWithRealCacheAndUpstream(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(300))
	fwd, err := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Size: 100}, fwd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, addr := start(t, Config{Resolver: c})
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT} {
		for i := 0; i < 3; i++ {
			name := "Www.Example.test."
			r := dnstest.Exchange(t, addr, "udp", q(name, qt))
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || r.Answer[0].Header().Name != name {
				t.Fatalf("type %d try %d: %v", qt, i, r)
			}
		}
		if n := up.CountName("www.example.test.", qt); n != 1 {
			t.Fatalf("type %d: upstream saw %d queries, want 1", qt, n)
		}
	}
	// Over TCP, from the same cache.
	r := dnstest.Exchange(t, s.TCPAddrs()[0].String(), "tcp", q("www.example.test.", dns.TypeA))
	if len(r.Answer) != 1 || up.CountName("www.example.test.", dns.TypeA) != 1 {
		t.Fatalf("TCP hit: %v", r)
	}
	// NXDOMAIN is cached too, with the SOA.
	for i := 0; i < 2; i++ {
		r := dnstest.Exchange(t, addr, "udp", q("nx.example.test.", dns.TypeA))
		if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			t.Fatalf("NXDOMAIN: %v", r)
		}
	}
	if n := up.CountName("nx.example.test.", dns.TypeA); n != 1 {
		t.Fatalf("NXDOMAIN asked upstream %d times", n)
	}
	// A truncated upstream answer is fetched over TCP and then served whole
	// over TCP, truncated over plain UDP.
	r = dnstest.Exchange(t, s.TCPAddrs()[0].String(), "tcp", q("big.example.test.", dns.TypeTXT))
	if len(r.Answer) != 12 || up.TCPCount() == 0 {
		t.Fatalf("big TXT over TCP: %d answers, upstream TCP %d", len(r.Answer), up.TCPCount())
	}
	r = dnstest.Exchange(t, addr, "udp", q("big.example.test.", dns.TypeTXT))
	if !r.Truncated {
		t.Fatalf("big TXT over UDP without EDNS not truncated")
	}
}

func TestLoopDetected(t *testing.T) {
	// The upstream is the agent itself: the probe comes straight back.
	res := &fakeResolver{}
	s, addr := start(t, Config{Resolver: res})
	fwd, err := upstream.New(upstream.Config{Servers: []string{addr}, TryTimeout: 500 * time.Millisecond, Budget: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loop := func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) { return fwd.Exchange(ctx, stage.Origin{}, q) }
	res.swap.Store(&loop)
	err = s.CheckLoop(context.Background(), s.srv.Addrs()[0], 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "forwarding loop") {
		t.Fatalf("CheckLoop = %v, want a loop error", err)
	}
	// Without a loop the check passes.
	up := dnstest.Start(t, dnstest.Zone(60))
	fwd2, err := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	fine := func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) { return fwd2.Exchange(ctx, stage.Origin{}, q) }
	res.swap.Store(&fine)
	if err := s.CheckLoop(context.Background(), s.srv.Addrs()[0], 3*time.Second); err != nil {
		t.Fatalf("CheckLoop without loop: %v", err)
	}
}

func TestConcurrentQueries(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(300))
	fwd, _ := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	c, _ := cache.New(cache.Config{Size: 1000}, fwd)
	defer c.Close()
	_, addr := start(t, Config{Resolver: c}, func(s *server.Config) { s.SocketsPerAddr = 2 })
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			cl := &dns.Client{Timeout: 3 * time.Second}
			for i := 0; i < 50; i++ {
				name := sprintf("h%d.example.test.", i%10)
				r, _, err := cl.Exchange(q(name, dns.TypeA), addr)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
					bad.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d bad answers", bad.Load())
	}
}
