package dnswire_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

func TestReadTTL(t *testing.T) {
	for _, tc := range []struct{ in, want uint32 }{
		{0, 0},
		{1, 1},
		{3600, 3600},
		{1<<31 - 1, 1<<31 - 1}, // the high bit is the rule, not a cap
		{1 << 31, 0},
		{1<<31 + 1, 0},
		{4000000000, 0},
		{1<<32 - 1, 0},
	} {
		if got := dnswire.ReadTTL(tc.in); got != tc.want {
			t.Errorf("ReadTTL(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// ZeroHugeTTLs zeroes TTLs and SOA MINIMUMs of 2^31 or more in every
// section, leaves smaller ones as they are, and never touches the OPT
// record's TTL field (extended rcode, version, DO and Z), not even when its
// top bit is set (an extended rcode of 128 or more), nor when an OPT turns
// up outside the additional section.
func TestZeroHugeTTLs(t *testing.T) {
	opt := func(ttl uint32) *dns.OPT {
		return &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 1232, Ttl: ttl}}
	}
	const big = 1<<31 - 1
	// Extended rcode 0xFF, version 0, DO: the top bit set, and no TTL.
	const optFlags = 0xFF<<24 | 0x8000
	m := &dns.Msg{
		Answer: []dns.RR{
			dnstest.MustRR("a.example. 2147483648 IN A 192.0.2.1"),
			dnstest.MustRR("a.example. 4294967295 IN A 192.0.2.2"),
			dnstest.MustRR("a.example. 2147483647 IN A 192.0.2.3"),
			dnstest.MustRR("a.example. 300 IN A 192.0.2.4"),
			opt(optFlags), // where no OPT belongs: still no TTL
		},
		Ns: []dns.RR{
			dnstest.MustRR("example. 2147483648 IN SOA ns.example. h.example. 1 2 3 4 4294967295"),
			dnstest.MustRR("example. 60 IN SOA ns.example. h.example. 1 2 3 4 2147483647"),
		},
		Extra: []dns.RR{
			dnstest.MustRR("ns.example. 3000000000 IN A 192.0.2.53"),
			opt(optFlags),
		},
	}
	dnswire.ZeroHugeTTLs(m)

	ttls := func(rrs []dns.RR) []uint32 {
		var out []uint32
		for _, r := range rrs {
			out = append(out, r.Header().Ttl)
		}
		return out
	}
	check := func(sec string, got, want []uint32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: TTLs %v, want %v", sec, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: TTLs %v, want %v", sec, got, want)
				return
			}
		}
	}
	check("answer", ttls(m.Answer), []uint32{0, 0, big, 300, optFlags})
	check("authority", ttls(m.Ns), []uint32{0, 60})
	check("additional", ttls(m.Extra), []uint32{0, optFlags})
	if got := []uint32{m.Ns[0].(*dns.SOA).Minttl, m.Ns[1].(*dns.SOA).Minttl}; got[0] != 0 || got[1] != big {
		t.Errorf("SOA MINIMUMs %v, want [0 %d]", got, big)
	}
	o := m.IsEdns0()
	if o == nil || o.ExtendedRcode() != 0xFF<<4 || !o.Do() || o.Version() != 0 {
		t.Errorf("OPT after ZeroHugeTTLs: %v; want extended rcode %d, DO, version 0 as before", o, 0xFF<<4)
	}
}
