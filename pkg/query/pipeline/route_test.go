package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// named is a Resolver that answers every query with its own name in a TXT
// record of the authority section, and has nothing cached.
type named string

func (n named) Resolve(_ context.Context, _ stage.Origin, q *dns.Msg) (stage.Result, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Ns = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{string(n)}}}
	return stage.Result{Msg: m, Source: stage.SourceUpstream}, nil
}

func (n named) AppendHit(dst []byte, _ string, _, _ uint16, _, _ bool) ([]byte, int, bool) {
	return dst, 0, false
}

func (n named) AppendHitRef(dst []byte, _ string, _, _ uint16, _, _ bool) ([]byte, int, stage.StoredHit, bool) {
	return dst, 0, nil, false
}

func routed(t *testing.T) *Pipeline {
	t.Helper()
	p, err := New(Config{Resolver: named("default"), Route: &Route{Zones: []string{"Cluster.Local", "in-addr.arpa.", "ip6.arpa"}, Resolver: named("cluster")}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoutes(t *testing.T) {
	p := routed(t)
	for name, want := range map[string]string{
		"cluster.local.":                  "cluster",
		"web.ns.svc.cluster.local.":       "cluster",
		"10.0.96.10.in-addr.arpa.":        "cluster",
		"in-addr.arpa.":                   "cluster",
		"notcluster.local.":               "default",
		"cluster.local.example.com.":      "default",
		"example.com.":                    "default",
		"1.0.0.0.ip6.arpa.":               "cluster",
		"x-in-addr.arpa.":                 "default",
		"www.example.com.in-addr.arpa.x.": "default",
	} {
		if got := string(p.resolver(&call{}, name).(named)); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	// A query is routed by its lower-cased name, off the reader.
	r := new(server.Request)
	r.Read("udp", 0, client, time.Now(), packet(t, "WEB.NS.SVC.CLUSTER.LOCAL.", dns.TypeA, false))
	if _, v := p.Answer(nil, r); v != server.Wait {
		t.Fatalf("verdict %d, want Wait", v)
	}
	m := new(dns.Msg)
	if err := m.Unpack(p.Resolve(context.Background(), nil, r)); err != nil || len(m.Ns) != 1 || m.Ns[0].(*dns.TXT).Txt[0] != "cluster" {
		t.Errorf("mixed case not routed to the zone: %v (%v)", m, err)
	}
	if _, err := New(Config{Resolver: named("y"), Route: &Route{Zones: []string{"a..b"}, Resolver: named("x")}}); err == nil {
		t.Error("bad zone accepted")
	}
	// A stub domain inside a routed zone goes to the default resolver;
	// one outside changes nothing.
	if err := p.SetRouteExcept([]string{"10.In-Addr.Arpa", "corp.example"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"5.0.0.10.in-addr.arpa.":    "default",
		"10.in-addr.arpa.":          "default",
		"5.0.96.11.in-addr.arpa.":   "cluster",
		"web.ns.svc.cluster.local.": "cluster",
		"corp.example.":             "default",
	} {
		if got := string(p.resolver(&call{}, name).(named)); got != want {
			t.Errorf("with stubs, %s: %s, want %s", name, got, want)
		}
	}
	if n := len(*p.route.except.Load()); n != 1 {
		t.Errorf("%d excepted zones kept, want 1 (the one inside a routed zone)", n)
	}
}

// TestRouteAllocs: choosing the resolver allocates nothing, so cache hits
// on either side stay on the zero-allocation path.
func TestRouteAllocs(t *testing.T) {
	p := routed(t)
	if n := testing.AllocsPerRun(100, func() {
		p.resolver(&call{}, "www.example.com.")
		p.resolver(&call{}, "web.ns.svc.cluster.local.")
	}); n != 0 {
		t.Fatalf("%.1f allocations", n)
	}
}
