package zoneroute

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

type named string

func (n named) Resolve(ctx context.Context, q *dns.Msg) (*dns.Msg, bool, bool, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Ns = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{string(n)}}}
	return m, false, false, nil
}

func (n named) AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) ([]byte, int, bool) {
	return append(dst, n...), 0, true
}

func (n named) Peek(string, uint16, uint16, bool, bool) (*dns.Msg, bool) { return nil, n == "cluster" }

func TestRoutes(t *testing.T) {
	r, err := New([]string{"Cluster.Local", "in-addr.arpa.", "ip6.arpa"}, named("cluster"), named("default"))
	if err != nil {
		t.Fatal(err)
	}
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
		if got := string(r.For(name).(named)); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		m, _, _, _ := r.Resolve(context.Background(), q)
		if got := m.Ns[0].(*dns.TXT).Txt[0]; got != want {
			t.Errorf("Resolve %s: %s, want %s", name, got, want)
		}
	}
	// Resolve routes by the lower-cased name.
	q := new(dns.Msg)
	q.SetQuestion("WEB.NS.SVC.CLUSTER.LOCAL.", dns.TypeA)
	if m, _, _, _ := r.Resolve(context.Background(), q); m.Ns[0].(*dns.TXT).Txt[0] != "cluster" {
		t.Error("mixed case not routed to the zone")
	}
	if _, err := New([]string{"a..b"}, named("x"), named("y")); err == nil {
		t.Error("bad zone accepted")
	}
	// A stub domain inside a routed zone goes to the default backend;
	// one outside changes nothing.
	if err := r.SetExcept([]string{"10.In-Addr.Arpa", "corp.example"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"5.0.0.10.in-addr.arpa.":    "default",
		"10.in-addr.arpa.":          "default",
		"5.0.96.11.in-addr.arpa.":   "cluster",
		"web.ns.svc.cluster.local.": "cluster",
		"corp.example.":             "default",
	} {
		if got := string(r.For(name).(named)); got != want {
			t.Errorf("with stubs, %s: %s, want %s", name, got, want)
		}
	}
	if n := len(*r.except.Load()); n != 1 {
		t.Errorf("%d excepted zones kept, want 1 (the one inside a routed zone)", n)
	}
}

func TestAppendHitAllocs(t *testing.T) {
	r, _ := New([]string{"cluster.local", "in-addr.arpa", "ip6.arpa"}, named("c"), named("d"))
	dst := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		r.AppendHit(dst[:0], "www.example.com.", dns.TypeA, dns.ClassINET, false, false)
		r.AppendHit(dst[:0], "web.ns.svc.cluster.local.", dns.TypeA, dns.ClassINET, false, false)
	}); n != 0 {
		t.Fatalf("%.1f allocations", n)
	}
}
