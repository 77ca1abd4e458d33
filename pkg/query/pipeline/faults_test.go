package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Upstream fault storm: the real pipeline (server, cache,
// forwarder) in front of one misbehaving upstream and one healthy one.
// Every fault must give the client an answer within the budget: the
// healthy upstream's, a stale one, or SERVFAIL; the misbehaving upstream
// must be marked down; and once the storm is over the goroutines and the
// heap must come back to where they were.

// faultMode is what the bad upstream does.
type faultMode string

const (
	faultOK       faultMode = "ok"          // answers properly
	faultTimeout  faultMode = "timeout"     // reads and never answers
	faultServfail faultMode = "servfail"    // SERVFAIL
	faultRefused  faultMode = "refused"     // REFUSED
	faultTCClose  faultMode = "truncated"   // TC over UDP; TCP closed at once
	faultTCHang   faultMode = "tcp-silent"  // TC over UDP; TCP accepted, never answered
	faultWrongID  faultMode = "wrong-id"    // the right answer under another ID
	faultWrongQ   faultMode = "wrong-qname" // an answer for another name
	faultGarbage  faultMode = "garbage"     // random bytes
)

var stormModes = []faultMode{faultTimeout, faultServfail, faultRefused, faultTCClose, faultTCHang, faultWrongID, faultWrongQ, faultGarbage}

// badUpstream is a byte-scripted upstream whose fault can be switched.
type badUpstream struct {
	raw  *dnstest.Raw
	mode atomic.Value // faultMode
	// held are TCP connections accepted and never answered (tcp-silent);
	// each returns when the forwarder gives up and closes its side.
	held atomic.Int64
}

func newBadUpstream(t *testing.T) *badUpstream {
	b := &badUpstream{}
	b.mode.Store(faultOK)
	b.raw = dnstest.StartRaw(t, b.udp, b.tcp)
	return b
}

func (b *badUpstream) answer(pkt []byte) *dns.Msg {
	q := new(dns.Msg)
	if q.Unpack(pkt) != nil || len(q.Question) != 1 {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(q)
	if q.Question[0].Qtype == dns.TypeA {
		m.Answer = []dns.RR{dnstest.MustRRf("%s 1 IN A 192.0.2.66", q.Question[0].Name)}
	}
	return m
}

func (b *badUpstream) udp(pkt []byte, send func([]byte)) {
	m := b.answer(pkt)
	if m == nil {
		return
	}
	switch b.mode.Load().(faultMode) {
	case faultOK:
	case faultTimeout:
		return
	case faultServfail:
		m.Answer, m.Rcode = nil, dns.RcodeServerFailure
	case faultRefused:
		m.Answer, m.Rcode = nil, dns.RcodeRefused
	case faultTCClose, faultTCHang:
		m.Answer, m.Truncated = nil, true
	case faultWrongID:
		m.Id++
	case faultWrongQ:
		m.Question[0].Name = "evil.example."
		m.Answer = []dns.RR{dnstest.MustRRf("evil.example. 3600 IN A 192.0.2.99")}
	case faultGarbage:
		g := make([]byte, 1+rand.IntN(200))
		for i := range g {
			g[i] = byte(rand.Uint32())
		}
		send(g)
		return
	}
	send(dnstest.Pack(m))
}

func (b *badUpstream) tcp(c net.Conn) {
	// The fault is decided per query, not per connection: a connection
	// the forwarder pooled while the upstream behaved must misbehave too
	// once the mode changes (it answered every query otherwise, and a
	// storm under load saw answers where every upstream was to fail).
	misbehave := func() bool {
		switch b.mode.Load().(faultMode) {
		case faultTCClose:
			return true // closed at once by Raw
		case faultTCHang:
			b.held.Add(1)
			defer b.held.Add(-1)
			_, _ = io.Copy(io.Discard, c) // until the client closes
			return true
		}
		return false
	}
	for !misbehave() {
		q, err := dnstest.ReadTCP(c)
		if err != nil || misbehave() {
			return
		}
		m := b.answer(dnstest.Pack(q))
		if m == nil || dnstest.WriteTCP(c, m) != nil {
			return
		}
	}
}

// stormRig is the real pipeline in front of a bad and a good upstream
// (tried in that order).
type stormRig struct {
	bad         *badUpstream
	good        *dnstest.Server
	fwd         *upstream.Forwarder
	cache       *cache.Cache
	srv         *testAgent
	addr        string
	budget      time.Duration
	badS, goodS *upstream.Server
	// skew is how far the cache's clock runs ahead of real time: the
	// test lets TTLs pass by adding to it rather than by sleeping.
	skew atomic.Int64
}

func newStormRig(t *testing.T) *stormRig {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &stormRig{bad: newBadUpstream(t), good: dnstest.StartStable(t, dnstest.Zone(1)), budget: 1500 * time.Millisecond}
	var err error
	r.fwd, err = upstream.New(upstream.Config{Servers: []string{r.bad.raw.Addr, r.good.Addr}, Policy: upstream.Sequential,
		TryTimeout: 300 * time.Millisecond, Budget: r.budget, MaxFails: 2, ProbeInterval: 100 * time.Millisecond,
		ProbeTimeout: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.fwd.Servers() {
		if s.Addr == r.bad.raw.Addr {
			r.badS = s
		} else {
			r.goodS = s
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.fwd.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	origin := time.Now()
	r.cache, err = cache.New(cache.Config{Size: 2000, StaleAnswerAfter: 300 * time.Millisecond, StaleRetry: time.Second,
		PrefetchHits: -1, Logger: quiet,
		Clock: func() time.Duration { return time.Since(origin) + time.Duration(r.skew.Load()) }}, r.fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.cache.Close)
	r.srv, r.addr = start(t, Config{Resolver: r.cache, QueryTimeout: 2 * time.Second, Logger: quiet})
	return r
}

// ask sends n distinct queries at once and returns their rcodes; it fails
// the test for a query not answered within the client's patience (the
// budget plus a margin for a busy machine).
func (r *stormRig) ask(t *testing.T, names []string) []int {
	t.Helper()
	rcodes := make([]int, len(names))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Timeout: r.budget + 3*time.Second}
			m, _, err := c.Exchange(q(n, dns.TypeA), r.addr)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s: %v", n, err))
				mu.Unlock()
				rcodes[i] = -1
				return
			}
			rcodes[i] = m.Rcode
			if m.Rcode == dns.RcodeSuccess && (len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() == "192.0.2.99") {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s: bad answer %v", n, m.Answer))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d queries failed: %v", len(errs), len(names), errs[:min(len(errs), 5)])
	}
	return rcodes
}

// figures describes the rig's state for a failure message.
func (r *stormRig) figures() string {
	return fmt.Sprintf("server %+v; forwarder overloaded %d (client shares %d); bad %+v; good %+v",
		r.srv.Stats(), r.fwd.Overloaded(), r.fwd.ClientLimited(), r.badS.Stats(), r.goodS.Stats())
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d.example.test.", prefix, i)
	}
	return out
}

func count(rcodes []int, rc int) int {
	n := 0
	for _, r := range rcodes {
		if r == rc {
			n++
		}
	}
	return n
}

// storm runs every fault once. With the good upstream up, every query is
// answered NOERROR by it and the bad one is marked down by the probes its
// failures start (SERVFAIL and REFUSED are answers from a live server:
// they are passed over once, and never mark it down; health follows
// timeouts and network errors). With
// the good one stopped too, expired entries are answered stale and new
// names SERVFAIL, all within the budget.
func (r *stormRig) storm(t *testing.T, round int) {
	t.Helper()
	for _, mode := range stormModes {
		r.bad.mode.Store(faultOK)
		dnstest.WaitFor(t, 5*time.Second, "the health probes bringing the bad upstream back", func() bool { return !r.badS.Down() }) // probes bring it back
		r.bad.mode.Store(mode)
		rc := r.ask(t, names(fmt.Sprintf("r%d-%s", round, mode), 20))
		if n := count(rc, dns.RcodeSuccess); n != len(rc) {
			t.Fatalf("%s: %d of %d NOERROR with a healthy upstream: %v (%s)", mode, n, len(rc), rc, r.figures())
		}
		if mode == faultRefused || mode == faultServfail {
			if r.badS.Down() {
				t.Fatalf("%s: marked down", mode)
			}
		} else {
			// The failed exchanges started its probes: down once 3 failed.
			deadline := time.Now().Add(5 * time.Second)
			for !r.badS.Down() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if !r.badS.Down() {
				t.Fatalf("%s: bad upstream not marked down (%+v)", mode, r.badS.Stats())
			}
		}
		// Once down, it costs nothing: the healthy upstream answers at once.
		startQ := time.Now()
		r.ask(t, names(fmt.Sprintf("r%d-%s-after", round, mode), 5))
		t.Logf("round %d %s: down=%v, 5 queries after: %v", round, mode, r.badS.Down(), time.Since(startQ).Round(time.Millisecond))
	}

	// Everything fails: stale for what was cached, SERVFAIL for the rest.
	cached := names(fmt.Sprintf("r%d-cached", round), 10)
	r.bad.mode.Store(faultOK)
	if rc := r.ask(t, cached); count(rc, dns.RcodeSuccess) != len(rc) {
		t.Fatalf("warming: %v", rc)
	}
	r.skew.Add(int64(1100 * time.Millisecond)) // TTL 1 s: expired, still usable stale
	r.good.Stop()
	defer r.good.Restart(t)
	for _, mode := range []faultMode{faultTimeout, faultServfail, faultGarbage, faultTCHang} {
		r.bad.mode.Store(mode)
		startQ := time.Now()
		rc := r.ask(t, cached)
		if n := count(rc, dns.RcodeSuccess); n != len(rc) {
			t.Fatalf("all upstreams failing (%s): %d of %d cached names answered (stale): %v", mode, n, len(rc), rc)
		}
		rc = r.ask(t, names(fmt.Sprintf("r%d-%s-new", round, mode), 10))
		if n := count(rc, dns.RcodeServerFailure); n != len(rc) {
			t.Fatalf("all upstreams failing (%s): %d of %d new names SERVFAIL: %v (%s)", mode, n, len(rc), rc, r.figures())
		}
		t.Logf("round %d all failing (%s): stale and SERVFAIL in %v", round, mode, time.Since(startQ).Round(time.Millisecond))
	}
	r.bad.mode.Store(faultOK)
}

// TestUpstreamFaultStorm runs the storm three times: the first warms
// everything up, the measures are taken after it, and after two more
// rounds the goroutines and the heap must be back to those measures.
func TestUpstreamFaultStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("storm takes ~30 s")
	}
	r := newStormRig(t)
	r.storm(t, 0)
	goroutines, heap := settle(t, r, -1, 0)
	for round := 1; round <= 2; round++ {
		r.storm(t, round)
	}
	settle(t, r, goroutines, heap)
	if r.srv.Stats().Panics != 0 {
		t.Fatalf("%d panics", r.srv.Stats().Panics)
	}
}

// settle waits for the storm's leftovers to end (exchanges past their
// budget, held TCP connections, background refreshes) and returns the
// goroutine count and live heap. With a baseline given it fails unless
// the goroutines come back to it (+4) and the heap stays within 4 MiB of
// it (the cache grew by at most its 2000 entries of a few hundred bytes).
func settle(t *testing.T, r *stormRig, baseG int, baseHeap uint64) (int, uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var g int
	for {
		g = runtime.NumGoroutine()
		if r.bad.held.Load() == 0 && r.srv.Stats().InFlight == 0 && (baseG < 0 || g <= baseG+4) {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines %d (baseline %d), held TCP %d, in flight %d after 20 s:\n%s",
				g, baseG, r.bad.held.Load(), r.srv.Stats().InFlight, buf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("settled: %d goroutines (baseline %d), heap %d KiB (baseline %d KiB), cache %d entries",
		g, baseG, ms.HeapAlloc>>10, baseHeap>>10, r.cache.Len())
	if baseG >= 0 && ms.HeapAlloc > baseHeap+4<<20 {
		t.Fatalf("heap grew from %d KiB to %d KiB over the storm", baseHeap>>10, ms.HeapAlloc>>10)
	}
	return g, ms.HeapAlloc
}
