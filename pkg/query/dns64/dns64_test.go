package dns64

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// RFC 6052 §2.4's table: 192.0.2.33 in each prefix length.
func TestEmbedRFC6052(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.33")
	for _, tc := range []struct{ prefix, want string }{
		{"2001:db8::/32", "2001:db8:c000:221::"},
		{"2001:db8:100::/40", "2001:db8:1c0:2:21::"},
		{"2001:db8:122::/48", "2001:db8:122:c000:2:2100::"},
		{"2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"},
		{"2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"},
		{"2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"},
		{"64:ff9b::/96", "64:ff9b::c000:221"},
	} {
		p, err := ParsePrefix(tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := Embed(p, v4), netip.MustParseAddr(tc.want); got != want {
			t.Errorf("Embed(%s, %s) = %s, want %s", tc.prefix, v4, got, want)
		}
	}
}

func TestParsePrefixRejects(t *testing.T) {
	for _, s := range []string{"64:ff9b::/95", "64:ff9b::/128", "192.0.2.0/24", "::ffff:0:0/96", "nonsense", "64:ff9b::"} {
		if _, err := ParsePrefix(s); err == nil {
			t.Errorf("ParsePrefix(%q): no error", s)
		}
	}
	p, err := ParsePrefix("64:ff9b::1/96")
	if err != nil || p != netip.MustParsePrefix("64:ff9b::/96") {
		t.Errorf("ParsePrefix masks: %v %v", p, err)
	}
}

func TestApplies(t *testing.T) {
	d, _ := New(Config{})
	v6, v4, mapped := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("169.254.0.1"), netip.MustParseAddr("::ffff:169.254.0.1")
	for _, tc := range []struct {
		d      *DNS64
		client netip.Addr
		qtype  uint16
		qclass uint16
		want   bool
	}{
		{d, v6, dns.TypeAAAA, dns.ClassINET, true},
		{d, v4, dns.TypeAAAA, dns.ClassINET, false},
		{d, mapped, dns.TypeAAAA, dns.ClassINET, false},
		{d, v6, dns.TypeA, dns.ClassINET, false},
		{d, v6, dns.TypeAAAA, dns.ClassCHAOS, false},
		{&DNS64{allowIPv4: true}, v4, dns.TypeAAAA, dns.ClassINET, true},
	} {
		if got := tc.d.Applies(tc.client, "www.example.org.", tc.qtype, tc.qclass); got != tc.want {
			t.Errorf("Applies(%s, %d, %d) allowIPv4=%v = %v", tc.client, tc.qtype, tc.qclass, tc.d.allowIPv4, got)
		}
	}
}

// TestAppliesExcept: names of the Except zones (and below) are not
// translated, the rest are; the root zone and too many zones are refused.
func TestAppliesExcept(t *testing.T) {
	d, err := New(Config{Except: []string{"Other.Test", "b.example.org."}})
	if err != nil {
		t.Fatal(err)
	}
	v6 := netip.MustParseAddr("fd00::1")
	for name, want := range map[string]bool{"other.test.": false, "host.other.test.": false, "xother.test.": true,
		"b.example.org.": false, "a.b.example.org.": false, "example.org.": true, "web.ns.svc.cluster.local.": true} {
		if got := d.Applies(v6, name, dns.TypeAAAA, dns.ClassINET); got != want {
			t.Errorf("Applies(%s) = %v, want %v", name, got, want)
		}
	}
	if _, err := New(Config{Except: []string{"."}}); err == nil || !strings.Contains(err.Error(), `"."`) {
		t.Errorf("except .: %v, want an error naming it", err)
	}
	many := make([]string, MaxExcept+1)
	for i := range many {
		many[i] = fmt.Sprintf("z%d.test.", i)
	}
	if _, err := New(Config{Except: many}); err == nil {
		t.Errorf("%d except zones accepted", len(many))
	}
	if n := testing.AllocsPerRun(100, func() { d.Applies(v6, "host.other.test.", dns.TypeAAAA, dns.ClassINET) }); n != 0 {
		t.Errorf("Applies allocates %v times", n)
	}
}

func rr(s string) dns.RR {
	r, err := dns.NewRR(s)
	if err != nil {
		panic(err)
	}
	return r
}

func TestTranslate(t *testing.T) {
	soa := rr("example.com. 60 IN SOA ns.example.com. h.example.com. 1 2 3 4 30")
	aaaa := rr("x.example.com. 300 IN AAAA fd00::1")
	cname := rr("x.example.com. 300 IN CNAME y.example.com.")
	plain, _ := New(Config{})
	all, _ := New(Config{TranslateAll: true})
	for _, tc := range []struct {
		name    string
		m       *dns.Msg
		want    bool
		wantAll bool
	}{
		{"nodata", &dns.Msg{Ns: []dns.RR{soa}}, true, true},
		{"nxdomain", &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}}, false, false},
		{"nxdomain with a cname", &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Answer: []dns.RR{cname}}, true, true},
		{"aaaa", &dns.Msg{Answer: []dns.RR{aaaa}}, false, true},
		{"cname only", &dns.Msg{Answer: []dns.RR{cname}}, true, true},
		{"servfail", &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}}, true, true},
		{"refused", &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeRefused}}, true, true},
	} {
		if got := plain.Translate(tc.m); got != tc.want {
			t.Errorf("%s: Translate = %v, want %v", tc.name, got, tc.want)
		}
		if got := all.Translate(tc.m); got != tc.wantAll {
			t.Errorf("%s: translate_all: Translate = %v, want %v", tc.name, got, tc.wantAll)
		}
	}
}

func TestSynthesize(t *testing.T) {
	d, _ := New(Config{})
	soa := rr("example.com. 60 IN SOA ns.example.com. h.example.com. 1 2 3 4 30")
	nodata := &dns.Msg{Ns: []dns.RR{soa}}
	nsrr := rr("example.com. 100 IN NS ns.example.com.")
	glue := rr("ns.example.com. 100 IN A 169.254.0.9")
	a := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, RecursionAvailable: true, Truncated: true},
		Answer: []dns.RR{rr("x.example.com. 300 IN CNAME y.example.com."), rr("y.example.com. 30 IN A 169.254.1.2"), rr("y.example.com. 90 IN A 169.254.1.3")},
		Ns:     []dns.RR{nsrr}, Extra: []dns.RR{glue}}
	m := d.Synthesize(nodata, a)
	want := []string{
		"x.example.com.\t300\tIN\tCNAME\ty.example.com.",
		"y.example.com.\t30\tIN\tAAAA\t64:ff9b::a9fe:102",
		"y.example.com.\t60\tIN\tAAAA\t64:ff9b::a9fe:103",
	}
	if len(m.Answer) != len(want) {
		t.Fatalf("answer %v, want %v", m.Answer, want)
	}
	for i, w := range want {
		if got := m.Answer[i].String(); got != w {
			t.Errorf("answer %d: %s, want %s", i, got, w)
		}
	}
	if m.Authoritative || m.RecursionAvailable || !m.Truncated || m.Rcode != dns.RcodeSuccess {
		t.Errorf("header %+v: want not AA, not RA, TC from the A reply, NOERROR", m.MsgHdr)
	}
	if len(m.Ns) != 1 || m.Ns[0] != nsrr || len(m.Extra) != 1 || m.Extra[0] != glue {
		t.Errorf("authority %v additional %v: want the A reply's", m.Ns, m.Extra)
	}
	if a.Answer[1].Header().Rrtype != dns.TypeA {
		t.Error("the A reply was changed")
	}
	// No SOA in the AAAA reply: TTL at most 600.
	long := &dns.Msg{Answer: []dns.RR{rr("z.example.com. 3600 IN A 169.254.1.4")}}
	if m := d.Synthesize(&dns.Msg{}, long); m.Answer[0].Header().Ttl != 600 {
		t.Errorf("TTL %d without SOA: want 600", m.Answer[0].Header().Ttl)
	}
	// The A lookup's rcode is the reply's.
	nx := &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}}
	if m := d.Synthesize(nodata, nx); m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 {
		t.Errorf("A NXDOMAIN: rcode %d ns %v", m.Rcode, m.Ns)
	}
}
