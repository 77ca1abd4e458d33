package dnsname

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestInZone(t *testing.T) {
	for _, c := range []struct {
		name, zone string
		want       bool
	}{
		{"a.example.", "example.", true},
		{"example.", "example.", true},
		{"b.a.example.", "example.", true},
		{"aexample.", "example.", false},
		{"example.", "a.example.", false},
		{"com.", "example.com.", false},
		{"a.example.", ".", true},
		{".", ".", true},
		{".", "example.", false},
		{"svc.cluster.local.", "cluster.local.", true},
		{"cluster.local.", "svc.cluster.local.", false},
		{"4.3.2.1.in-addr.arpa.", ReverseV4, true},
		{"4.3.2.1.in-addr.arpa.", ReverseV6, false},
	} {
		if got := InZone(c.name, c.zone); got != c.want {
			t.Errorf("InZone(%q, %q) = %v, want %v", c.name, c.zone, got, c.want)
		}
	}
}

func TestInZones(t *testing.T) {
	zones := []string{"example.", "cluster.local."}
	for name, want := range map[string]bool{
		"a.example.": true, "a.svc.cluster.local.": true, "local.": false, "example.org.": false,
	} {
		if got := InZones(name, zones); got != want {
			t.Errorf("InZones(%q, %q) = %v, want %v", name, zones, got, want)
		}
	}
	if InZones("a.example.", nil) {
		t.Errorf("InZones with no zones is true")
	}
	if !InZones("a.example.", []string{"."}) {
		t.Errorf("InZones under the root is false")
	}
}

func TestIsReverse(t *testing.T) {
	for z, want := range map[string]bool{
		"in-addr.arpa.": true, "10.in-addr.arpa.": true, "ip6.arpa.": true, "d.f.ip6.arpa.": true,
		"IN-ADDR.ARPA.": true, "arpa.": false, ".": false, "example.": false, "xin-addr.arpa.": false,
	} {
		if got := IsReverse(z); got != want {
			t.Errorf("IsReverse(%q) = %v, want %v", z, got, want)
		}
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM": "example.com.", "example.com.": "example.com.", ".": ".", "": ".",
	} {
		if got := Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOctet(t *testing.T) {
	for s, want := range map[string]int{
		"0": 0, "7": 7, "10": 10, "99": 99, "100": 100, "255": 255,
		"": -1, "256": -1, "999": -1, "00": -1, "01": -1, "010": -1, "1000": -1, "-1": -1, "1a": -1, " 1": -1,
	} {
		v, ok := Octet(s)
		got := int(v)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("Octet(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestParseReverse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // "" for not an address
	}{
		{"4.3.2.1.in-addr.arpa.", "1.2.3.4"},
		{"255.0.0.10.in-addr.arpa.", "10.0.0.255"},
		{"0.0.0.0.in-addr.arpa.", "0.0.0.0"},
		{"255.255.255.255.in-addr.arpa.", "255.255.255.255"},
		{"in-addr.arpa.", ""},
		{"1.in-addr.arpa.", ""},
		{"3.2.1.in-addr.arpa.", ""},
		{"5.4.3.2.1.in-addr.arpa.", ""},
		{"04.3.2.1.in-addr.arpa.", ""},
		{"256.3.2.1.in-addr.arpa.", ""},
		{"1000.3.2.1.in-addr.arpa.", ""},
		{"x.3.2.1.in-addr.arpa.", ""},
		{".3.2.1.in-addr.arpa.", ""},
		{"4.3..1.in-addr.arpa.", ""},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", "2001:db8::1"},
		{"a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.0.0.d.f.ip6.arpa.", "fd00:10::a"},
		// An IPv4-mapped name is an IPv6 address: unmapping is the caller's.
		{"4.0.3.0.2.0.1.0.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", "::ffff:1.2.3.4"},
		{"1.0.0.0.ip6.arpa.", ""},
		{"ip6.arpa.", ""},
		{"g.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", ""},
		{"A.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", ""},
		{"10.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", ""},
		{"example.com.", ""},
		{"", ""},
	} {
		a, ok := ParseReverse(c.in)
		got := ""
		if ok {
			got = a.String()
		}
		if got != c.want {
			t.Errorf("ParseReverse(%q) = %q, want %q", c.in, got, c.want)
		}
		if !ok {
			continue
		}
		if r := reverseName(a, a.BitLen()); r != c.in {
			t.Errorf("%s does not round-trip: %s", c.in, r)
		}
		if !a.Is4In6() {
			if r, _ := dns.ReverseAddr(a.String()); r != c.in {
				t.Errorf("%s: miekg/dns spells %s as %s", c.in, a, r)
			}
		}
	}
}

func TestReverseZones(t *testing.T) {
	for p, want := range map[string][]string{
		"10.0.0.0/8":         {"10.in-addr.arpa."},
		"10.96.0.0/16":       {"96.10.in-addr.arpa."},
		"192.168.1.0/24":     {"1.168.192.in-addr.arpa."},
		"1.2.3.4/32":         {"4.3.2.1.in-addr.arpa."},
		"172.16.0.0/14":      {"16.172.in-addr.arpa.", "17.172.in-addr.arpa.", "18.172.in-addr.arpa.", "19.172.in-addr.arpa."},
		"10.255.0.0/15":      {"254.10.in-addr.arpa.", "255.10.in-addr.arpa."},
		"10.0.0.0/15":        {"0.10.in-addr.arpa.", "1.10.in-addr.arpa."},
		"10.1.2.3/24":        {"2.1.10.in-addr.arpa."},
		"255.255.255.254/31": {"254.255.255.255.in-addr.arpa.", "255.255.255.255.in-addr.arpa."},
		"0.0.0.0/0":          {"in-addr.arpa."},
		"fd00::/8":           {"d.f.ip6.arpa."},
		"fc00::/7":           {"c.f.ip6.arpa.", "d.f.ip6.arpa."},
		"2001:db8::/32":      {"8.b.d.0.1.0.0.2.ip6.arpa."},
		"2001:db8::/30":      {"8.b.d.0.1.0.0.2.ip6.arpa.", "9.b.d.0.1.0.0.2.ip6.arpa.", "a.b.d.0.1.0.0.2.ip6.arpa.", "b.b.d.0.1.0.0.2.ip6.arpa."},
		"::/0":               {"ip6.arpa."},
		"::1/128":            {"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa."},
	} {
		if got := ReverseZones(netip.MustParsePrefix(p)); !slices.Equal(got, want) {
			t.Errorf("ReverseZones(%s) = %q, want %q", p, got, want)
		}
	}
	// Half the IPv4 space: 128 zones, 128.in-addr.arpa. to 255.in-addr.arpa.
	got := ReverseZones(netip.MustParsePrefix("128.0.0.0/1"))
	if len(got) != 128 || got[0] != "128.in-addr.arpa." || got[127] != "255.in-addr.arpa." {
		t.Errorf("ReverseZones(128.0.0.0/1) = %q", got)
	}
}

// The query path calls these on every question.
func TestAllocs(t *testing.T) {
	names := []string{"4.3.2.1.in-addr.arpa.",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", "a.svc.cluster.local."}
	zones := []string{"example.", "cluster.local."}
	hits := 0
	if n := testing.AllocsPerRun(100, func() {
		for _, name := range names {
			if _, ok := ParseReverse(name); ok {
				hits++
			}
			if InZone(name, "cluster.local.") {
				hits++
			}
			if InZones(name, zones) {
				hits++
			}
		}
	}); n != 0 {
		t.Errorf("%.1f allocations", n)
	}
	if hits == 0 {
		t.Errorf("nothing matched")
	}
}

// canonical reports whether s is a lower-case FQDN without escapes or
// empty labels: the names InZone is for.
func canonical(s string) bool {
	_, ok := dns.IsDomainName(s)
	return ok && dns.IsFqdn(s) && s == strings.ToLower(s) && !strings.ContainsAny(s, `\`) && (s == "." || !strings.Contains(s, ".."))
}

func FuzzInZone(f *testing.F) {
	for _, s := range [][2]string{{"a.example.", "example."}, {"aexample.", "example."}, {".", "."}, {"a.b.", "."}, {"example.", "a.example."}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, zone string) {
		got := InZone(name, zone)
		if !canonical(name) || !canonical(zone) {
			return
		}
		if want := dns.IsSubDomain(zone, name); got != want {
			t.Errorf("InZone(%q, %q) = %v, miekg/dns says %v", name, zone, got, want)
		}
	})
}

func FuzzParseReverse(f *testing.F) {
	for _, s := range []string{"4.3.2.1.in-addr.arpa.", "3.2.1.in-addr.arpa.", "04.3.2.1.in-addr.arpa.",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", "1.0.0.0.ip6.arpa.", "example."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		a, ok := ParseReverse(name)
		if !ok {
			return
		}
		// An address is read from exactly one spelling: its own.
		if r := reverseName(a, a.BitLen()); r != name {
			t.Errorf("ParseReverse(%q) = %s, whose reverse name is %q", name, a, r)
		}
	})
}

func FuzzReverseZones(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0}, 15, uint32(7))
	f.Add([]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 30, uint32(99))
	f.Add([]byte{1, 2, 3, 4}, 0, uint32(0))
	f.Fuzz(func(t *testing.T, addr []byte, bits int, seed uint32) {
		a, ok := netip.AddrFromSlice(addr)
		if !ok || bits < 0 || bits > a.BitLen() {
			return
		}
		p := netip.PrefixFrom(a, bits)
		zones := ReverseZones(p)
		unit := 8
		if a.Is6() {
			unit = 4
		}
		if want := 1 << ((bits+unit-1)/unit*unit - bits); len(zones) != want {
			t.Fatalf("ReverseZones(%s): %d zones, want %d", p, len(zones), want)
		}
		// Every address of p, and only those, is in exactly one of the
		// zones: try the first, the last and one between.
		b := p.Masked().Addr().AsSlice()
		last := slices.Clone(b)
		between := slices.Clone(b)
		for i := range b {
			for j := 0; j < 8; j++ {
				if i*8+j >= bits {
					last[i] |= 0x80 >> j
					if seed>>((i*8+j)%32)&1 == 1 {
						between[i] |= 0x80 >> j
					}
				}
			}
		}
		for _, s := range [][]byte{b, last, between} {
			x, _ := netip.AddrFromSlice(s)
			name := reverseName(x, x.BitLen())
			n := 0
			for _, z := range zones {
				if InZone(name, z) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("ReverseZones(%s) = %q: %s (%s) is in %d of them", p, zones, x, name, n)
			}
		}
		// An address just outside p is in none.
		if bits > 0 {
			out := slices.Clone(b)
			out[(bits-1)/8] ^= 0x80 >> ((bits - 1) % 8)
			x, _ := netip.AddrFromSlice(out)
			name := reverseName(x, x.BitLen())
			for _, z := range zones {
				if InZone(name, z) {
					t.Errorf("ReverseZones(%s) = %q: %s, outside it, is in %s", p, zones, x, z)
				}
			}
		}
	})
}
