package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newForwarder(t testing.TB, cfg upstream.Config) *upstream.Forwarder {
	t.Helper()
	cfg.Logger = quiet
	if cfg.Policy == "" {
		cfg.Policy = upstream.Sequential
	}
	f, err := upstream.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 4242
	m.SetEdns0(1232, false)
	return m
}

// forward sends the query of name and qtype through f and fails the test
// unless a reply with the query's ID comes back (the forwarder's own
// exchange, not dnstest.Exchange to an address).
func forward(t testing.TB, f *upstream.Forwarder, name string, qtype uint16) *dns.Msg {
	t.Helper()
	r, err := f.Exchange(context.Background(), stage.Origin{}, query(name, qtype))
	if err != nil {
		t.Fatalf("Exchange %s: %v", name, err)
	}
	if r.Id != 4242 {
		t.Fatalf("Exchange %s: reply ID %d, want the query's 4242", name, r.Id)
	}
	return r
}

func server(t testing.TB, f *upstream.Forwarder, addr string) *upstream.Server {
	t.Helper()
	for _, s := range f.Servers() {
		if s.Addr == addr {
			return s
		}
	}
	t.Fatalf("no server %s", addr)
	return nil
}

// running runs f until the test ends: the health probes need it.
func running(t testing.TB, f *upstream.Forwarder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	dnstest.WaitFor(t, 10*time.Second, "the forwarder to run", f.Running)
}

func answerA(r *dns.Msg) string {
	if len(r.Answer) == 0 {
		return ""
	}
	if a, ok := r.Answer[0].(*dns.A); ok {
		return a.A.String()
	}
	return r.Answer[0].String()
}

func TestPolicies(t *testing.T) {
	start := func(t *testing.T) ([]*dnstest.Server, []string) {
		var ups []*dnstest.Server
		var addrs []string
		for i := 0; i < 3; i++ {
			s := dnstest.Start(t, dnstest.Zone(60))
			ups = append(ups, s)
			addrs = append(addrs, s.Addr)
		}
		return ups, addrs
	}
	counts := func(ups []*dnstest.Server) []int {
		var out []int
		for _, s := range ups {
			out = append(out, s.Count())
		}
		return out
	}
	t.Run("sequential", func(t *testing.T) {
		ups, addrs := start(t)
		f := newForwarder(t, upstream.Config{Servers: addrs, Policy: upstream.Sequential})
		for i := 0; i < 6; i++ {
			forward(t, f, fmt.Sprintf("s%d.example.test.", i), dns.TypeA)
		}
		if got := counts(ups); fmt.Sprint(got) != "[6 0 0]" {
			t.Fatalf("queries per server %v, want all on the first", got)
		}
	})
	t.Run("round_robin", func(t *testing.T) {
		ups, addrs := start(t)
		f := newForwarder(t, upstream.Config{Servers: addrs, Policy: upstream.RoundRobin})
		for i := 0; i < 9; i++ {
			forward(t, f, fmt.Sprintf("r%d.example.test.", i), dns.TypeA)
		}
		if got := counts(ups); fmt.Sprint(got) != "[3 3 3]" {
			t.Fatalf("queries per server %v, want 3 each", got)
		}
	})
	t.Run("random", func(t *testing.T) {
		ups, addrs := start(t)
		f := newForwarder(t, upstream.Config{Servers: addrs, Policy: upstream.Random})
		for i := 0; i < 90; i++ {
			forward(t, f, fmt.Sprintf("x%d.example.test.", i), dns.TypeA)
		}
		// Each server is first with probability 1/3: never asked in 90
		// queries has odds (2/3)^90, about 1e-16.
		for i, n := range counts(ups) {
			if n == 0 || n == 90 {
				t.Fatalf("server %d got %d of 90 queries: %v", i, n, counts(ups))
			}
		}
	})
	t.Run("default is random", func(t *testing.T) {
		f, err := upstream.New(upstream.Config{Servers: []string{"127.0.0.1"}, Logger: quiet})
		if err != nil || f == nil {
			t.Fatal(err)
		}
		if _, err := upstream.New(upstream.Config{Servers: []string{"127.0.0.1"}, Policy: "fastest"}); err == nil {
			t.Fatal("unknown policy accepted")
		}
	})
}

func TestFreshIDPerExchange(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}})
	const n = 20
	for i := 0; i < n; i++ {
		forward(t, f, fmt.Sprintf("id%d.example.test.", i), dns.TypeA) // checks ID 4242 comes back
	}
	ids := up.IDs()
	distinct := map[uint16]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	// 20 random 16-bit IDs: two or more collisions have odds around 1e-5.
	if len(ids) != n || len(distinct) < n-1 || (len(distinct) == 1 && ids[0] == 4242) {
		t.Fatalf("upstream saw IDs %v: want a fresh random ID per exchange", ids)
	}
}

// rawReply answers q with rcode and one A record.
func rawReply(q *dns.Msg, ip string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)}}
	return m
}

func TestMismatchedRepliesDiscarded(t *testing.T) {
	// Before the real reply, the upstream's address sends everything a
	// spoofer or a confused server might: garbage, a wrong ID, a wrong
	// question, a query instead of a reply.
	script := func(real bool) func(pkt []byte, send func([]byte)) {
		return func(pkt []byte, send func([]byte)) {
			q := new(dns.Msg)
			if err := q.Unpack(pkt); err != nil {
				return
			}
			send([]byte{1, 2, 3})
			send(append([]byte{byte(q.Id >> 8), byte(q.Id), 0x81, 0x80}, make([]byte, 30)...)) // right ID, then junk
			wrongID := rawReply(q, "192.0.2.66")
			wrongID.Id = q.Id + 1
			send(dnstest.Pack(wrongID))
			wrongName := rawReply(q, "192.0.2.67")
			wrongName.Question[0].Name = "evil.example.test."
			send(dnstest.Pack(wrongName))
			wrongType := rawReply(q, "192.0.2.68")
			wrongType.Question[0].Qtype = dns.TypeAAAA
			send(dnstest.Pack(wrongType))
			notReply := rawReply(q, "192.0.2.69")
			notReply.Response = false
			send(dnstest.Pack(notReply))
			noQuestion := rawReply(q, "192.0.2.70")
			noQuestion.Question = nil
			send(dnstest.Pack(noQuestion))
			if real {
				// The real answer, with the question in another case.
				r := rawReply(q, "192.0.2.1")
				r.Question[0].Name = strings.ToUpper(q.Question[0].Name)
				send(dnstest.Pack(r))
			}
		}
	}
	t.Run("real reply last", func(t *testing.T) {
		raw := dnstest.StartRaw(t, script(true), nil)
		f := newForwarder(t, upstream.Config{Servers: []string{raw.Addr}})
		r := forward(t, f, "victim.example.test.", dns.TypeA)
		if answerA(r) != "192.0.2.1" {
			t.Fatalf("accepted %v", r)
		}
		if st := server(t, f, raw.Addr).Stats(); st.Failures != 0 || raw.UDPCount() != 1 {
			t.Fatalf("stats %+v, %d datagrams: want one query and no failure", st, raw.UDPCount())
		}
	})
	t.Run("no real reply", func(t *testing.T) {
		raw := dnstest.StartRaw(t, script(false), nil)
		f := newForwarder(t, upstream.Config{Servers: []string{raw.Addr}, TryTimeout: 150 * time.Millisecond, Budget: 400 * time.Millisecond})
		r, err := f.Exchange(context.Background(), stage.Origin{}, query("victim.example.test.", dns.TypeA))
		if err == nil || !errors.Is(err, upstream.ErrAllFailed) {
			t.Fatalf("only bad replies: got %v, %v; want ErrAllFailed", r, err)
		}
	})
}

func TestTCPRetryOnTruncation(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}})
	r := forward(t, f, "big.example.test.", dns.TypeTXT)
	if r.Truncated || len(r.Answer) != 12 {
		t.Fatalf("truncated %v, %d answers; want the full answer over TCP", r.Truncated, len(r.Answer))
	}
	if up.Count() != 2 || up.TCPCount() != 1 {
		t.Fatalf("upstream saw %d queries, %d over TCP; want UDP then TCP", up.Count(), up.TCPCount())
	}
	// Small answers stay on UDP.
	forward(t, f, "small.example.test.", dns.TypeTXT)
	if up.TCPCount() != 1 {
		t.Fatal("small answer went over TCP")
	}
}

// TestForceTCP: every exchange goes over TCP, on one pooled connection
// (how the agent talks to the central cluster DNS in forward mode).
func TestForceTCP(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}, ForceTCP: true})
	for i := 0; i < 3; i++ {
		if r := forward(t, f, fmt.Sprintf("small%d.example.test.", i), dns.TypeTXT); r.Rcode != dns.RcodeSuccess || r.Id != 4242 {
			t.Fatalf("query %d: %v", i, r)
		}
	}
	if up.Count() != 3 || up.TCPCount() != 3 || up.TCPConns() != 1 {
		t.Fatalf("%d queries, %d over TCP on %d connections; want 3, 3, 1", up.Count(), up.TCPCount(), up.TCPConns())
	}
}

func TestTCPConnectionReuse(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}})
	for i := 0; i < 5; i++ {
		r := forward(t, f, fmt.Sprintf("big%d.example.test.", i), dns.TypeTXT)
		if len(r.Answer) != 12 {
			t.Fatalf("query %d: %d answers", i, len(r.Answer))
		}
	}
	if up.TCPCount() != 5 || up.TCPConns() != 1 {
		t.Fatalf("%d TCP queries on %d connections; want 5 on 1", up.TCPCount(), up.TCPConns())
	}
}

// tcAndTCP is a raw upstream that answers UDP with TC set and hands TCP
// connections to tcp.
func tcAndTCP(t testing.TB, tcp func(net.Conn)) *dnstest.Raw {
	return dnstest.StartRaw(t, func(pkt []byte, send func([]byte)) {
		q := new(dns.Msg)
		if q.Unpack(pkt) != nil {
			return
		}
		m := new(dns.Msg)
		m.SetReply(q)
		m.Truncated = true
		send(dnstest.Pack(m))
	}, tcp)
}

func TestTCPPooledConnectionClosedByServer(t *testing.T) {
	// The server answers one query per connection and closes it, as a
	// server whose idle timeout has passed would: the pooled connection is
	// dead by the next query, which must still succeed without a failure.
	raw := tcAndTCP(t, func(c net.Conn) {
		q, err := dnstest.ReadTCP(c)
		if err != nil {
			return
		}
		_ = dnstest.WriteTCP(c, rawReply(q, "192.0.2.1"))
	})
	f := newForwarder(t, upstream.Config{Servers: []string{raw.Addr}, MaxFails: 1})
	for i := 0; i < 4; i++ {
		r := forward(t, f, fmt.Sprintf("p%d.example.test.", i), dns.TypeA)
		if answerA(r) != "192.0.2.1" {
			t.Fatalf("query %d: %v", i, r)
		}
		// Let the server's close reach us before the next query.
		dnstest.WaitFor(t, 10*time.Second, "the connection to close", func() bool { return raw.TCPConns() == i+1 })
	}
	s := server(t, f, raw.Addr)
	if st := s.Stats(); st.Failures != 0 || s.Down() {
		t.Fatalf("stats %+v: a connection closed by the server counted as a failure", st)
	}
}

func TestTCPNeverAnswers(t *testing.T) {
	raw := tcAndTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	f := newForwarder(t, upstream.Config{Servers: []string{raw.Addr}, TryTimeout: 200 * time.Millisecond, Budget: 500 * time.Millisecond})
	start := time.Now()
	_, err := f.Exchange(context.Background(), stage.Origin{}, query("hang.example.test.", dns.TypeA))
	if !errors.Is(err, upstream.ErrAllFailed) {
		t.Fatalf("err %v, want ErrAllFailed", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("gave up after %s, budget 500ms", d)
	}
	if raw.TCPConns() == 0 {
		t.Fatal("TCP never tried")
	}
}

func TestTimeoutsAndBudget(t *testing.T) {
	t.Run("try timeout moves on", func(t *testing.T) {
		dead := dnstest.Start(t, dnstest.Drop)
		good := dnstest.Start(t, dnstest.Zone(60))
		f := newForwarder(t, upstream.Config{Servers: []string{dead.Addr, good.Addr}, TryTimeout: 100 * time.Millisecond, Budget: 20 * time.Second})
		start := time.Now()
		forward(t, f, "a.example.test.", dns.TypeA)
		if d := time.Since(start); d > 10*time.Second || dead.Count() != 1 || good.Count() != 1 {
			t.Fatalf("after %s: dead %d, good %d queries", d, dead.Count(), good.Count())
		}
	})
	t.Run("budget", func(t *testing.T) {
		a := dnstest.Start(t, dnstest.Drop)
		b := dnstest.Start(t, dnstest.Drop)
		f := newForwarder(t, upstream.Config{Servers: []string{a.Addr, b.Addr}, TryTimeout: 150 * time.Millisecond, Budget: 400 * time.Millisecond})
		start := time.Now()
		_, err := f.Exchange(context.Background(), stage.Origin{}, query("a.example.test.", dns.TypeA))
		if !errors.Is(err, upstream.ErrAllFailed) {
			t.Fatalf("err %v, want ErrAllFailed", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("gave up after %s, budget 400ms", d)
		}
		if a.Count() == 0 || b.Count() == 0 {
			t.Fatalf("servers asked %d and %d times: want both tried", a.Count(), b.Count())
		}
	})
	t.Run("caller's context", func(t *testing.T) {
		dead := dnstest.Start(t, dnstest.Drop)
		f := newForwarder(t, upstream.Config{Servers: []string{dead.Addr}, TryTimeout: 5 * time.Second, Budget: 10 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := f.Exchange(ctx, stage.Origin{}, query("a.example.test.", dns.TypeA))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
			t.Fatalf("after %s: err %v; want the caller's deadline to end its wait", time.Since(start), err)
		}
	})
}

// TestHealth: a failed exchange starts the server's probes; it is down
// once more than MaxFails probes failed, skipped while down, and back up
// with the first probe answered; a reply to a query does not bring it
// back by itself.
func TestHealth(t *testing.T) {
	bad := dnstest.Start(t, dnstest.Drop)
	good := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{bad.Addr, good.Addr}, MaxFails: 2,
		TryTimeout: 100 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, ProbeTimeout: 30 * time.Millisecond})
	running(t, f)
	sb := server(t, f, bad.Addr)
	forward(t, f, "h1.example.test.", dns.TypeA)
	dnstest.WaitFor(t, 10*time.Second, "the server to be marked down", sb.Down)
	if st := sb.Stats(); st.ProbeFailures != 3 || st.ProbeLoops != 1 || st.Failures != 1 || st.Requests != 1 || st.LastError == "" {
		t.Fatalf("down after %+v; want 3 failed probes (MaxFails 2) in one loop after 1 failed exchange", st)
	}
	if n := bad.CountName(".", dns.TypeNS); n != 3 {
		t.Fatalf("%d '. NS' probes seen, want 3", n)
	}
	// Skipped while down: the good server answers at once.
	for i := 0; i < 5; i++ {
		forward(t, f, fmt.Sprintf("h%d.skip.example.test.", i), dns.TypeA)
	}
	if bad.CountName("h0.skip.example.test.", dns.TypeA) != 0 || good.Count() != 6 {
		t.Fatalf("while down: bad asked %d, good %d (want 6)", bad.Count(), good.Count())
	}
	// The probe brings it back once it answers.
	bad.SetHandler(dnstest.Zone(60))
	dnstest.WaitFor(t, 10*time.Second, "the probe to mark the server up", func() bool { return !sb.Down() })
	forward(t, f, "h3.example.test.", dns.TypeA)
	if bad.CountName("h3.example.test.", dns.TypeA) != 1 {
		t.Fatal("server back up but not asked first")
	}
	if st := server(t, f, good.Addr).Stats(); st.P50ms <= 0 || st.P99ms < st.P50ms || !st.Up {
		t.Errorf("latency figures of the good server: %+v", st)
	}
}

// TestHealthMaxFailsZero: MaxFails 0 never marks a server down and sends
// no probe, as CoreDNS's max_fails 0.
func TestHealthMaxFailsZero(t *testing.T) {
	bad := dnstest.Start(t, dnstest.Drop)
	zero := &upstream.Health{MaxFails: 0}
	f := newForwarder(t, upstream.Config{Servers: []string{bad.Addr}, Options: upstream.GroupOptions{Health: zero},
		TryTimeout: 50 * time.Millisecond, Budget: 300 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, ProbeTimeout: 20 * time.Millisecond})
	running(t, f)
	for range 3 {
		if _, err := f.Exchange(context.Background(), stage.Origin{}, query("z.example.test.", dns.TypeA)); err == nil {
			t.Fatal("no error from a dead server")
		}
	}
	// Every failed exchange has been weighed by the time it returns: a
	// probe loop it started would be counted already.
	s := server(t, f, bad.Addr)
	if st := s.Stats(); st.Failures != 6 || st.ProbeLoops != 0 || st.ProbeFailures != 0 || s.Down() || bad.CountName(".", dns.TypeNS) != 0 {
		t.Fatalf("max fails 0: %+v, down %v, %d probes; want 6 failures and no probe loop", st, s.Down(), bad.CountName(".", dns.TypeNS))
	}
	// Two attempts per query (the only server, twice).
	if n := bad.Count(); n != 6 {
		t.Fatalf("3 queries: %d exchanges, want 6 (2 attempts each)", n)
	}
}

// TestHealthProbeOptions: the probe asks the group's domain, without RD
// with no-rec, over the server's transport, without EDNS.
func TestHealthProbeOptions(t *testing.T) {
	var mu sync.Mutex
	var probes []string
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		if r.Question[0].Qtype == dns.TypeNS {
			mu.Lock()
			probes = append(probes, fmt.Sprintf("%s rd=%v edns=%v", r.Question[0].Name, r.RecursionDesired, r.IsEdns0() != nil))
			mu.Unlock()
			dnstest.Rcode(dns.RcodeRefused)(w, r)
			return
		}
		dnstest.Drop(w, r)
	})
	h := &upstream.Health{MaxFails: 3, Interval: 10 * time.Millisecond, Domain: "Health.Example.org", NoRec: true}
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}, Options: upstream.GroupOptions{Health: h},
		TryTimeout: 50 * time.Millisecond, Budget: 200 * time.Millisecond})
	running(t, f)
	_, _ = f.Exchange(context.Background(), stage.Origin{}, query("p.example.test.", dns.TypeA))
	dnstest.WaitFor(t, 10*time.Second, "a probe", func() bool { mu.Lock(); defer mu.Unlock(); return len(probes) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if probes[0] != "health.example.org. rd=false edns=false" {
		t.Fatalf("probe %q", probes[0])
	}
}

// TestAllDownStillTries: with every server down, one is asked anyway, at
// random, once; the probes bring them back.
func TestAllDownStillTries(t *testing.T) {
	a := dnstest.Start(t, dnstest.Drop)
	b := dnstest.Start(t, dnstest.Drop)
	f := newForwarder(t, upstream.Config{Servers: []string{a.Addr, b.Addr}, MaxFails: 1, ProbeInterval: 10 * time.Millisecond,
		ProbeTimeout: 20 * time.Millisecond, TryTimeout: 100 * time.Millisecond, Budget: 450 * time.Millisecond})
	running(t, f)
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("d.example.test.", dns.TypeA)); err == nil {
		t.Fatal("no error from dead servers")
	}
	dnstest.WaitFor(t, 10*time.Second, "the servers to be marked down", func() bool { return server(t, f, a.Addr).Down() && server(t, f, b.Addr).Down() })
	start, broken := time.Now(), f.AllDown()
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("d1.example.test.", dns.TypeA)); err == nil {
		t.Fatal("no error from dead servers")
	}
	if n := a.CountName("d1.example.test.", dns.TypeA) + b.CountName("d1.example.test.", dns.TypeA); n != 1 || time.Since(start) > time.Second {
		t.Fatalf("all down: %d queries sent in %s, want one attempt on one server", n, time.Since(start))
	}
	if n := f.AllDown() - broken; n != 1 {
		t.Fatalf("AllDown counted %d, want 1", n)
	}
	a.SetHandler(dnstest.Zone(60))
	b.SetHandler(dnstest.Zone(60))
	if r := forward(t, f, "d2.example.test.", dns.TypeA); answerA(r) != "192.0.2.1" && r.Rcode != dns.RcodeSuccess {
		t.Fatalf("all down: %v", r)
	}
	dnstest.WaitFor(t, 10*time.Second, "the probes to bring them back", func() bool { return !server(t, f, a.Addr).Down() && !server(t, f, b.Addr).Down() })
}

// TestFailfast: with every server down and Failfast, ErrAllDown at once,
// nothing sent.
func TestFailfast(t *testing.T) {
	a := dnstest.Start(t, dnstest.Drop)
	b := dnstest.Start(t, dnstest.Drop)
	f := newForwarder(t, upstream.Config{Servers: []string{a.Addr, b.Addr}, MaxFails: 1, ProbeInterval: 10 * time.Millisecond,
		ProbeTimeout: 20 * time.Millisecond, TryTimeout: 50 * time.Millisecond, Budget: 450 * time.Millisecond,
		Options: upstream.GroupOptions{Failfast: true}})
	running(t, f)
	_, _ = f.Exchange(context.Background(), stage.Origin{}, query("d.example.test.", dns.TypeA))
	dnstest.WaitFor(t, 10*time.Second, "the servers to be marked down", func() bool { return server(t, f, a.Addr).Down() && server(t, f, b.Addr).Down() })
	before := a.Count() + b.Count() - a.CountName(".", dns.TypeNS) - b.CountName(".", dns.TypeNS)
	start := time.Now()
	_, err := f.Exchange(context.Background(), stage.Origin{}, query("d1.example.test.", dns.TypeA))
	took := time.Since(start)
	if !errors.Is(err, upstream.ErrAllDown) {
		t.Fatalf("err %v, want ErrAllDown", err)
	}
	if n := a.Count() + b.Count() - a.CountName(".", dns.TypeNS) - b.CountName(".", dns.TypeNS) - before; n != 0 || took > 50*time.Millisecond {
		t.Fatalf("failfast: %d queries sent, %s", n, took)
	}
}

func TestCoalescing(t *testing.T) {
	gate := dnstest.NewGate(t)
	up := dnstest.Start(t, gate.Wrap(dnstest.Zone(60)))
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(id uint16) {
			defer wg.Done()
			q := query("same.example.test.", dns.TypeA)
			q.Id = id
			r, err := f.Exchange(context.Background(), stage.Origin{}, q)
			switch {
			case err != nil:
				errs <- err
			case r.Id != id || answerA(r) != "192.0.2.1":
				errs <- fmt.Errorf("caller %d got ID %d, %v", id, r.Id, r.Answer)
			}
		}(uint16(1000 + i))
	}
	dnstest.WaitFor(t, 10*time.Second, "every caller to join", func() bool { return f.Coalesced() == n-1 && gate.Waiting() == 1 })
	gate.Open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if up.Count() != 1 {
		t.Fatalf("%d concurrent identical queries: %d upstream exchanges, want 1", n, up.Count())
	}
	// Once done, the next query is a new exchange.
	forward(t, f, "same.example.test.", dns.TypeA)
	if up.Count() != 2 {
		t.Fatalf("after the flight: %d exchanges", up.Count())
	}
}

func TestInflightBound(t *testing.T) {
	gate := dnstest.NewGate(t)
	up := dnstest.Start(t, gate.Wrap(dnstest.Zone(60)))
	const bound = 4
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}, MaxInflight: bound})
	var wg sync.WaitGroup
	for i := 0; i < bound; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Exchange(context.Background(), stage.Origin{}, query(fmt.Sprintf("b%d.example.test.", i), dns.TypeA)); err != nil {
				t.Error(err)
			}
		}()
	}
	dnstest.WaitFor(t, 10*time.Second, "the bound to fill", func() bool { return gate.Waiting() == bound })
	before := runtime.NumGoroutine()
	for i := 0; i < 100; i++ {
		_, err := f.Exchange(context.Background(), stage.Origin{}, query(fmt.Sprintf("over%d.example.test.", i), dns.TypeA))
		if !errors.Is(err, upstream.ErrOverloaded) {
			t.Fatalf("query %d past the bound: %v, want ErrOverloaded", i, err)
		}
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Fatalf("goroutines %d -> %d while refusing", before, after)
	}
	if f.Overloaded() != 100 || up.Count() != bound {
		t.Fatalf("overloaded %d, upstream %d; want 100 and %d", f.Overloaded(), up.Count(), bound)
	}
	// An identical query joins the flight instead of being refused.
	joined := make(chan error, 1)
	go func() {
		_, err := f.Exchange(context.Background(), stage.Origin{}, query("b0.example.test.", dns.TypeA))
		joined <- err
	}()
	dnstest.WaitFor(t, 10*time.Second, "the identical query to join", func() bool { return f.Coalesced() == 1 })
	gate.Open()
	wg.Wait()
	if err := <-joined; err != nil {
		t.Fatalf("coalesced query: %v", err)
	}
	// The bound is free again.
	forward(t, f, "after.example.test.", dns.TypeA)
}

func TestStubDomains(t *testing.T) {
	def := dnstest.Start(t, dnstest.Zone(60))
	corp := dnstest.Start(t, dnstest.Zone(60))
	sub := dnstest.Start(t, dnstest.Zone(60))
	other := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{def.Addr}, Stubs: map[string][]string{
		"corp.example":     {corp.Addr},
		"A.Corp.Example.":  {sub.Addr},
		"other.example.":   {other.Addr},
		"unused.example.":  {def.Addr}, // a server shared with the default group
		"unused2.example.": {"127.0.0.1:1"},
	}})
	for _, tc := range []struct {
		name string
		want *dnstest.Server
	}{
		{"x.a.corp.example.", sub},
		{"a.corp.example.", sub},
		{"X.A.CORP.EXAMPLE.", sub},
		{"y.corp.example.", corp},
		{"corp.example.", corp},
		{"Y.Corp.Example.", corp},
		{"xcorp.example.", def},
		{"corp.example.com.", def},
		{"b.corp.example.com.", def},
		{"q.other.example.", other},
		{"example.", def},
		{".", def},
	} {
		before := tc.want.Count()
		forward(t, f, tc.name, dns.TypeNS)
		if tc.want.Count() != before+1 {
			t.Errorf("%s: not sent to the expected group", tc.name)
		}
	}
	if n := len(f.Servers()); n != 5 {
		t.Errorf("%d distinct servers, want 5", n)
	}
	for _, stubs := range []map[string][]string{
		{"corp.example.": nil},
		{"corp.example.": {"ns.corp.example"}},
		{".": {"127.0.0.1"}},
		{"bad..name": {"127.0.0.1"}},
		{"corp.example": {"127.0.0.1"}, "CORP.example.": {"127.0.0.2"}},
	} {
		if _, err := upstream.New(upstream.Config{Servers: []string{"127.0.0.1"}, Stubs: stubs}); err == nil {
			t.Errorf("stubs %v accepted", stubs)
		}
	}
	// No default servers: names outside every stub zone have nowhere to go.
	f = newForwarder(t, upstream.Config{Stubs: map[string][]string{"corp.example.": {corp.Addr}}})
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("www.example.test.", dns.TypeA)); !errors.Is(err, upstream.ErrNoUpstream) {
		t.Fatalf("err %v, want ErrNoUpstream", err)
	}
	forward(t, f, "www.corp.example.", dns.TypeA)
}

// TestServfailIsAnAnswer: a SERVFAIL (what every validating resolver
// answers for a DNSSEC-broken name) is an answer from a live server: it is
// tried once more on another server and then returned; it never counts as
// a failure of the server nor marks it down, however often it comes.
func TestServfailIsAnAnswer(t *testing.T) {
	broken := func(w dns.ResponseWriter, r *dns.Msg) {
		if strings.HasPrefix(r.Question[0].Name, "broken.") {
			dnstest.Rcode(dns.RcodeServerFailure)(w, r)
			return
		}
		dnstest.Zone(60)(w, r)
	}
	a := dnstest.Start(t, broken)
	b := dnstest.Start(t, broken)
	f := newForwarder(t, upstream.Config{Servers: []string{a.Addr, b.Addr}, MaxFails: 2})
	for i := 0; i < 4; i++ {
		if r := forward(t, f, "broken.example.test.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("query %d for the broken name: rcode %d, want SERVFAIL", i, r.Rcode)
		}
	}
	if a.Count() != 4 || b.Count() != 4 {
		t.Fatalf("4 queries for the broken name: servers asked %d and %d times, want 4 each (one retry per query)", a.Count(), b.Count())
	}
	for _, s := range f.Servers() {
		if st := s.Stats(); !st.Up || st.Failures != 0 {
			t.Fatalf("server %s after SERVFAILs: %+v, want up without failures", s.Addr, st)
		}
	}
	if r := forward(t, f, "fine.example.test.", dns.TypeA); answerA(r) != "192.0.2.1" || a.CountName("fine.example.test.", dns.TypeA) != 1 {
		t.Fatalf("other names after the SERVFAILs: %v (first server asked %d times)", r, a.CountName("fine.example.test.", dns.TypeA))
	}

	// Only one server: returned at once, no second try.
	one := dnstest.Start(t, broken)
	f1 := newForwarder(t, upstream.Config{Servers: []string{one.Addr}, MaxFails: 1})
	for i := 0; i < 3; i++ {
		if r := forward(t, f1, "broken.example.test.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("rcode %d, want SERVFAIL", r.Rcode)
		}
	}
	if one.Count() != 3 || server(t, f1, one.Addr).Down() {
		t.Fatalf("single server: asked %d times (want 3), down %v", one.Count(), server(t, f1, one.Addr).Down())
	}

	// The second server may know better.
	sf := dnstest.Start(t, dnstest.Rcode(dns.RcodeServerFailure))
	good := dnstest.Start(t, dnstest.Zone(60))
	f2 := newForwarder(t, upstream.Config{Servers: []string{sf.Addr, good.Addr}})
	if r := forward(t, f2, "a.example.test.", dns.TypeA); answerA(r) != "192.0.2.1" || sf.Count() != 1 || good.Count() != 1 {
		t.Fatalf("SERVFAIL then an answer: %v; asked %d and %d", r, sf.Count(), good.Count())
	}

	// A down server that answers the probe, even with SERVFAIL, is alive.
	dead := dnstest.Start(t, dnstest.Drop)
	f3 := newForwarder(t, upstream.Config{Servers: []string{dead.Addr, good.Addr}, MaxFails: 1,
		TryTimeout: 100 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, ProbeTimeout: 20 * time.Millisecond})
	running(t, f3)
	forward(t, f3, "d.example.test.", dns.TypeA)
	dnstest.WaitFor(t, 10*time.Second, "a server that times out to be marked down", server(t, f3, dead.Addr).Down)
	dead.SetHandler(dnstest.Rcode(dns.RcodeServerFailure))
	dnstest.WaitFor(t, 10*time.Second, "the probe answered SERVFAIL to bring the server back", func() bool { return !server(t, f3, dead.Addr).Down() })
}

func TestRefusedTriesNextNotDown(t *testing.T) {
	ref := dnstest.Start(t, dnstest.Rcode(dns.RcodeRefused))
	good := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{ref.Addr, good.Addr}, MaxFails: 1})
	for i := 0; i < 3; i++ {
		r := forward(t, f, fmt.Sprintf("r%d.example.test.", i), dns.TypeA)
		if answerA(r) != "192.0.2.1" {
			t.Fatalf("query %d: %v", i, r)
		}
	}
	s := server(t, f, ref.Addr)
	if s.Down() || s.Stats().Failures != 0 || ref.Count() != 3 || good.Count() != 3 {
		t.Fatalf("REFUSED server: down %v, %+v; asked %d, good %d", s.Down(), s.Stats(), ref.Count(), good.Count())
	}
	good.SetHandler(dnstest.Rcode(dns.RcodeRefused))
	if r := forward(t, f, "x.example.test.", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Fatalf("everyone refusing: rcode %d, want REFUSED", r.Rcode)
	}
}

func TestExchangeErrors(t *testing.T) {
	f := newForwarder(t, upstream.Config{Servers: []string{"127.0.0.1:1"}})
	q := query("a.example.test.", dns.TypeA)
	q.Question = nil
	if _, err := f.Exchange(context.Background(), stage.Origin{}, q); err == nil {
		t.Error("no question accepted")
	}
	q = query("a.example.test.", dns.TypeA)
	q.Question = append(q.Question, q.Question[0])
	if _, err := f.Exchange(context.Background(), stage.Origin{}, q); err == nil {
		t.Error("two questions accepted")
	}
	if _, err := upstream.New(upstream.Config{Servers: []string{"dns.google"}}); err == nil {
		t.Error("host name accepted as a server")
	}
}

func TestValidate(t *testing.T) {
	q := query("www.example.test.", dns.TypeA)
	reply := func(mod func(r *dns.Msg)) *dns.Msg {
		r := new(dns.Msg)
		r.SetReply(q)
		if mod != nil {
			mod(r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *dns.Msg
		ok   bool
	}{
		{"match", reply(nil), true},
		{"name in another case", reply(func(r *dns.Msg) { r.Question[0].Name = "WWW.Example.TEST." }), true},
		{"SERVFAIL without question", reply(func(r *dns.Msg) { r.Rcode = dns.RcodeServerFailure; r.Question = nil }), true},
		{"FORMERR without question", reply(func(r *dns.Msg) { r.Rcode = dns.RcodeFormatError; r.Question = nil }), true},
		{"REFUSED without question", reply(func(r *dns.Msg) { r.Rcode = dns.RcodeRefused; r.Question = nil }), true},
		{"nil", nil, false},
		{"wrong ID", reply(func(r *dns.Msg) { r.Id++ }), false},
		{"no QR", reply(func(r *dns.Msg) { r.Response = false }), false},
		{"opcode", reply(func(r *dns.Msg) { r.Opcode = dns.OpcodeNotify }), false},
		{"NOERROR without question", reply(func(r *dns.Msg) { r.Question = nil }), false},
		{"NXDOMAIN without question", reply(func(r *dns.Msg) { r.Rcode = dns.RcodeNameError; r.Question = nil }), false},
		{"two questions", reply(func(r *dns.Msg) { r.Question = append(r.Question, r.Question[0]) }), false},
		{"other name", reply(func(r *dns.Msg) { r.Question[0].Name = "www.example.test.evil." }), false},
		{"other type", reply(func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }), false},
		{"other class", reply(func(r *dns.Msg) { r.Question[0].Qclass = dns.ClassCHAOS }), false},
	} {
		if err := upstream.Validate(q, tc.r); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestNormalizeAddr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"192.0.2.1", "192.0.2.1:53"},
		{" 192.0.2.1 ", "192.0.2.1:53"},
		{"192.0.2.1:5353", "192.0.2.1:5353"},
		{"::1", "[::1]:53"},
		{"[::1]", "[::1]:53"},
		{"[::1]:5353", "[::1]:5353"},
		{"fe80::1%eth0", "[fe80::1%eth0]:53"},
		{"[2001:db8::1]:53", "[2001:db8::1]:53"},
		{"", ""},
		{"dns.example", ""},
		{"dns.example:53", ""},
		{"192.0.2.1:0", ""},
		{"192.0.2.1:65536", ""},
		{"192.0.2.1:x", ""},
		{"192.0.2", ""},
		{"[::1", ""},
	} {
		got, err := upstream.NormalizeAddr(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("NormalizeAddr(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// The figures behind upstream metrics: exchange durations by the reply's
// rcode, failed health probes, and exchanges that found every server down.
func TestFigures(t *testing.T) {
	a := dnstest.Start(t, dnstest.Zone(60))
	f := newForwarder(t, upstream.Config{Servers: []string{a.Addr}, MaxFails: 1, ProbeInterval: 20 * time.Millisecond,
		ProbeTimeout: 20 * time.Millisecond, TryTimeout: 100 * time.Millisecond, Budget: 250 * time.Millisecond})
	running(t, f)
	for range 3 {
		forward(t, f, "ok.example.test.", dns.TypeA)
	}
	a.SetHandler(dnstest.Rcode(dns.RcodeNameError))
	forward(t, f, "nx.example.test.", dns.TypeA)
	st := server(t, f, a.Addr).Stats()
	if st.Latency[dns.RcodeSuccess].Count() != 3 || st.Latency[dns.RcodeNameError].Count() != 1 || len(st.Latency) != 2 {
		t.Fatalf("latency by rcode: %+v", st.Latency)
	}
	if st.P50ms <= 0 || st.P99ms < st.P50ms {
		t.Errorf("p50 %v p99 %v", st.P50ms, st.P99ms)
	}
	if f.AllDown() != 0 {
		t.Errorf("AllDown %d with the server up", f.AllDown())
	}
	// Down: exchanges count as all-down, probes fail until it answers.
	a.SetHandler(dnstest.Drop)
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("d.example.test.", dns.TypeA)); err == nil {
		t.Fatal("no error from a dead server")
	}
	dnstest.WaitFor(t, 10*time.Second, "the server to be marked down", server(t, f, a.Addr).Down)
	if _, err := f.Exchange(context.Background(), stage.Origin{}, query("d2.example.test.", dns.TypeA)); err == nil {
		t.Fatal("no error from a dead server")
	}
	if n := f.AllDown(); n != 1 {
		t.Errorf("AllDown %d after one exchange with the only server down, want 1", n)
	}
	dnstest.WaitFor(t, 10*time.Second, "failed probes", func() bool { return server(t, f, a.Addr).Stats().ProbeFailures >= 2 })
	if st := server(t, f, a.Addr).Stats(); st.Latency[dns.RcodeSuccess].Count() != 3 {
		t.Errorf("failed exchanges changed the latency figures: %+v", st.Latency)
	}
}

func BenchmarkExchange(b *testing.B) {
	up := dnstest.Start(b, dnstest.Zone(60))
	f := newForwarder(b, upstream.Config{Servers: []string{up.Addr}})
	q := query("bench.example.test.", dns.TypeA)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Exchange(ctx, stage.Origin{}, q); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStrayDatagramsBounded: a flood of datagrams that are not the reply
// (forgeries racing the real answer) makes an exchange abandon its socket
// after a bounded number, instead of reading until its deadline; and it
// does not count against the server's health, or anyone able to send
// forged datagrams could mark a healthy server down.
func TestStrayDatagramsBounded(t *testing.T) {
	raw := dnstest.StartRaw(t, func(pkt []byte, send func([]byte)) {
		q := new(dns.Msg)
		if q.Unpack(pkt) != nil {
			return
		}
		for i := 0; i < 50; i++ {
			forged := rawReply(q, "192.0.2.66")
			forged.Id = q.Id + 1 + uint16(i)
			send(dnstest.Pack(forged))
		}
	}, nil)
	f := newForwarder(t, upstream.Config{Servers: []string{raw.Addr}, MaxFails: 1, TryTimeout: 3 * time.Second, Budget: 6 * time.Second})
	start := time.Now()
	_, err := f.Exchange(context.Background(), stage.Origin{}, query("flood.example.test.", dns.TypeA))
	if !errors.Is(err, upstream.ErrAllFailed) {
		t.Fatalf("only forged replies: %v, want ErrAllFailed", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("gave up after %v: the socket was read until its deadline", d.Round(time.Millisecond))
	}
	if s := server(t, f, raw.Addr); s.Down() || s.Stats().Failures != 0 {
		t.Fatalf("forged datagrams counted against the server: %+v", s.Stats())
	}
}

// TestUnrelatedRecordsDropped: of an upstream reply only what answers the
// question reaches the caller (and so the cache): the CNAME chain from the
// question name and the RRset at its end, the SOA for a negative answer,
// the OPT. Records for other names, NS records and glue are dropped.
func TestUnrelatedRecordsDropped(t *testing.T) {
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		rr := func(s string) dns.RR {
			x, err := dns.NewRR(s)
			if err != nil {
				panic(err)
			}
			return x
		}
		switch r.Question[0].Name {
		case "www.example.test.":
			m.Answer = []dns.RR{
				rr("www.example.test. 300 IN CNAME Web.Example.Test."),
				rr("bank.example. 86400 IN A 198.51.100.66"), // not on the chain
				rr("web.example.test. 60 IN A 192.0.2.1"),
				rr("web.example.test. 60 IN AAAA 2001:db8::1"), // not the type asked
			}
			m.Ns = []dns.RR{rr("example.test. 86400 IN NS ns.attacker.example."), rr("example.test. 60 IN SOA ns.example.test. h.example.test. 1 2 3 4 60")}
			m.Extra = []dns.RR{rr("ns.attacker.example. 86400 IN A 198.51.100.53")}
		case "gone.example.test.":
			m.Rcode = dns.RcodeNameError
			m.Answer = []dns.RR{rr("gone.example.test. 60 IN CNAME nx.other.test."), rr("other.test. 60 IN A 198.51.100.1")}
			m.Ns = []dns.RR{
				rr("other.test. 60 IN SOA ns.other.test. h.other.test. 1 2 3 4 30"),
				rr("example.test. 60 IN SOA ns.example.test. h.example.test. 1 2 3 4 60"), // not the final name's zone
				rr("other.test. 60 IN NS ns.other.test."),
			}
		}
		if o := r.IsEdns0(); o != nil {
			m.SetEdns0(1232, o.Do())
		}
		_ = w.WriteMsg(m)
	})
	f := newForwarder(t, upstream.Config{Servers: []string{up.Addr}})
	r := forward(t, f, "www.example.test.", dns.TypeA)
	var got []string
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, x := range sec {
			got = append(got, dns.TypeToString[x.Header().Rrtype]+" "+strings.ToLower(x.Header().Name))
		}
	}
	if want := "CNAME www.example.test.|A web.example.test.|OPT ."; strings.Join(got, "|") != want {
		t.Fatalf("positive answer kept %q, want %q", strings.Join(got, "|"), want)
	}
	r = forward(t, f, "gone.example.test.", dns.TypeA)
	got = got[:0]
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, x := range sec {
			got = append(got, dns.TypeToString[x.Header().Rrtype]+" "+x.Header().Name)
		}
	}
	if want := "CNAME gone.example.test.|SOA other.test.|OPT ."; r.Rcode != dns.RcodeNameError || strings.Join(got, "|") != want {
		t.Fatalf("negative answer: rcode %d, kept %q, want %q", r.Rcode, strings.Join(got, "|"), want)
	}
}
