package dnswire

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/internal/dnstest"
)

// addrs renders a section's records as "name type addr" lines.
func render(rrs []dns.RR) string {
	var out []string
	for _, r := range rrs {
		switch v := r.(type) {
		case *dns.A:
			out = append(out, v.Hdr.Name+" A "+v.A.String())
		case *dns.AAAA:
			out = append(out, v.Hdr.Name+" AAAA "+v.AAAA.String())
		default:
			out = append(out, v.Header().Name+" "+dns.TypeToString[v.Header().Rrtype])
		}
	}
	return strings.Join(out, "|")
}

func TestRotateAddrs(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.", dns.TypeA)
	m.Compress = true
	m.Answer = []dns.RR{
		dnstest.MustRR("www.example. 60 IN CNAME lb.example."),
		dnstest.MustRR("lb.example. 60 IN A 192.0.2.1"),
		dnstest.MustRR("lb.example. 60 IN A 192.0.2.2"),
		dnstest.MustRR("lb.example. 60 IN A 192.0.2.3"),
		dnstest.MustRR("LB.example. 60 IN AAAA 2001:db8::1"),
		dnstest.MustRR("lb.example. 60 IN AAAA 2001:db8::2"),
		dnstest.MustRR("other.example. 60 IN A 198.51.100.1"),
		dnstest.MustRR("other.example. 60 IN A 198.51.100.2"),
	}
	m.Extra = []dns.RR{dnstest.MustRR("lb.example. 60 IN A 192.0.2.9"), dnstest.MustRR("ns.example. 60 IN A 192.0.2.53")}
	wire, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		k     uint32
		ans   string
		extra string
	}{
		{0, "www.example. CNAME|lb.example. A 192.0.2.1|lb.example. A 192.0.2.2|lb.example. A 192.0.2.3|lb.example. AAAA 2001:db8::1|lb.example. AAAA 2001:db8::2|other.example. A 198.51.100.1|other.example. A 198.51.100.2", ""},
		{1, "www.example. CNAME|lb.example. A 192.0.2.2|lb.example. A 192.0.2.3|lb.example. A 192.0.2.1|lb.example. AAAA 2001:db8::2|lb.example. AAAA 2001:db8::1|other.example. A 198.51.100.2|other.example. A 198.51.100.1", ""},
		{2, "www.example. CNAME|lb.example. A 192.0.2.3|lb.example. A 192.0.2.1|lb.example. A 192.0.2.2|lb.example. AAAA 2001:db8::1|lb.example. AAAA 2001:db8::2|other.example. A 198.51.100.1|other.example. A 198.51.100.2", ""},
		{4, "www.example. CNAME|lb.example. A 192.0.2.2|lb.example. A 192.0.2.3|lb.example. A 192.0.2.1|lb.example. AAAA 2001:db8::1|lb.example. AAAA 2001:db8::2|other.example. A 198.51.100.1|other.example. A 198.51.100.2", ""},
	}
	for _, c := range cases {
		b := append([]byte(nil), wire...)
		RotateAddrs(b, c.k)
		out := new(dns.Msg)
		if err := out.Unpack(b); err != nil {
			t.Fatalf("k=%d: rotated message does not unpack: %v", c.k, err)
		}
		// Owner names come back lower-case from the render of miekg.
		got := strings.ReplaceAll(render(out.Answer), "LB.example.", "lb.example.")
		if got != c.ans {
			t.Errorf("k=%d:\n got %s\nwant %s", c.k, got, c.ans)
		}
		// The additional section's lb.example is an RRset of its own (one
		// record) and stays; TTLs and the question are untouched.
		if render(out.Extra) != "lb.example. A 192.0.2.9|ns.example. A 192.0.2.53" || out.Answer[1].Header().Ttl != 60 ||
			out.Question[0].Name != "www.example." {
			t.Errorf("k=%d: extra %s", c.k, render(out.Extra))
		}
	}
}

// TestRotateAddrsFullNames: the first record of a run holds the full owner
// name and the others point at it; rotating the addresses keeps that
// valid, and a run of distinct names is several runs.
func TestRotateAddrsFullNames(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("x.example.", dns.TypeSRV)
	m.Compress = true
	m.Answer = []dns.RR{dnstest.MustRR("x.example. 5 IN SRV 0 50 80 a.x.example."), dnstest.MustRR("x.example. 5 IN SRV 0 50 80 b.x.example.")}
	m.Extra = []dns.RR{dnstest.MustRR("a.x.example. 5 IN A 10.0.0.1"), dnstest.MustRR("b.x.example. 5 IN A 10.0.0.2"),
		dnstest.MustRR("c.example. 5 IN AAAA 2001:db8::1"), dnstest.MustRR("c.example. 5 IN AAAA 2001:db8::2")}
	wire, _ := m.Pack()
	RotateAddrs(wire, 1)
	out := new(dns.Msg)
	if err := out.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	if got := render(out.Extra); got != "a.x.example. A 10.0.0.1|b.x.example. A 10.0.0.2|c.example. AAAA 2001:db8::2|c.example. AAAA 2001:db8::1" {
		t.Fatalf("extra: %s", got)
	}
}

func TestRotateAddrsAllocs(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("lb.example.", dns.TypeA)
	for i := 1; i <= 8; i++ {
		m.Answer = append(m.Answer, dnstest.MustRR("lb.example. 60 IN A 192.0.2."+string(rune('0'+i))))
	}
	wire, _ := m.Pack()
	k := uint32(0)
	if n := testing.AllocsPerRun(200, func() { k++; RotateAddrs(wire, k) }); n != 0 {
		t.Fatalf("%.1f allocations", n)
	}
}

func FuzzRotateAddrs(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("lb.example.", dns.TypeA)
	m.Answer = []dns.RR{dnstest.MustRR("lb.example. 60 IN A 192.0.2.1"), dnstest.MustRR("lb.example. 60 IN A 192.0.2.2")}
	w, _ := m.Pack()
	f.Add(w, uint32(1))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0xC0, 12, 0, 1}, uint32(3))
	f.Fuzz(func(t *testing.T, b []byte, k uint32) {
		before := new(dns.Msg)
		ok := before.Unpack(b) == nil
		RotateAddrs(b, k) // must not panic or loop
		if !ok {
			return
		}
		after := new(dns.Msg)
		if err := after.Unpack(b); err != nil {
			t.Fatalf("a message that unpacked no longer does: %v", err)
		}
		if len(after.Answer) != len(before.Answer) || len(after.Extra) != len(before.Extra) {
			t.Fatal("record counts changed")
		}
	})
}
