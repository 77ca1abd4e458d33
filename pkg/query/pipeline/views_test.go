package pipeline

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/view"
)

func mustView(t testing.TB, expr string) *view.Expr {
	t.Helper()
	e, err := view.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// resolvedBy asks p name from client and returns the name of the
// resolver that answered (the TXT of named).
func resolvedBy(t *testing.T, p *Pipeline, client, name string, qtype uint16) string {
	t.Helper()
	r := new(server.Request)
	r.Read("udp", 0, netip.MustParseAddr(client), time.Now(), packet(t, name, qtype, false))
	if _, v := p.Answer(nil, r); v != server.Wait {
		t.Fatalf("%s from %s: verdict %d, want Wait", name, client, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m := new(dns.Msg)
	if err := m.Unpack(p.Resolve(ctx, nil, r)); err != nil {
		t.Fatal(err)
	}
	if len(m.Ns) != 1 {
		return "none"
	}
	return m.Ns[0].(*dns.TXT).Txt[0]
}

// TestViews: split horizon as CoreDNS serves it: the most specific zone
// first, of a zone's views the first that holds, a block without a view
// of a more specific zone before a view of a less specific one, the
// default for the rest; decided by the question as asked.
func TestViews(t *testing.T) {
	p, err := New(Config{Resolver: named("default"),
		Views: []View{
			{Name: "lan-corp", Zones: []string{"corp.example."}, Cond: mustView(t, `incidr(client_ip(), '127.0.1.0/24')`), Resolver: named("lan-corp")},
			{Name: "lan", Zones: []string{"."}, Cond: mustView(t, `incidr(client_ip(), '127.0.1.0/24')`), Resolver: named("lan")},
			{Name: "also-lan", Zones: []string{"."}, Cond: mustView(t, `incidr(client_ip(), '127.0.0.0/8')`), Resolver: named("also-lan")},
			{Name: "aaaa", Zones: []string{"corp.example."}, Cond: mustView(t, `type() == 'AAAA'`), Resolver: named("aaaa")},
		},
		PlainZones: []string{"stub.corp.example", "other.example"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		client, name string
		qtype        uint16
		want         string
	}{
		{"127.0.1.5", "www.corp.example.", dns.TypeA, "lan-corp"},
		{"127.0.1.5", "WWW.Corp.Example.", dns.TypeAAAA, "lan-corp"}, // first of the zone's views
		{"127.0.2.5", "www.corp.example.", dns.TypeAAAA, "aaaa"},
		{"127.0.2.5", "www.corp.example.", dns.TypeA, "also-lan"}, // no view of corp.example holds: the root's
		{"127.0.1.5", "www.example.com.", dns.TypeA, "lan"},       // the first root view that holds
		{"127.0.2.5", "www.example.com.", dns.TypeA, "also-lan"},
		{"192.0.2.1", "www.example.com.", dns.TypeA, "default"},
		{"127.0.1.5", "x.stub.corp.example.", dns.TypeA, "default"}, // a block without a view, more specific
		{"127.0.1.5", "x.other.example.", dns.TypeA, "default"},
	} {
		if got := resolvedBy(t, p, c.client, c.name, c.qtype); got != c.want {
			t.Errorf("%s %s from %s: resolved by %s, want %s", c.name, dns.TypeToString[c.qtype], c.client, got, c.want)
		}
	}
	for _, bad := range [][]View{{{Name: "x", Zones: []string{"."}, Resolver: named("x")}}, {{Name: "x", Zones: []string{"bad..zone"}, Cond: mustView(t, "true"), Resolver: named("x")}}} {
		if _, err := New(Config{Resolver: named("default"), Views: bad}); err == nil {
			t.Errorf("views %+v accepted", bad)
		}
	}
}

// withViews configures two views of the root zone, one by client
// network and type, the other by name, neither holding for the hot-path
// questions (the client is 127.0.0.1): each query pays their conditions.
func withViews(tb testing.TB) func(*Config) {
	vs := []View{
		{Name: "lan", Zones: []string{"."}, Cond: mustView(tb, `incidr(client_ip(), '10.0.0.0/8') && type() in ['A', 'AAAA']`), Resolver: named("lan")},
		{Name: "names", Zones: []string{"."}, Cond: mustView(tb, `name() matches '^abc[.].*[.]example[.]com[.]$'`), Resolver: named("names")},
	}
	return func(c *Config) { c.Views = vs }
}

// TestViewsHotPath: a view's cache hit is answered on the reader at no
// allocation, the condition included; the default's too.
func TestViewsHotPath(t *testing.T) {
	own, err := cache.New(cache.Config{Size: 100}, noUpstream{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	r := new(dns.Msg)
	r.SetQuestion("www.example.test.", dns.TypeA)
	r.Response = true
	r.Answer = []dns.RR{dnstest.MustRRf("www.example.test. 300 IN A 192.0.2.99")}
	own.Put(cache.KeyOf(r), r)
	s := hotServer(t, func(c *Config) {
		c.Views = []View{{Name: "lan", Zones: []string{"."}, Cond: mustView(t, `incidr(client_ip(), '127.0.0.0/8') && type() in ['A', 'AAAA']`), Resolver: own}}
	})
	out := make([]byte, 0, 4096)
	pkt := packet(t, "www.example.test.", dns.TypeA, true)
	reply, v := serveOnce(s, pkt, out)
	if v != server.Reply {
		t.Fatalf("verdict %d", v)
	}
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.99" {
		t.Fatalf("reply %v (%v), want the view's cached answer", m, err)
	}
	if n := testing.AllocsPerRun(200, func() { serveOnce(s, pkt, out) }); n != 0 {
		t.Errorf("view's cache hit: %.1f allocations per query", n)
	}
	// MX is no view's: the default cache (a miss here: Wait).
	if _, v := serveOnce(s, packet(t, "www.example.test.", dns.TypeMX, true), out); v != server.Wait {
		t.Errorf("MX: verdict %d, want Wait (the default cache has no MX)", v)
	}
}
