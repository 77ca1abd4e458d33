package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/origin"
	"github.com/nodedns/nodedns/pkg/recovery"
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
			_, err := f.Exchange(context.Background(), testQuery("boom.example."))
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
	if _, err := f.Exchange(context.Background(), testQuery("boom.example.")); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
}

// TestClientShare: exchanges started for one client, or one namespace,
// stop at their share of MaxInflight; another client, and work on nobody's
// behalf, still get slots; the shares come back when the exchanges end.
func TestClientShare(t *testing.T) {
	f, err := New(Config{Servers: []string{"127.0.0.1:53"}, MaxInflight: 16, MaxClientInflight: 3, MaxNamespaceInflight: 5, Logger: quietLog})
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
	start := func(ctx context.Context, name string) error {
		// An admitted exchange blocks on the gate; a refused one returns
		// at once.
		res := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.Exchange(ctx, testQuery(name))
			res <- err
		}()
		select {
		case err := <-res:
			return err
		case <-time.After(50 * time.Millisecond):
			return nil
		}
	}
	pod := func(ip, ns string) context.Context {
		return origin.With(context.Background(), origin.Origin{Client: netip.MustParseAddr(ip), Namespace: ns})
	}
	for i := 0; i < 3; i++ {
		if err := start(pod("10.0.0.1", "a"), "p1-"+string(rune('a'+i))+".example."); err != nil {
			t.Fatalf("exchange %d within the client's share: %v", i, err)
		}
	}
	if err := start(pod("10.0.0.1", "a"), "p1-over.example."); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("past the client's share: %v, want ErrOverloaded", err)
	}
	// Same namespace, another pod: two more, then the namespace is full.
	for i := 0; i < 2; i++ {
		if err := start(pod("10.0.0.2", "a"), "p2-"+string(rune('a'+i))+".example."); err != nil {
			t.Fatalf("exchange %d within the namespace's share: %v", i, err)
		}
	}
	if err := start(pod("10.0.0.3", "a"), "p3.example."); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("past the namespace's share: %v, want ErrOverloaded", err)
	}
	// Another namespace, and background work, are not affected.
	if err := start(pod("10.0.0.4", "b"), "p4.example."); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
	if err := start(context.Background(), "prefetch.example."); err != nil {
		t.Fatalf("work on nobody's behalf: %v", err)
	}
	if f.ClientLimited() != 2 {
		t.Fatalf("client-limited %d, want 2", f.ClientLimited())
	}
	close(gate)
	wg.Wait()
	f.mu.Lock()
	left := len(f.byClient) + len(f.byNamespace) + len(f.sem)
	f.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d counts left with nothing in flight", left)
	}
	if err := start(pod("10.0.0.1", "a"), "p1-again.example."); err != nil {
		t.Fatalf("after the exchanges ended: %v", err)
	}
	wg.Wait()
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
