package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func testQuery(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	return m
}

// TestSharedExchangePanicRecovered: a panic in a shared exchange is
// recovered and counted; every caller waiting on it (the one that started
// it and those that joined) gets an error at once, and the slot and the
// flight are released.
func TestSharedExchangePanicRecovered(t *testing.T) {
	panics := new(recovery.Counter)
	f, err := New(Config{Servers: []string{"127.0.0.1:53"}, MaxInflight: 1, Panics: panics, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	f.run = func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		<-gate
		panic("bug in the exchange")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.Exchange(context.Background(), stage.Origin{}, testQuery("boom.example."))
			errs <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.Coalesced() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil || !strings.Contains(err.Error(), "panic") {
			t.Fatalf("caller got %v, want the panic as an error", err)
		}
	}
	if panics.Count() != 1 {
		t.Fatalf("%d panics counted, want 1", panics.Count())
	}
	// The slot (MaxInflight 1) and the flight are free again.
	f.run = func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		r := new(dns.Msg)
		r.SetReply(q)
		return r, nil
	}
	if _, err := f.Exchange(context.Background(), stage.Origin{}, testQuery("boom.example.")); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
}

// TestProbePanicRecovered: a panic while probing a server is recovered,
// counted and logged, and counts as a failed probe; it neither takes the
// process down nor stops the probes: the other server is brought back at
// once, and the one whose probe panicked once its probe works.
func TestProbePanicRecovered(t *testing.T) {
	a := dnstest.Start(t, dnstest.Zone(60))
	b := dnstest.Start(t, dnstest.Zone(60))
	panics := new(recovery.Counter)
	f, err := New(Config{Servers: []string{a.Addr, b.Addr}, MaxFails: 1, ProbeInterval: 10 * time.Millisecond, Panics: panics, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	left := 3 // the bad server's probe panics 3 times, then works
	var bad *Server
	f.probe = func(ctx context.Context, s *Server) error {
		if s == bad {
			mu.Lock()
			boom := left > 0
			left--
			mu.Unlock()
			if boom {
				panic("bug in the probe")
			}
		}
		return s.probe(ctx)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for f.runContext() == nil {
		time.Sleep(time.Millisecond)
	}
	for _, s := range f.Servers() {
		if s.Addr == a.Addr {
			bad = s
		}
	}
	for _, s := range f.Servers() {
		s.fail(errors.New("timed out"))
		f.healthcheck(s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for (bad.Down() || bad.probing.Load() || panics.Count() < 3) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, s := range f.Servers() {
		if s.Down() {
			t.Fatalf("server %s still down after the probe's panics (%d counted)", s.Addr, panics.Count())
		}
	}
	if n := panics.Count(); n != 3 {
		t.Fatalf("%d panics counted, want 3", n)
	}
	if n := bad.Stats().ProbeFailures; n != 3 {
		t.Fatalf("%d failed probes counted, want the 3 that panicked", n)
	}
}

// TestClientShare: exchanges started for one client stop at its share; a
// heavy client (lightInflight or more in flight) also stops at its
// namespace's share; only clients holding fewer than reserveInflight take
// the last eighth of the slots; a light client gets a slot while any is
// left, even in a full namespace; the counts go when the exchanges end.
func TestClientShare(t *testing.T) {
	f, err := New(Config{Servers: []string{"127.0.0.1:53"}, MaxInflight: 40, MaxClientInflight: 8, MaxNamespaceInflight: 10, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	f.run = func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		<-gate
		r := new(dns.Msg)
		r.SetReply(q)
		return r, nil
	}
	var wg sync.WaitGroup
	n := 0
	// ask starts count exchanges for o and returns how many were
	// admitted (an admitted one blocks on the gate; a refused one
	// returns ErrOverloaded at once).
	ask := func(o stage.Origin, count int) int {
		admitted := 0
		for i := 0; i < count; i++ {
			n++
			res := make(chan error, 1)
			wg.Add(1)
			go func(name string) {
				defer wg.Done()
				_, err := f.Exchange(context.Background(), o, testQuery(name))
				res <- err
			}(fmt.Sprintf("q%d.example.", n))
			select {
			case err := <-res:
				if !errors.Is(err, ErrOverloaded) {
					t.Fatalf("refused with %v, want ErrOverloaded", err)
				}
			case <-time.After(50 * time.Millisecond):
				admitted++
			}
		}
		return admitted
	}
	pod := func(ip, ns string) stage.Origin {
		return stage.Origin{Client: netip.MustParseAddr(ip), Namespace: ns}
	}
	steps := []struct {
		what        string
		o           stage.Origin
		ask, want   int
		inFlightNow int
	}{
		{"a pod up to its own share", pod("10.0.0.1", "a"), 10, 8, 8},
		{"a second pod of the full namespace: light, then heavy", pod("10.0.0.2", "a"), 10, 4, 12},
		{"a third pod of the full namespace: light", pod("10.0.0.3", "a"), 1, 1, 13},
		{"a pod of another namespace", pod("10.0.1.1", "b"), 10, 8, 21},
		{"and another", pod("10.0.2.1", "c"), 10, 8, 29},
		{"a pod stops at the reserve (40 - 5)", pod("10.0.3.1", "d"), 10, 6, 35},
		{"another pod gets two of the reserve", pod("10.0.4.1", "e"), 10, 2, 37},
		{"work on nobody's behalf, to the last slot", stage.Origin{}, 5, 3, 40},
		{"nothing left for anyone", pod("10.0.5.1", "f"), 1, 0, 40},
	}
	for _, st := range steps {
		if got := ask(st.o, st.ask); got != st.want {
			t.Fatalf("%s: %d of %d admitted, want %d", st.what, got, st.ask, st.want)
		}
		if l := len(f.sem); l != st.inFlightNow {
			t.Fatalf("%s: %d in flight, want %d", st.what, l, st.inFlightNow)
		}
	}
	close(gate)
	wg.Wait()
	f.mu.Lock()
	left := len(f.byClient) + len(f.byNamespace) + len(f.sem)
	f.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d counts left with nothing in flight", left)
	}
	if _, err := f.Exchange(context.Background(), pod("10.0.0.1", "a"), testQuery("after.example.")); err != nil {
		t.Fatalf("after the exchanges ended: %v", err)
	}
}

func TestMinimal(t *testing.T) {
	rr := func(s string) dns.RR {
		x, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	sig := func(owner string, covered uint16) dns.RR {
		return &dns.RRSIG{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeRRSIG, Class: dns.ClassINET, Ttl: 60}, TypeCovered: covered,
			SignerName: "example.", Signature: "AAAA"}
	}
	kept := func(m *dns.Msg) string {
		var out []string
		for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			var names []string
			for _, x := range sec {
				s := dns.TypeToString[x.Header().Rrtype]
				if sg, ok := x.(*dns.RRSIG); ok {
					s += "(" + dns.TypeToString[sg.TypeCovered] + ")"
				}
				names = append(names, s+" "+x.Header().Name)
			}
			out = append(out, strings.Join(names, ","))
		}
		return strings.Join(out, " | ")
	}
	cases := []struct {
		name  string
		qname string
		qtype uint16
		do    bool
		rcode int
		ans   []dns.RR
		ns    []dns.RR
		extra []dns.RR
		want  string
	}{
		{name: "plain answer with glue and NS", qname: "a.example.", qtype: dns.TypeA,
			ans:   []dns.RR{rr("a.example. 60 IN A 192.0.2.1"), rr("a.example. 60 IN A 192.0.2.2")},
			ns:    []dns.RR{rr("example. 60 IN NS ns.example.")},
			extra: []dns.RR{rr("ns.example. 60 IN A 192.0.2.53")},
			want:  "A a.example.,A a.example. |  | "},
		{name: "DNAME with synthesized CNAME", qname: "www.old.example.", qtype: dns.TypeA,
			ans: []dns.RR{rr("old.example. 60 IN DNAME new.example."), rr("www.old.example. 60 IN CNAME www.new.example."),
				rr("www.new.example. 60 IN A 192.0.2.9"), rr("other.new.example. 60 IN A 192.0.2.10")},
			want: "DNAME old.example.,CNAME www.old.example.,A www.new.example. |  | "},
		{name: "DNAME without CNAME", qname: "www.old.example.", qtype: dns.TypeA,
			ans:  []dns.RR{rr("old.example. 60 IN DNAME new.example."), rr("www.new.example. 60 IN A 192.0.2.9")},
			want: "DNAME old.example.,A www.new.example. |  | "},
		{name: "CNAME asked for", qname: "c.example.", qtype: dns.TypeCNAME,
			ans:  []dns.RR{rr("c.example. 60 IN CNAME d.example."), rr("d.example. 60 IN A 192.0.2.4")},
			want: "CNAME c.example. |  | "},
		{name: "CNAME loop", qname: "x.example.", qtype: dns.TypeA,
			ans:  []dns.RR{rr("x.example. 60 IN CNAME y.example."), rr("y.example. 60 IN CNAME x.example.")},
			want: "CNAME x.example.,CNAME y.example. |  | "},
		{name: "DNSSEC positive", qname: "s.example.", qtype: dns.TypeA, do: true,
			ans:  []dns.RR{rr("s.example. 60 IN A 192.0.2.5"), sig("s.example.", dns.TypeA), sig("t.example.", dns.TypeA)},
			ns:   []dns.RR{rr("*.example. 60 IN NSEC z.example. A RRSIG NSEC"), sig("*.example.", dns.TypeNSEC)},
			want: "A s.example.,RRSIG(A) s.example. | NSEC *.example.,RRSIG(NSEC) *.example. | "},
		{name: "DNSSEC records without DO", qname: "s.example.", qtype: dns.TypeA,
			ans:  []dns.RR{rr("s.example. 60 IN A 192.0.2.5")},
			ns:   []dns.RR{rr("*.example. 60 IN NSEC z.example. A RRSIG NSEC")},
			want: "A s.example. |  | "},
		{name: "NODATA keeps the zone's SOA and its signature", qname: "n.example.", qtype: dns.TypeAAAA, do: true,
			ans: []dns.RR{rr("n.example. 60 IN A 192.0.2.6")},
			ns: []dns.RR{rr("example. 60 IN SOA ns.example. h.example. 1 2 3 4 60"), sig("example.", dns.TypeSOA),
				rr("evil. 60 IN SOA ns.evil. h.evil. 1 2 3 4 60"), rr("example. 60 IN NS ns.example.")},
			want: " | SOA example.,RRSIG(SOA) example. | "},
		{name: "positive answer drops the SOA", qname: "p.example.", qtype: dns.TypeA,
			ans:  []dns.RR{rr("p.example. 60 IN A 192.0.2.7")},
			ns:   []dns.RR{rr("example. 60 IN SOA ns.example. h.example. 1 2 3 4 60")},
			want: "A p.example. |  | "},
		{name: "NXDOMAIN", qname: "nx.example.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			ns:   []dns.RR{rr("example. 60 IN SOA ns.example. h.example. 1 2 3 4 60")},
			want: " | SOA example. | "},
		{name: "answer for another name only", qname: "q.example.", qtype: dns.TypeA,
			ans:  []dns.RR{rr("bank.example. 60 IN A 198.51.100.1")},
			want: " |  | "},
	}
	for _, c := range cases {
		q := testQuery(c.qname)
		q.Question[0].Qtype = c.qtype
		q.SetEdns0(1232, c.do)
		r := new(dns.Msg)
		r.SetRcode(q, c.rcode)
		r.Answer, r.Ns, r.Extra = c.ans, c.ns, append(c.extra, &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}})
		got := kept(minimal(q, r))
		want := c.want + "OPT ."
		if got != want {
			t.Errorf("%s:\n got  %s\n want %s", c.name, got, want)
		}
	}
}
