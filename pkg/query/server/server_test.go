package server

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/cache"
	"github.com/nodedns/nodedns/pkg/query/upstream"
)

// fakeResolver answers every query with an A record, or as fn says.
type fakeResolver struct {
	calls atomic.Int64
	fn    func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
	// swap, when set, replaces fn while the server runs.
	swap atomic.Pointer[func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)]
}

func (f *fakeResolver) Resolve(ctx context.Context, q *dns.Msg) (*dns.Msg, bool, bool, error) {
	f.calls.Add(1)
	fn := f.fn
	if p := f.swap.Load(); p != nil {
		fn = *p
	}
	if fn != nil {
		m, err := fn(ctx, q)
		return m, false, false, err
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Answer = []dns.RR{mustRR("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
	return m, false, false, nil
}

func mustRR(format string, args ...any) dns.RR {
	s := format
	if len(args) > 0 {
		s = sprintf(format, args...)
	}
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(err)
	}
	return rr
}

// start runs a server on 127.0.0.1:0 and stops it at test end.
func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	return startOn(t, "127.0.0.1:0", cfg)
}

// startOn runs a server on listen and stops it at test end (a Shutdown
// the test made itself first is fine).
func startOn(t *testing.T, listen string, cfg Config) (*Server, string) {
	t.Helper()
	cfg.Listen = []string{listen}
	if cfg.SocketsPerAddr == 0 {
		cfg.SocketsPerAddr = 1
	}
	s, err := New(cfg)
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
	return s, s.Addrs()[0].String()
}

func exchange(t *testing.T, addr, proto string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: proto, Timeout: 3 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s exchange %s: %v", proto, m.Question[0].Name, err)
	}
	return r
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
		r := exchange(t, a, proto, m)
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

// raw sends b over UDP and returns the reply, or nil after a short wait.
func raw(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

func pack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
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
	ptrLoop := pack(t, q("a.example.", dns.TypeA))
	ptrLoop = append(ptrLoop[:12], 0xC0, 12, 0, 1, 0, 1) // question name pointing at itself
	longLabel := append(pack(t, q("a.", dns.TypeA))[:12], 64)
	longLabel = append(longLabel, make([]byte, 64)...)
	longLabel = append(longLabel, 0, 0, 1, 0, 1)

	cases := []struct {
		name  string
		pkt   []byte
		rcode int // -1: no reply
	}{
		{"short header", []byte{1, 2, 3}, -1},
		{"response sent as query", pack(t, resp), -1},
		{"qdcount 0", pack(t, zero), dns.RcodeFormatError},
		{"qdcount 2", pack(t, two), dns.RcodeFormatError},
		{"notify", pack(t, notify), dns.RcodeNotImplemented},
		{"axfr", pack(t, axfr), dns.RcodeRefused},
		{"chaos class", pack(t, chaos), dns.RcodeRefused},
		{"edns version 1", pack(t, badvers), dns.RcodeBadVers},
		{"pointer in question", ptrLoop, dns.RcodeFormatError},
		{"label over 63", longLabel, dns.RcodeFormatError},
		{"truncated question", pack(t, q("abc.example.", dns.TypeA))[:16], dns.RcodeFormatError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := raw(t, addr, c.pkt)
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
	r := exchange(t, addr, "udp", q("Example.test.", dns.TypeANY))
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
	if r := exchange(t, addr, "udp", q("boom.example.", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %d, want SERVFAIL", r.Rcode)
	}
	if r := exchange(t, addr, "udp", q("fine.example.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
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
			m.Answer = append(m.Answer, mustRR(`%s 60 IN TXT "%s"`, q.Question[0].Name, strings.Repeat("x", 200)))
		}
		return m, nil
	}}
}

func TestTruncation(t *testing.T) {
	s, addr := start(t, Config{Resolver: bigResolver()})
	// No EDNS: 512 bytes at most.
	r := exchange(t, addr, "udp", q("big.example.", dns.TypeTXT))
	if !r.Truncated || len(r.Answer) != 0 || r.Question[0].Name != "big.example." {
		t.Fatalf("no EDNS: TC %v answers %d", r.Truncated, len(r.Answer))
	}
	// EDNS 4096, but the server caps UDP replies at 1232.
	m := q("big.example.", dns.TypeTXT)
	m.SetEdns0(4096, false)
	r = exchange(t, addr, "udp", m)
	if !r.Truncated || r.IsEdns0() == nil {
		t.Fatalf("EDNS 4096: TC %v OPT %v", r.Truncated, r.IsEdns0())
	}
	// TCP: the whole answer.
	r = exchange(t, s.TCPAddrs()[0].String(), "tcp", q("big.example.", dns.TypeTXT))
	if r.Truncated || len(r.Answer) != 10 {
		t.Fatalf("TCP: TC %v answers %d", r.Truncated, len(r.Answer))
	}
	// Small answers fit and carry our OPT back.
	m = q("small.example.", dns.TypeA)
	m.SetEdns0(1232, true)
	s2, addr2 := start(t, Config{Resolver: &fakeResolver{}})
	_ = s2
	r = exchange(t, addr2, "udp", m)
	if r.Truncated || r.IsEdns0() == nil || !r.IsEdns0().Do() || r.IsEdns0().UDPSize() != ourUDPSize {
		t.Fatalf("EDNS echo: %v", r)
	}
}

func TestTCPPipelined(t *testing.T) {
	s, _ := start(t, Config{Resolver: &fakeResolver{}})
	c, err := net.Dial("tcp", s.TCPAddrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co := &dns.Conn{Conn: c}
	ids := map[uint16]bool{}
	for i := 0; i < 5; i++ {
		m := q(sprintf("n%d.example.", i), dns.TypeA)
		ids[m.Id] = true
		if err := co.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for i := 0; i < 5; i++ {
		r, err := co.ReadMsg()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !ids[r.Id] {
			t.Fatalf("unexpected id %d", r.Id)
		}
		delete(ids, r.Id)
	}
}

func TestTCPIdleTimeoutAndBound(t *testing.T) {
	s, _ := start(t, Config{Resolver: &fakeResolver{}, TCPIdleTimeout: 200 * time.Millisecond, MaxTCPConns: 2})
	addr := s.TCPAddrs()[0].String()
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// Let the acceptor take both before the third arrives.
	waitFor(t, func() bool { return s.Stats().TCPConns == 2 })
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	_ = third.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil {
		t.Fatal("third connection over the bound was not closed")
	}
	// Idle connections are cut after the idle timeout.
	_ = conns[0].SetReadDeadline(time.Now().Add(3 * time.Second))
	startIdle := time.Now()
	if _, err := conns[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("idle connection got data")
	}
	if d := time.Since(startIdle); d > 2*time.Second {
		t.Fatalf("idle connection closed after %s", d)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInflightBound(t *testing.T) {
	release := make(chan struct{})
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		m := new(dns.Msg)
		m.SetReply(q)
		return m, nil
	}}
	s, addr := start(t, Config{Resolver: res, MaxInflight: 1})
	defer close(release)
	go func() {
		c := &dns.Client{Timeout: 3 * time.Second}
		_, _, _ = c.Exchange(q("slow.example.", dns.TypeA), addr)
	}()
	waitFor(t, func() bool { return s.Stats().InFlight == 1 })
	startQ := time.Now()
	r := exchange(t, addr, "udp", q("second.example.", dns.TypeA))
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("over the bound: rcode %d, want SERVFAIL", r.Rcode)
	}
	if time.Since(startQ) > time.Second || s.Stats().Overloaded != 1 {
		t.Fatalf("over the bound not answered at once (%s, overloaded %d)", time.Since(startQ), s.Stats().Overloaded)
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
	s, addr := start(t, Config{Resolver: c, HitCache: c})
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT} {
		for i := 0; i < 3; i++ {
			name := "Www.Example.test."
			r := exchange(t, addr, "udp", q(name, qt))
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || r.Answer[0].Header().Name != name {
				t.Fatalf("type %d try %d: %v", qt, i, r)
			}
		}
		if n := up.CountName("www.example.test.", qt); n != 1 {
			t.Fatalf("type %d: upstream saw %d queries, want 1", qt, n)
		}
	}
	// Over TCP, from the same cache.
	r := exchange(t, s.TCPAddrs()[0].String(), "tcp", q("www.example.test.", dns.TypeA))
	if len(r.Answer) != 1 || up.CountName("www.example.test.", dns.TypeA) != 1 {
		t.Fatalf("TCP hit: %v", r)
	}
	// NXDOMAIN is cached too, with the SOA.
	for i := 0; i < 2; i++ {
		r := exchange(t, addr, "udp", q("nx.example.test.", dns.TypeA))
		if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			t.Fatalf("NXDOMAIN: %v", r)
		}
	}
	if n := up.CountName("nx.example.test.", dns.TypeA); n != 1 {
		t.Fatalf("NXDOMAIN asked upstream %d times", n)
	}
	// A truncated upstream answer is fetched over TCP and then served whole
	// over TCP, truncated over plain UDP.
	r = exchange(t, s.TCPAddrs()[0].String(), "tcp", q("big.example.test.", dns.TypeTXT))
	if len(r.Answer) != 12 || up.TCPCount() == 0 {
		t.Fatalf("big TXT over TCP: %d answers, upstream TCP %d", len(r.Answer), up.TCPCount())
	}
	r = exchange(t, addr, "udp", q("big.example.test.", dns.TypeTXT))
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
	loop := func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) { return fwd.Exchange(ctx, q) }
	res.swap.Store(&loop)
	err = s.CheckLoop(context.Background(), 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "forwarding loop") {
		t.Fatalf("CheckLoop = %v, want a loop error", err)
	}
	// Without a loop the check passes.
	up := dnstest.Start(t, dnstest.Zone(60))
	fwd2, err := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	fine := func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) { return fwd2.Exchange(ctx, q) }
	res.swap.Store(&fine)
	if err := s.CheckLoop(context.Background(), 3*time.Second); err != nil {
		t.Fatalf("CheckLoop without loop: %v", err)
	}
}

func TestConcurrentQueries(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(300))
	fwd, _ := upstream.New(upstream.Config{Servers: []string{up.Addr}})
	c, _ := cache.New(cache.Config{Size: 1000}, fwd)
	defer c.Close()
	_, addr := start(t, Config{Resolver: c, HitCache: c, SocketsPerAddr: 2})
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

var _ = netip.Addr{}
