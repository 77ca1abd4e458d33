package cache_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// clock is the injected clock: time moves only when a test says so. Like
// the system's, it has a wall reading, which an administrator or NTP may
// step, and a monotonic one, which only ever advances with time.
type clock struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func newClock() *clock { return &clock{wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now is the wall reading.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Mono is the monotonic reading (the cache's Config.Clock).
func (c *clock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.mono += d
	c.mu.Unlock()
}

// Step sets the wall clock d away, as settimeofday(2) does; no time passes.
func (c *clock) Step(d time.Duration) {
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.mu.Unlock()
}

// forwarder is a real upstream.Forwarder in front of addrs.
func forwarder(t testing.TB, addrs ...string) *upstream.Forwarder {
	t.Helper()
	return forwarderTimeout(t, 3*time.Second, addrs...)
}

// heldTry is the try timeout of a forwarder whose upstream a test holds
// behind a dnstest.Gate: far longer than any test holds it, however busy
// the machine, so that no retry adds a question to the upstream's count
// and no timeout answers in the gate's place.
const heldTry = time.Minute

// forwarderTimeout is forwarder with the given try timeout (the budget is
// two tries).
func forwarderTimeout(t testing.TB, try time.Duration, addrs ...string) *upstream.Forwarder {
	t.Helper()
	f, err := upstream.New(upstream.Config{Servers: addrs, Policy: upstream.Sequential,
		TryTimeout: try, Budget: 2 * try, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// newCache returns a cache on clk (when not nil) in front of up; it is
// closed at test end.
func newCache(t testing.TB, cfg cache.Config, clk *clock, up stage.Exchanger) *cache.Cache {
	t.Helper()
	if clk != nil {
		cfg.Clock = clk.Mono
	}
	cfg.Logger = quiet
	c, err := cache.New(cfg, up)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// setup is the common case: a dnstest server answering h, a forwarder and
// a cache on a fresh clock.
func setup(t testing.TB, cfg cache.Config, h dns.HandlerFunc) (*cache.Cache, *dnstest.Server, *clock) {
	t.Helper()
	up := dnstest.StartStable(t, h)
	clk := newClock()
	return newCache(t, cfg, clk, forwarder(t, up.Addr)), up, clk
}

// setupHeld is setup for a test that holds the upstream's answers behind a
// gate: the forwarder's try timeout is heldTry.
func setupHeld(t testing.TB, cfg cache.Config, h dns.HandlerFunc) (*cache.Cache, *dnstest.Server, *clock) {
	t.Helper()
	up := dnstest.StartStable(t, h)
	clk := newClock()
	return newCache(t, cfg, clk, forwarderTimeout(t, heldTry, up.Addr)), up, clk
}

func query(name string, qtype uint16, do, cd bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 4242
	m.CheckingDisabled = cd
	if do {
		m.SetEdns0(1232, true)
	}
	return m
}

func resolve(t testing.TB, c *cache.Cache, name string, qtype uint16) (r *dns.Msg, fromCache, stale bool) {
	t.Helper()
	r, fromCache, stale, err := resolveFor(c, context.Background(), query(name, qtype, false, false))
	if err != nil {
		t.Fatalf("Resolve %s/%d: %v", name, qtype, err)
	}
	if r.Id != 4242 {
		t.Fatalf("Resolve %s/%d: reply ID %d, want the query's 4242", name, qtype, r.Id)
	}
	return r, fromCache, stale
}

// hit calls AppendHit after a prefix and unpacks what it appended.
func hit(t testing.TB, c *cache.Cache, name string, qtype uint16, do, cd bool) (m *dns.Msg, rcode int, ok bool) {
	t.Helper()
	prefix := []byte("prefix")
	out, rcode, ok := c.AppendHit(append([]byte(nil), prefix...), name, qtype, dns.ClassINET, do, cd)
	if string(out[:len(prefix)]) != "prefix" {
		t.Fatalf("AppendHit overwrote dst's prefix")
	}
	if !ok {
		if len(out) != len(prefix) {
			t.Fatalf("AppendHit miss appended %d bytes", len(out)-len(prefix))
		}
		return nil, 0, false
	}
	m = new(dns.Msg)
	if err := m.Unpack(out[len(prefix):]); err != nil {
		t.Fatalf("AppendHit %s: unpacking: %v", name, err)
	}
	if m.Id != 0 || m.Rcode != rcode || len(m.Question) != 1 || m.Question[0].Name != name || m.IsEdns0() != nil {
		t.Fatalf("AppendHit %s: want ID 0, rcode %d, the lower-case question and no OPT: %v", name, rcode, m)
	}
	return m, rcode, true
}

// ttls lists every TTL in a message (OPT excluded).
func ttls(m *dns.Msg) []uint32 {
	var out []uint32
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype != dns.TypeOPT {
				out = append(out, rr.Header().Ttl)
			}
		}
	}
	return out
}

// wantTTL fails unless m has records and every one has TTL ttl.
func wantTTL(t testing.TB, what string, m *dns.Msg, ttl uint32) {
	t.Helper()
	got := ttls(m)
	if len(got) == 0 {
		t.Fatalf("%s: no records: %v", what, m)
	}
	for _, g := range got {
		if g != ttl {
			t.Fatalf("%s: TTLs %v, want all %d", what, got, ttl)
		}
	}
}

func TestTTLCountdown(t *testing.T) {
	// Two records with different TTLs: the entry lives as long as the
	// shortest, and every record counts down from there.
	// Prefetch off: the hits near expiry would otherwise refresh the entry.
	c, up, clk := setup(t, cache.Config{StaleFor: -1, PrefetchHits: -1}, dnstest.Records(dns.RcodeSuccess,
		"{q} 300 IN A 192.0.2.1", "{q} 100 IN A 192.0.2.2"))
	const name = "www.example.test."

	r, fromCache, stale := resolve(t, c, "WWW.Example.TEST.", dns.TypeA)
	if fromCache || stale || len(r.Answer) != 2 {
		t.Fatalf("first Resolve: fromCache %v stale %v answer %v", fromCache, stale, r.Answer)
	}
	wantTTL(t, "miss", r, 100)

	clk.Advance(30 * time.Second)
	m, rcode, ok := hit(t, c, name, dns.TypeA, false, false)
	if !ok || rcode != dns.RcodeSuccess || len(m.Answer) != 2 {
		t.Fatalf("AppendHit after 30s: ok %v rcode %d %v", ok, rcode, m)
	}
	wantTTL(t, "AppendHit after 30s", m, 70)
	r, fromCache, _ = resolve(t, c, name, dns.TypeA)
	if !fromCache {
		t.Fatal("Resolve after 30s not from cache")
	}
	wantTTL(t, "Resolve after 30s", r, 70)
	if r.Question[0].Name != name {
		t.Errorf("Resolve hit question %q, want %q", r.Question[0].Name, name)
	}

	clk.Advance(69*time.Second + 500*time.Millisecond)
	m, _, ok = hit(t, c, name, dns.TypeA, false, false)
	if !ok {
		t.Fatal("AppendHit 0.5s before expiry: miss")
	}
	wantTTL(t, "AppendHit 0.5s before expiry", m, 0)

	clk.Advance(500 * time.Millisecond)
	if _, _, ok := hit(t, c, name, dns.TypeA, false, false); ok {
		t.Fatal("AppendHit at expiry: still a hit")
	}
	if up.Count() != 1 {
		t.Fatalf("upstream saw %d queries before expiry, want 1", up.Count())
	}
	r, fromCache, _ = resolve(t, c, name, dns.TypeA)
	if fromCache || up.Count() != 2 {
		t.Fatalf("Resolve at expiry: fromCache %v, upstream %d queries; want a new fetch", fromCache, up.Count())
	}
	wantTTL(t, "refetched", r, 100)
	st := c.Stats()
	if st.Hits != 3 || st.Misses != 2 || st.Entries != 1 {
		t.Errorf("stats %+v: want 3 hits, 2 misses, 1 entry", st)
	}
}

func TestTTLClamps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ttl      uint32
		min, max time.Duration
		life     uint32
	}{
		{"below min", 5, time.Minute, 10 * time.Minute, 60},
		{"above max", 86400, time.Minute, 10 * time.Minute, 600},
		{"inside", 120, time.Minute, 10 * time.Minute, 120},
		{"default max 1h", 86400, 0, 0, 3600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, up, clk := setup(t, cache.Config{MinTTL: tc.min, MaxTTL: tc.max, StaleFor: -1},
				dnstest.Records(dns.RcodeSuccess, fmt.Sprintf("{q} %d IN A 192.0.2.1", tc.ttl)))
			r, _, _ := resolve(t, c, "a.example.test.", dns.TypeA)
			// The answer to the miss already carries the TTL the cache
			// will count down from, so hits never contradict it.
			wantTTL(t, "miss", r, tc.life)
			clk.Advance(time.Duration(tc.life-1) * time.Second)
			m, _, ok := hit(t, c, "a.example.test.", dns.TypeA, false, false)
			if !ok {
				t.Fatalf("no hit 1s before the clamped lifetime %ds", tc.life)
			}
			wantTTL(t, "hit", m, 1)
			clk.Advance(time.Second)
			if _, _, ok := hit(t, c, "a.example.test.", dns.TypeA, false, false); ok {
				t.Fatalf("hit after the clamped lifetime %ds", tc.life)
			}
			if up.Count() != 1 {
				t.Fatalf("upstream saw %d queries", up.Count())
			}
		})
	}
	if _, err := cache.New(cache.Config{MinTTL: time.Hour, MaxTTL: time.Minute}, nil); err == nil {
		t.Error("min > max accepted")
	}
	if _, err := cache.New(cache.Config{Size: -1}, nil); err == nil {
		t.Error("negative size accepted")
	}
}

func TestKey(t *testing.T) {
	type seen struct {
		name   string
		qclass uint16
		do, cd bool
	}
	var mu sync.Mutex
	var got []seen
	c, up, _ := setup(t, cache.Config{}, func(w dns.ResponseWriter, r *dns.Msg) {
		s := seen{name: r.Question[0].Name, qclass: r.Question[0].Qclass, cd: r.CheckingDisabled}
		if o := r.IsEdns0(); o != nil {
			s.do = o.Do()
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		// An answer of the type and class asked (the forwarder keeps
		// only what answers the question).
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: q.Qclass, Ttl: 300}
		if q.Qtype == dns.TypeAAAA {
			m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: net.ParseIP("2001:db8::1")}}
		} else {
			m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: net.IPv4(192, 0, 2, 1)}}
		}
		_ = w.WriteMsg(m)
	})
	ctx := context.Background()
	ask := func(name string, qtype, qclass uint16, do, cd bool) {
		t.Helper()
		q := query(name, qtype, do, cd)
		q.Question[0].Qclass = qclass
		if _, _, _, err := resolveFor(c, ctx, q); err != nil {
			t.Fatalf("Resolve %s: %v", name, err)
		}
	}
	ask("Key.Example.TEST.", dns.TypeA, dns.ClassINET, false, false)
	ask("key.example.test.", dns.TypeA, dns.ClassINET, false, false) // same key: name case
	ask("KEY.EXAMPLE.TEST.", dns.TypeA, dns.ClassINET, false, false) // same key
	if up.Count() != 1 {
		t.Fatalf("names differing in case: %d upstream queries, want 1", up.Count())
	}
	ask("key.example.test.", dns.TypeAAAA, dns.ClassINET, false, false) // qtype
	ask("key.example.test.", dns.TypeA, dns.ClassCHAOS, false, false)   // qclass
	ask("key.example.test.", dns.TypeA, dns.ClassINET, true, false)     // DO
	ask("key.example.test.", dns.TypeA, dns.ClassINET, false, true)     // CD
	ask("key.example.test.", dns.TypeA, dns.ClassINET, true, true)      // DO+CD
	if up.Count() != 6 {
		t.Fatalf("6 distinct keys: %d upstream queries", up.Count())
	}
	// Every key is now a hit, and each on its own entry.
	for _, k := range []struct {
		qclass uint16
		do, cd bool
	}{{dns.ClassINET, false, false}, {dns.ClassCHAOS, false, false}, {dns.ClassINET, true, false}, {dns.ClassINET, false, true}, {dns.ClassINET, true, true}} {
		if _, _, ok := c.AppendHit(nil, "key.example.test.", dns.TypeA, k.qclass, k.do, k.cd); !ok {
			t.Errorf("AppendHit class %d DO %v CD %v: miss", k.qclass, k.do, k.cd)
		}
	}
	if c.Len() != 6 || up.Count() != 6 {
		t.Fatalf("%d entries, %d upstream queries; want 6 and 6", c.Len(), up.Count())
	}
	// The upstream was asked with a lower-case name and the client's DO
	// and CD.
	mu.Lock()
	defer mu.Unlock()
	want := []seen{{"key.example.test.", 1, false, false}, {"key.example.test.", 1, false, false}, {"key.example.test.", 3, false, false},
		{"key.example.test.", 1, true, false}, {"key.example.test.", 1, false, true}, {"key.example.test.", 1, true, true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("upstream saw %v, want %v", got, want)
	}
}

func soa(ttl, minimum uint32) string {
	return fmt.Sprintf("example.test. %d IN SOA ns.example.test. hostmaster.example.test. 1 7200 900 86400 %d", ttl, minimum)
}

func TestNegativeCaching(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rcode      int
		soaTTL     uint32
		soaMinimum uint32
		maxNeg     time.Duration
		life       uint32
	}{
		{"NXDOMAIN SOA TTL lower", dns.RcodeNameError, 30, 600, 0, 30},
		{"NXDOMAIN MINIMUM lower", dns.RcodeNameError, 900, 60, 0, 60},
		{"NXDOMAIN MaxNegativeTTL", dns.RcodeNameError, 7200, 7200, 45 * time.Second, 45},
		{"NXDOMAIN default max 30m", dns.RcodeNameError, 86400, 86400, 0, 1800},
		{"NODATA SOA TTL lower", dns.RcodeSuccess, 30, 600, 0, 30},
		{"NODATA MINIMUM lower", dns.RcodeSuccess, 900, 60, 0, 60},
		{"NODATA MaxNegativeTTL", dns.RcodeSuccess, 7200, 7200, 45 * time.Second, 45},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, up, clk := setup(t, cache.Config{MaxNegativeTTL: tc.maxNeg, StaleFor: -1},
				dnstest.Records(tc.rcode, soa(tc.soaTTL, tc.soaMinimum)))
			r, _, _ := resolve(t, c, "neg.example.test.", dns.TypeA)
			if r.Rcode != tc.rcode || len(r.Answer) != 0 || len(r.Ns) != 1 {
				t.Fatalf("miss: %v", r)
			}
			wantTTL(t, "miss", r, tc.life)
			clk.Advance(10 * time.Second)
			m, rcode, ok := hit(t, c, "neg.example.test.", dns.TypeA, false, false)
			if !ok || rcode != tc.rcode || len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA {
				t.Fatalf("hit: ok %v rcode %d %v", ok, rcode, m)
			}
			wantTTL(t, "hit after 10s", m, tc.life-10)
			clk.Advance(time.Duration(tc.life-10) * time.Second)
			if _, _, ok := hit(t, c, "neg.example.test.", dns.TypeA, false, false); ok {
				t.Fatalf("still cached after %ds", tc.life)
			}
			if up.Count() != 1 {
				t.Fatalf("upstream saw %d queries", up.Count())
			}
		})
	}
}

func TestNotCached(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rcode int
		rrs   []string
	}{
		{"NXDOMAIN without SOA", dns.RcodeNameError, nil},
		{"NODATA without SOA", dns.RcodeSuccess, nil},
		{"referral", dns.RcodeSuccess, nil},
		{"REFUSED", dns.RcodeRefused, nil},
		{"FORMERR", dns.RcodeFormatError, nil},
		{"SOA with TTL 0", dns.RcodeNameError, []string{soa(0, 300)}},
		{"answer with TTL 0", dns.RcodeSuccess, []string{"{q} 0 IN A 192.0.2.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := dnstest.Records(tc.rcode, tc.rrs...)
			if tc.name == "referral" {
				// NS records belong in the authority section.
				h = func(w dns.ResponseWriter, r *dns.Msg) {
					m := new(dns.Msg)
					m.SetReply(r)
					rr, _ := dns.NewRR(r.Question[0].Name + " 300 IN NS ns.example.test.")
					m.Ns = []dns.RR{rr}
					_ = w.WriteMsg(m)
				}
			}
			c, up, _ := setup(t, cache.Config{}, h)
			for i := 0; i < 2; i++ {
				r, fromCache, _ := resolve(t, c, "n.example.test.", dns.TypeA)
				if r.Rcode != tc.rcode || fromCache {
					t.Fatalf("try %d: rcode %d fromCache %v", i, r.Rcode, fromCache)
				}
			}
			// REFUSED goes to the (only) server twice per exchange; the
			// others once. Either way nothing was stored.
			if c.Len() != 0 {
				t.Fatalf("%d entries stored", c.Len())
			}
			if n := up.Count(); n < 2 {
				t.Fatalf("upstream saw %d queries, want every Resolve to ask", n)
			}
		})
	}
}

// plainExchanger is a bare miekg/dns client: no TCP retry, no question
// check, so the cache's own rules are what is tested.
type plainExchanger struct{ addr string }

func (p plainExchanger) Exchange(ctx context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	cl := &dns.Client{Timeout: 3 * time.Second, UDPSize: 1232}
	r, _, err := cl.ExchangeContext(ctx, q, p.addr)
	return r, err
}

func TestTruncatedAndMismatchNotCached(t *testing.T) {
	t.Run("truncated", func(t *testing.T) {
		up := dnstest.Start(t, dnstest.Zone(300)) // big TXT is truncated over UDP
		c := newCache(t, cache.Config{}, newClock(), plainExchanger{up.Addr})
		for i := 0; i < 2; i++ {
			// A truncated reply is no answer: an error (SERVFAIL, or a
			// stale answer), never passed on.
			r, _, _, err := resolveFor(c, context.Background(), query("big.example.test.", dns.TypeTXT, false, false))
			if err == nil {
				t.Fatalf("truncated reply handed back as an answer (TC %v, %d records), want an error", r.Truncated, len(r.Answer))
			}
		}
		if up.Count() != 2 || c.Len() != 0 {
			t.Fatalf("truncated reply cached: upstream %d queries, %d entries", up.Count(), c.Len())
		}
	})
	t.Run("question mismatch", func(t *testing.T) {
		up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			m.Question[0].Name = "other.example.test."
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "other.example.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 66)}}
			_ = w.WriteMsg(m)
		})
		c := newCache(t, cache.Config{}, newClock(), plainExchanger{up.Addr})
		for i := 0; i < 2; i++ {
			resolve(t, c, "asked.example.test.", dns.TypeA)
		}
		if up.Count() != 2 || c.Len() != 0 {
			t.Fatalf("mismatched reply cached: upstream %d queries, %d entries", up.Count(), c.Len())
		}
	})
	t.Run("Put", func(t *testing.T) {
		c := newCache(t, cache.Config{}, newClock(), nil)
		k := cache.Key{Name: "p.example.test.", Type: dns.TypeA, Class: dns.ClassINET}
		ok := func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(k.Name, k.Type)
			m.Response = true
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: k.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 1)}}
			return m
		}
		bad := []func(m *dns.Msg){
			func(m *dns.Msg) { m.Truncated = true },
			func(m *dns.Msg) { m.Question[0].Name = "q.example.test." },
			func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA },
			func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS },
			func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) },
			func(m *dns.Msg) { m.Question = nil },
		}
		for i, mod := range bad {
			m := ok()
			mod(m)
			c.Put(k, m)
			if c.Len() != 0 {
				t.Fatalf("bad reply %d stored", i)
			}
		}
		m := ok()
		m.Question[0].Name = "P.Example.TEST."
		c.Put(k, m)
		if _, _, hit := c.AppendHit(nil, k.Name, k.Type, k.Class, false, false); !hit {
			t.Fatal("a reply whose question differs only in case was not stored")
		}
	})
}

func TestServfail(t *testing.T) {
	t.Run("cached for ServfailTTL", func(t *testing.T) {
		c, up, clk := setup(t, cache.Config{ServfailTTL: 3 * time.Second}, dnstest.Rcode(dns.RcodeServerFailure))
		r, _, _ := resolve(t, c, "sf.example.test.", dns.TypeA)
		if r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("rcode %d", r.Rcode)
		}
		asked := up.Count()
		clk.Advance(2 * time.Second)
		if _, rcode, ok := hit(t, c, "sf.example.test.", dns.TypeA, false, false); !ok || rcode != dns.RcodeServerFailure {
			t.Fatalf("SERVFAIL not cached: ok %v rcode %d", ok, rcode)
		}
		clk.Advance(time.Second)
		if _, _, ok := hit(t, c, "sf.example.test.", dns.TypeA, false, false); ok {
			t.Fatal("SERVFAIL cached past ServfailTTL")
		}
		// An expired SERVFAIL is never served stale.
		up.Stop()
		if _, _, _, err := resolveFor(c, context.Background(), query("sf.example.test.", dns.TypeA, false, false)); err == nil {
			t.Fatal("expired SERVFAIL served while the upstream is down")
		}
		if up.Count() != asked {
			t.Fatalf("upstream counted %d queries while stopped", up.Count()-asked)
		}
	})
	t.Run("ServfailTTL capped at 5m", func(t *testing.T) {
		c, _, clk := setup(t, cache.Config{ServfailTTL: time.Hour}, dnstest.Rcode(dns.RcodeServerFailure))
		resolve(t, c, "sf.example.test.", dns.TypeA)
		clk.Advance(299 * time.Second)
		if _, _, ok := hit(t, c, "sf.example.test.", dns.TypeA, false, false); !ok {
			t.Fatal("SERVFAIL gone before 5m")
		}
		clk.Advance(time.Second)
		if _, _, ok := hit(t, c, "sf.example.test.", dns.TypeA, false, false); ok {
			t.Fatal("SERVFAIL kept for more than 5m (RFC 2308 §7.1)")
		}
	})
	t.Run("NOTIMP is kept as SERVFAIL is", func(t *testing.T) {
		c, _, clk := setup(t, cache.Config{ServfailTTL: 3 * time.Second}, dnstest.Rcode(dns.RcodeNotImplemented))
		resolve(t, c, "ni.example.test.", dns.TypeA)
		clk.Advance(2 * time.Second)
		if _, rcode, ok := hit(t, c, "ni.example.test.", dns.TypeA, false, false); !ok || rcode != dns.RcodeNotImplemented {
			t.Fatalf("NOTIMP not cached: ok %v rcode %d", ok, rcode)
		}
		if st := c.Stats(); st.DenialEntries != 1 {
			t.Fatalf("NOTIMP not counted a denial: %+v", st)
		}
	})
	t.Run("negative: never kept", func(t *testing.T) {
		c, up, _ := setup(t, cache.Config{ServfailTTL: -1}, dnstest.Rcode(dns.RcodeServerFailure))
		resolve(t, c, "sf.example.test.", dns.TypeA)
		resolve(t, c, "sf.example.test.", dns.TypeA)
		if c.Len() != 0 || up.CountName("sf.example.test.", dns.TypeA) != 2 {
			t.Fatalf("%d entries, upstream asked %d times: want none kept", c.Len(), up.CountName("sf.example.test.", dns.TypeA))
		}
	})
	t.Run("never replaces a stale-capable entry", func(t *testing.T) {
		c, up, clk := setup(t, cache.Config{}, dnstest.Zone(10))
		resolve(t, c, "s.example.test.", dns.TypeA)
		clk.Advance(15 * time.Second)
		up.SetHandler(dnstest.Rcode(dns.RcodeServerFailure))
		r, _, stale := resolve(t, c, "s.example.test.", dns.TypeA)
		if !stale || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("upstream SERVFAIL over a stale-capable entry: stale %v %v", stale, r)
		}
		// The stored entry is still the positive one.
		r, _, stale = resolve(t, c, "s.example.test.", dns.TypeA)
		if !stale || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("second query: stale %v rcode %d", stale, r.Rcode)
		}
	})
	t.Run("never replaces a fresh entry", func(t *testing.T) {
		// Serve-stale off: a prefetch that gets SERVFAIL must not throw
		// away an answer that is still valid.
		c, up, clk := setup(t, cache.Config{StaleFor: -1, PrefetchHits: 1}, dnstest.Zone(100))
		resolve(t, c, "f.example.test.", dns.TypeA)
		up.SetHandler(dnstest.Rcode(dns.RcodeServerFailure))
		clk.Advance(95 * time.Second)
		before := up.Count()
		if _, _, ok := hit(t, c, "f.example.test.", dns.TypeA, false, false); !ok {
			t.Fatal("miss before expiry")
		}
		dnstest.WaitFor(t, 10*time.Second, "the prefetch to reach the upstream", func() bool { return up.Count() > before })
		c.Close() // waits for the refresh to finish
		m, rcode, ok := hit(t, c, "f.example.test.", dns.TypeA, false, false)
		if !ok || rcode != dns.RcodeSuccess {
			t.Fatalf("fresh entry replaced by the prefetch's SERVFAIL: ok %v rcode %d", ok, rcode)
		}
		wantTTL(t, "after failed prefetch", m, 5)
	})
}

func TestServeStale(t *testing.T) {
	c, up, clk := setup(t, cache.Config{StaleFor: time.Minute, StaleTTL: 7 * time.Second, StaleAnswerAfter: 5 * time.Second},
		dnstest.Zone(10))
	resolve(t, c, "st.example.test.", dns.TypeA)
	resolve(t, c, "nx.example.test.", dns.TypeA)
	up.Stop()

	clk.Advance(15 * time.Second) // expired 5s ago
	for _, name := range []string{"st.example.test.", "nx.example.test."} {
		r, fromCache, stale := resolve(t, c, name, dns.TypeA)
		if !stale || !fromCache {
			t.Fatalf("%s with the upstream stopped: stale %v fromCache %v", name, stale, fromCache)
		}
		wantTTL(t, name+" stale", r, 7)
	}
	if r, _, _ := resolve(t, c, "st.example.test.", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("stale answer %v", r)
	}
	// AppendHit never serves stale: that is Resolve's decision.
	if _, _, ok := hit(t, c, "st.example.test.", dns.TypeA, false, false); ok {
		t.Fatal("AppendHit served an expired entry")
	}
	clk.Advance(54 * time.Second) // 59s past expiry: still within StaleFor
	if _, _, stale := resolve(t, c, "st.example.test.", dns.TypeA); !stale {
		t.Fatal("not stale 59s past expiry")
	}
	clk.Advance(time.Second) // 60s past expiry: too old
	if r, _, stale, err := resolveFor(c, context.Background(), query("st.example.test.", dns.TypeA, false, false)); err == nil {
		t.Fatalf("served past StaleFor: stale %v %v", stale, r)
	}
	if c.Stats().StaleServed != 4 {
		t.Errorf("StaleServed %d, want 4", c.Stats().StaleServed)
	}
	if up.Count() != 2 {
		t.Fatalf("stopped upstream counted %d queries", up.Count())
	}
}

// TestClockStep: lifetimes follow the time that passed, not the wall
// clock. A step back must not serve a TTL longer than the upstream gave; a
// step forward must not expire every entry, nor push them past the
// serve-stale window so that an upstream outage right then finds nothing to
// fall back on.
func TestClockStep(t *testing.T) {
	c, up, clk := setup(t, cache.Config{StaleFor: time.Hour, StaleTTL: 7 * time.Second, StaleAnswerAfter: 5 * time.Second,
		PrefetchHits: -1}, dnstest.Records(dns.RcodeSuccess, "{q} 300 IN A 192.0.2.30"))
	resolve(t, c, "step.example.test.", dns.TypeA)
	clk.Advance(100 * time.Second)
	m, _, ok := hit(t, c, "step.example.test.", dns.TypeA, false, false)
	if !ok {
		t.Fatal("miss 100 s into a 300 s TTL")
	}
	wantTTL(t, "before the steps", m, 200)

	clk.Step(-time.Hour)
	m, _, ok = hit(t, c, "step.example.test.", dns.TypeA, false, false)
	if !ok {
		t.Fatal("miss after the wall clock stepped back")
	}
	wantTTL(t, "after the wall clock stepped back an hour", m, 200)

	clk.Advance(10 * time.Second)
	clk.Step(2 * time.Hour)
	m, _, ok = hit(t, c, "step.example.test.", dns.TypeA, false, false)
	if !ok {
		t.Fatal("the entry expired when the wall clock stepped forward")
	}
	wantTTL(t, "after the wall clock stepped forward two hours", m, 190)

	// The upstream goes away; once the entry has really expired, it is
	// still there to be served stale.
	up.Stop()
	clk.Advance(200 * time.Second)
	r, fromCache, stale := resolve(t, c, "step.example.test.", dns.TypeA)
	if !stale || !fromCache || r.Answer[0].(*dns.A).A.String() != "192.0.2.30" {
		t.Fatalf("10 s past expiry with the upstream gone: stale %v, from cache %v: %v", stale, fromCache, r)
	}
	wantTTL(t, "stale", r, 7)
	if up.Count() != 1 {
		t.Fatalf("upstream asked %d times, want once", up.Count())
	}
}

func TestServeStaleRefreshedWhenUpstreamBack(t *testing.T) {
	c, up, clk := setup(t, cache.Config{StaleAnswerAfter: 5 * time.Second}, dnstest.Zone(10))
	resolve(t, c, "back.example.test.", dns.TypeA)
	up.Stop()
	clk.Advance(20 * time.Second)
	if _, _, stale := resolve(t, c, "back.example.test.", dns.TypeA); !stale {
		t.Fatal("no stale answer with the upstream stopped")
	}
	up.SetHandler(dnstest.Records(dns.RcodeSuccess, "{q} 50 IN A 192.0.2.50"))
	up.Restart(t)
	// Right after a failure stale answers come at once, and one
	// background refresh finds the upstream back.
	r, _, stale := resolve(t, c, "back.example.test.", dns.TypeA)
	if !stale || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("right after the failure: stale %v %v", stale, r)
	}
	var m *dns.Msg
	dnstest.WaitFor(t, 10*time.Second, "the background refresh", func() bool {
		var ok bool
		m, _, ok = hit(t, c, "back.example.test.", dns.TypeA, false, false)
		return ok
	})
	if m.Answer[0].(*dns.A).A.String() != "192.0.2.50" {
		t.Fatalf("refreshed entry %v", m)
	}
	wantTTL(t, "refreshed", m, 50)
	if n := up.CountName("back.example.test.", dns.TypeA); n != 2 {
		t.Fatalf("upstream asked %d times, want 2 (first fetch, one refresh)", n)
	}
}

func TestStaleAnswerAfter(t *testing.T) {
	c, up, clk := setupHeld(t, cache.Config{StaleAnswerAfter: 50 * time.Millisecond}, dnstest.Zone(10))
	resolve(t, c, "slow.example.test.", dns.TypeA)
	gate := dnstest.NewGate(t)
	up.SetHandler(gate.Wrap(dnstest.Records(dns.RcodeSuccess, "{q} 40 IN A 192.0.2.40")))
	clk.Advance(11 * time.Second)
	start := time.Now()
	r, fromCache, stale := resolve(t, c, "slow.example.test.", dns.TypeA)
	// The gate is closed and the forwarder's try timeout is a minute: an
	// answer within the minute can only be the StaleAnswerAfter timer's
	// (the bound is the timeout, 1200 times the timer's 50 ms).
	if !stale || !fromCache || time.Since(start) >= heldTry {
		t.Fatalf("slow upstream: stale %v fromCache %v after %s", stale, fromCache, time.Since(start))
	}
	wantTTL(t, "stale", r, 30) // default StaleTTL
	if gate.Waiting() != 1 {
		t.Fatalf("%d queries held upstream, want 1", gate.Waiting())
	}
	// While that fetch is out, further queries are answered stale at once
	// (not counted as misses: they do not wait on the timer again), and no
	// more queries go upstream.
	for i := 0; i < 5; i++ {
		if _, _, stale := resolve(t, c, "slow.example.test.", dns.TypeA); !stale {
			t.Fatalf("query %d while the fetch is out: not stale", i)
		}
	}
	if st := c.Stats(); st.Misses != 2 || st.StaleServed != 6 {
		t.Fatalf("stats %+v: want 2 misses (the first fetch, the slow one) and 6 stale answers", st)
	}
	gate.Open()
	var m *dns.Msg
	dnstest.WaitFor(t, 10*time.Second, "the late answer to be stored", func() bool {
		var ok bool
		m, _, ok = hit(t, c, "slow.example.test.", dns.TypeA, false, false)
		return ok
	})
	wantTTL(t, "late answer", m, 40)
	if n := up.CountName("slow.example.test.", dns.TypeA); n != 2 {
		t.Fatalf("upstream asked %d times, want 2", n)
	}
}

func TestPrefetch(t *testing.T) {
	for _, via := range []string{"AppendHit", "Resolve"} {
		t.Run(via, func(t *testing.T) {
			c, up, clk := setupHeld(t, cache.Config{}, dnstest.Zone(100))
			const name = "hot.example.test."
			get := func() (*dns.Msg, bool) {
				if via == "AppendHit" {
					m, _, ok := hit(t, c, name, dns.TypeA, false, false)
					return m, ok
				}
				r, fromCache, stale, err := resolveFor(c, context.Background(), query(name, dns.TypeA, false, false))
				if err != nil || stale {
					t.Errorf("Resolve: %v stale %v", err, stale)
					return nil, false
				}
				return r, fromCache
			}
			resolve(t, c, name, dns.TypeA)
			clk.Advance(50 * time.Second)
			if _, ok := get(); !ok { // hit 1, half the lifetime left: no prefetch
				t.Fatal("miss")
			}
			if c.Stats().Prefetches != 0 {
				t.Fatal("prefetch with half the lifetime left")
			}
			gate := dnstest.NewGate(t)
			up.SetHandler(gate.Wrap(dnstest.Zone(100)))
			clk.Advance(41 * time.Second) // 9s of 100 left: in the 10% window
			var wg sync.WaitGroup
			var misses atomic.Int64
			for i := 0; i < 50; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, ok := get(); !ok {
						misses.Add(1)
					}
				}()
			}
			wg.Wait()
			if misses.Load() != 0 {
				t.Fatalf("%d misses on a fresh entry", misses.Load())
			}
			dnstest.WaitFor(t, 10*time.Second, "the prefetch to reach the upstream", func() bool { return gate.Waiting() == 1 })
			// More hits while the refresh is out start nothing new.
			for i := 0; i < 20; i++ {
				get()
			}
			if n := up.CountName(name, dns.TypeA); n != 2 {
				t.Fatalf("upstream saw %d queries, want 2 (the miss, one prefetch)", n)
			}
			gate.Open()
			dnstest.WaitFor(t, 10*time.Second, "the prefetched entry", func() bool {
				m, _, ok := hit(t, c, name, dns.TypeA, false, false)
				return ok && ttls(m)[0] == 100
			})
			// Past the original expiry the hot name still hits.
			clk.Advance(10 * time.Second)
			m, ok := get()
			if !ok {
				t.Fatal("hot name missed after its original expiry")
			}
			wantTTL(t, "after the original expiry", m, 90)
			st := c.Stats()
			if st.Prefetches != 1 || st.Misses != 1 || up.CountName(name, dns.TypeA) != 2 {
				t.Fatalf("stats %+v, upstream %d: want 1 prefetch, 1 miss, 2 upstream queries", st, up.CountName(name, dns.TypeA))
			}
		})
	}
}

func TestPrefetchNeedsPopularity(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cache.Config
		hits int
	}{
		{"one hit", cache.Config{}, 1},
		{"disabled", cache.Config{PrefetchHits: -1}, 10},
		{"outside the window", cache.Config{PrefetchPercent: 5}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, up, clk := setup(t, tc.cfg, dnstest.Zone(100))
			resolve(t, c, "cold.example.test.", dns.TypeA)
			clk.Advance(91 * time.Second)
			for i := 0; i < tc.hits; i++ {
				if _, _, ok := hit(t, c, "cold.example.test.", dns.TypeA, false, false); !ok {
					t.Fatal("miss")
				}
			}
			c.Close() // waits for any refresh
			if up.Count() != 1 || c.Stats().Prefetches != 0 {
				t.Fatalf("upstream saw %d queries, %d prefetches; want no prefetch", up.Count(), c.Stats().Prefetches)
			}
		})
	}
}

func a(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 1)}}
	return m
}

func key(name string) cache.Key { return cache.Key{Name: name, Type: dns.TypeA, Class: dns.ClassINET} }

// txt is a reply of n TXT records of 200 bytes each (about 210 bytes
// each in wire form, the owner compressed).
func txt(name string, n int) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	m.Response = true
	for i := 0; i < n; i++ {
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 300},
			Txt: []string{fmt.Sprintf("%03d%s", i, strings.Repeat("x", 196))}})
	}
	return m
}

// TestByteBound: the cache holds at most MaxBytes whatever the size of
// the replies, evicting the least recently used; a reply over
// MaxEntryBytes is answered but never kept.
func TestByteBound(t *testing.T) {
	const maxBytes = 1 << 20
	c := newCache(t, cache.Config{Size: 100000, MaxBytes: maxBytes, MaxEntryBytes: 8 << 10}, newClock(), nil)
	for i := 0; i < 2000; i++ {
		n := fmt.Sprintf("big%d.example.test.", i)
		c.Put(cache.Key{Name: n, Type: dns.TypeTXT, Class: dns.ClassINET}, txt(n, 20)) // ~4.3 KB
		if st := c.Stats(); st.Bytes > maxBytes {
			t.Fatalf("after %d puts: %d bytes held, bound %d", i+1, st.Bytes, maxBytes)
		}
	}
	st := c.Stats()
	if st.MaxBytes != maxBytes || st.Bytes < maxBytes*8/10 || st.Entries < 150 || st.Entries > 250 || st.Entries+int(st.Evictions) != 2000 {
		t.Fatalf("stats %+v: want about %d KiB in about 200 entries of ~4.5 KiB, entries + evictions = 2000", st, maxBytes>>10)
	}
	// The most recent are the ones kept.
	if _, _, ok := c.AppendHit(nil, "big1999.example.test.", dns.TypeTXT, dns.ClassINET, false, false); !ok {
		t.Fatal("the newest entry was evicted")
	}
	if _, _, ok := c.AppendHit(nil, "big0.example.test.", dns.TypeTXT, dns.ClassINET, false, false); ok {
		t.Fatal("the oldest entry is still there")
	}

	// Over MaxEntryBytes: answered, not kept, counted.
	up := dnstest.StartStable(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := txt(r.Question[0].Name, 50) // ~10.7 KB: TC over UDP, then TCP
		m.SetReply(r)
		dnstest.WriteTruncated(w, r, m)
	})
	c2 := newCache(t, cache.Config{MaxEntryBytes: 8 << 10}, newClock(), forwarder(t, up.Addr))
	for i := 0; i < 2; i++ {
		r, fromCache, _ := resolve(t, c2, "huge.example.test.", dns.TypeTXT)
		if fromCache || len(r.Answer) != 50 {
			t.Fatalf("query %d for a reply over the entry limit: from cache %v, %d records", i, fromCache, len(r.Answer))
		}
	}
	if st := c2.Stats(); st.Entries != 0 || st.TooLarge != 2 || st.Bytes != 0 {
		t.Fatalf("stats %+v: want nothing kept and 2 replies too large", st)
	}
}

func TestSizeBound(t *testing.T) {
	t.Run("LRU order", func(t *testing.T) {
		c := newCache(t, cache.Config{Size: 3}, newClock(), nil)
		for _, n := range []string{"a.", "b.", "c."} {
			c.Put(key(n), a(n))
		}
		c.AppendHit(nil, "a.", dns.TypeA, dns.ClassINET, false, false) // a is now the most recent
		c.Put(key("d."), a("d."))
		for n, want := range map[string]bool{"a.": true, "b.": false, "c.": true, "d.": true} {
			if _, _, ok := c.AppendHit(nil, n, dns.TypeA, dns.ClassINET, false, false); ok != want {
				t.Errorf("%s cached %v, want %v", n, ok, want)
			}
		}
		if st := c.Stats(); st.Entries != 3 || st.Evictions != 1 || st.Capacity != 3 {
			t.Errorf("stats %+v: want 3 entries, 1 eviction, capacity 3", st)
		}
		// Replacing an entry is not an eviction.
		c.Put(key("a."), a("a."))
		if st := c.Stats(); st.Entries != 3 || st.Evictions != 1 {
			t.Errorf("after replacing: %+v", st)
		}
	})
	t.Run("sharded", func(t *testing.T) {
		const size = 1000
		c := newCache(t, cache.Config{Size: size}, newClock(), nil)
		for i := 0; i < 3*size; i++ {
			n := fmt.Sprintf("n%d.example.test.", i)
			c.Put(key(n), a(n))
			if c.Len() > size {
				t.Fatalf("after %d puts: %d entries, bound %d", i+1, c.Len(), size)
			}
		}
		st := c.Stats()
		if st.Entries+int(st.Evictions) != 3*size || st.Entries < size*9/10 {
			t.Fatalf("stats %+v after %d puts: entries + evictions must add up, entries near the bound", st, 3*size)
		}
	})
}

func TestResolveErrors(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone(10))
	c := newCache(t, cache.Config{}, newClock(), forwarder(t, up.Addr))
	q := query("x.example.test.", dns.TypeA, false, false)
	q.Question = append(q.Question, q.Question[0])
	if _, _, _, err := resolveFor(c, context.Background(), q); err == nil {
		t.Error("two questions accepted")
	}
	q.Question = nil
	if _, _, _, err := resolveFor(c, context.Background(), q); err == nil {
		t.Error("no question accepted")
	}
	up.Stop()
	_, _, _, err := resolveFor(c, context.Background(), query("x.example.test.", dns.TypeA, false, false))
	if !errors.Is(err, upstream.ErrAllFailed) {
		t.Fatalf("upstream down, nothing cached: err %v, want ErrAllFailed", err)
	}
}

// BenchmarkAppendHit is the hit path the server runs on its reader.
func BenchmarkAppendHit(b *testing.B) {
	c, _, _ := setup(b, cache.Config{}, dnstest.Zone(3600))
	resolve(b, c, "www.example.test.", dns.TypeA)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out, _, ok := c.AppendHit(buf[:0], "www.example.test.", dns.TypeA, dns.ClassINET, false, false)
		if !ok || len(out) == 0 {
			b.Fatal("miss")
		}
	}
}

func BenchmarkAppendHitParallel(b *testing.B) {
	c, _, _ := setup(b, cache.Config{}, dnstest.Zone(3600))
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("h%d.example.test.", i)
		resolve(b, c, names[i], dns.TypeA)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 512)
		i := 0
		for pb.Next() {
			if _, _, ok := c.AppendHit(buf[:0], names[i%len(names)], dns.TypeA, dns.ClassINET, false, false); !ok {
				b.Error("miss")
				return
			}
			i++
		}
	})
}

// BenchmarkResolveHit is the *dns.Msg hit path (autopath steps, clients of
// Resolve).
func BenchmarkResolveHit(b *testing.B) {
	c, _, _ := setup(b, cache.Config{}, dnstest.Zone(3600))
	q := query("www.example.test.", dns.TypeA, false, false)
	resolve(b, c, "www.example.test.", dns.TypeA)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, fromCache, _, err := resolveFor(c, ctx, q); err != nil || !fromCache {
			b.Fatal("miss")
		}
	}
}

func TestAppendHitAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cache.Config
	}{
		{"defaults", cache.Config{}},
		// The CoreDNS options on the hit path: the stored TTL, the
		// prefetch window's count.
		{"keepttl, prefetch window", cache.Config{KeepTTL: true, PrefetchWindow: 3 * time.Second, PrefetchPercent: 50}},
	} {
		c, _, _ := setup(t, tc.cfg, dnstest.Zone(3600))
		resolve(t, c, "www.example.test.", dns.TypeA)
		buf := make([]byte, 0, 512)
		allocs := testing.AllocsPerRun(1000, func() {
			if _, _, ok := c.AppendHit(buf[:0], "www.example.test.", dns.TypeA, dns.ClassINET, false, false); !ok {
				t.Fatal("miss")
			}
		})
		if allocs != 0 {
			t.Fatalf("AppendHit %s: %v allocations per hit, want 0", tc.name, allocs)
		}
	}
}

// panicky answers until told to panic, as a bug in the upstream path would.
type panicky struct{ panicNow atomic.Bool }

func (p *panicky) Exchange(ctx context.Context, _ stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	if p.panicNow.Load() {
		panic("bug in the upstream path")
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 100}, A: net.IPv4(192, 0, 2, 1)}}
	return m, nil
}

// TestBackgroundPanicRecovered: a panic in a prefetch or in the refresh of
// an expired entry is recovered and counted; it does not take the process
// down, the query waiting on the refresh is answered stale at once, and
// the entry can be refreshed again later.
func TestBackgroundPanicRecovered(t *testing.T) {
	up := &panicky{}
	panics := new(recovery.Counter)
	clk := newClock()
	c := newCache(t, cache.Config{Panics: panics, StaleAnswerAfter: time.Minute}, clk, up)
	const name = "bug.example.test."
	resolve(t, c, name, dns.TypeA)
	up.panicNow.Store(true)

	clk.Advance(95 * time.Second) // in the prefetch window
	for i := 0; i < 3; i++ {
		if _, _, ok := hit(t, c, name, dns.TypeA, false, false); !ok {
			t.Fatal("miss on a fresh entry")
		}
	}
	dnstest.WaitFor(t, 10*time.Second, "the prefetch's panic to be counted", func() bool { return panics.Count() == 1 })

	clk.Advance(10 * time.Second) // expired
	start := time.Now()
	r, fromCache, stale := resolve(t, c, name, dns.TypeA)
	if !stale || !fromCache || len(r.Answer) != 1 {
		t.Fatalf("expired entry whose refresh panicked: stale %v from cache %v %v", stale, fromCache, r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the query waited %v for a refresh that had panicked", d)
	}
	dnstest.WaitFor(t, 10*time.Second, "the refresh's panic to be counted", func() bool { return panics.Count() >= 2 })

	// Fixed upstream: the entry is refreshed again.
	up.panicNow.Store(false)
	clk.Advance(time.Minute) // past the stale-retry window
	if _, _, stale = resolve(t, c, name, dns.TypeA); stale {
		t.Fatal("stale answer with the upstream fixed")
	}
	if _, _, ok := hit(t, c, name, dns.TypeA, false, false); !ok {
		t.Fatal("entry not refreshed with the upstream fixed")
	}
}

// A StoredHit (AppendHitRef) takes hits on its stored reply while that is
// the cache's fresh answer: not after it expires, is replaced by a new
// answer, or is evicted; its hits count as AppendHit's do, allocation-free.
func TestStoredHit(t *testing.T) {
	c, _, clk := setup(t, cache.Config{Size: 1}, dnstest.Zone(3600))
	hit := func(name string) *cache.StoredHit {
		t.Helper()
		resolve(t, c, name, dns.TypeA)
		_, rcode, ref, ok := c.AppendHitRef(nil, name, dns.TypeA, dns.ClassINET, false, false)
		if !ok || rcode != dns.RcodeSuccess {
			t.Fatalf("AppendHitRef %s: ok %v rcode %d", name, ok, rcode)
		}
		return ref.(*cache.StoredHit)
	}
	h := hit("www.example.test.")
	before := c.Stats().Hits
	clk.Advance(100 * time.Second)
	ttl, ok := h.Hit()
	if !ok || ttl == 0 || ttl > 3600-100 {
		t.Fatalf("Hit 100 s later: ttl %d ok %v, want a TTL counted down", ttl, ok)
	}
	if got := c.Stats().Hits - before; got != 1 {
		t.Errorf("Hit counted %d hits, want 1", got)
	}
	if a := testing.AllocsPerRun(100, func() { h.Hit() }); a != 0 {
		t.Errorf("Hit: %v allocations, want 0", a)
	}

	// Replaced by a new answer for its key.
	r := new(dns.Msg)
	r.SetQuestion("www.example.test.", dns.TypeA)
	r.Response = true
	r.Answer = []dns.RR{dnstest.MustRR("www.example.test. 60 IN A 192.0.2.99")}
	c.Put(cache.KeyOf(r), r)
	if _, ok := h.Hit(); ok {
		t.Error("Hit after the answer was replaced: ok")
	}

	// Evicted (the cache holds one entry).
	h = hit("www.example.test.")
	hit("other.example.test.")
	if _, ok := h.Hit(); ok {
		t.Error("Hit after eviction: ok")
	}

	// Expired.
	h = hit("www.example.test.")
	clk.Advance(2 * time.Hour)
	if _, ok := h.Hit(); ok {
		t.Error("Hit past the TTL: ok")
	}
}

// resolveFor is Cache.Resolve for no client, its Source spelt as the flags
// the tests check: answered without an exchange (a hit or a stale answer),
// and stale.
func resolveFor(c *cache.Cache, ctx context.Context, q *dns.Msg) (r *dns.Msg, fromCache, stale bool, err error) {
	res, err := c.Resolve(ctx, stage.Origin{}, q)
	return res.Msg, res.Source == stage.SourceCache || res.Source == stage.SourceStale, res.Source == stage.SourceStale, err
}
