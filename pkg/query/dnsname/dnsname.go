// Package dnsname owns the helpers that read DNS names as strings, for
// every stage and command that needs them: whether a name is in a zone,
// the address a reverse (PTR) name spells, the reverse zones of an address
// prefix, and the lower-case fully qualified form names are compared in.
//
// Names are in presentation form. InZone, InZones and ParseReverse take
// lower-case fully qualified names, compare bytes and do not allocate: the
// query path calls them on every question. They do not read escapes, so a
// label holding an escaped dot ("a\.b") is not told from two labels; the
// names they are given come from the wire through miekg/dns, or from
// configuration that refuses such names.
package dnsname

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// The reverse zones, apexes of the names PTR queries ask for.
const (
	ReverseV4 = "in-addr.arpa."
	ReverseV6 = "ip6.arpa."
)

// Canonical returns name lower-case and fully qualified: the form this
// package's other functions take.
func Canonical(name string) string { return strings.ToLower(dns.Fqdn(name)) }

// InZone reports whether name is zone or below it. The root zone "." holds
// every name.
func InZone(name, zone string) bool {
	if zone == "." || name == zone {
		return true
	}
	i := len(name) - len(zone)
	return i > 0 && name[i-1] == '.' && name[i:] == zone
}

// InZones reports whether name is in any of zones (InZone).
func InZones(name string, zones []string) bool {
	for _, z := range zones {
		if InZone(name, z) {
			return true
		}
	}
	return false
}

// IsReverse reports whether zone is a reverse zone or below one. Unlike
// InZone it reads escapes and ignores case: it is for configuration, not
// the query path.
func IsReverse(zone string) bool {
	return dns.IsSubDomain(ReverseV4, zone) || dns.IsSubDomain(ReverseV6, zone)
}

// ParseReverse reads the address a full reverse name spells: four decimal
// labels under in-addr.arpa. ("4.3.2.1.in-addr.arpa." is 1.2.3.4), or 32
// hexadecimal nibbles under ip6.arpa., lowest first. The address is as
// written: an IPv4-mapped IPv6 name gives an IPv6 address, for the caller
// to Unmap if it wants. Partial names (a zone, not an address), labels
// with leading zeros, octets over 255 and upper-case nibbles give ok false.
func ParseReverse(name string) (netip.Addr, bool) {
	const v4, v6 = "." + ReverseV4, "." + ReverseV6
	switch {
	case strings.HasSuffix(name, v4):
		s := name[:len(name)-len(v4)]
		var b [4]byte
		// Labels run from the last octet to the first.
		for i := 3; i >= 0; i-- {
			j := strings.IndexByte(s, '.')
			label := s
			switch {
			case i > 0 && j < 0, i == 0 && j >= 0:
				return netip.Addr{}, false // not four labels
			case i > 0:
				label, s = s[:j], s[j+1:]
			}
			v, ok := Octet(label)
			if !ok {
				return netip.Addr{}, false
			}
			b[i] = v
		}
		return netip.AddrFrom4(b), true
	case strings.HasSuffix(name, v6):
		s := name[:len(name)-len(v6)]
		if len(s) != 63 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i := 0; i < 32; i++ {
			c := s[2*i]
			if i < 31 && s[2*i+1] != '.' {
				return netip.Addr{}, false
			}
			var v byte
			switch {
			case c >= '0' && c <= '9':
				v = c - '0'
			case c >= 'a' && c <= 'f':
				v = c - 'a' + 10
			default:
				return netip.Addr{}, false
			}
			// The first label is the low nibble of the last byte.
			k := 31 - i
			if k%2 == 0 {
				b[k/2] |= v << 4
			} else {
				b[k/2] |= v
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}

// Octet reads a decimal 0-255 without leading zeros, a byte of an IPv4
// address as names spell it (reverse names, Kubernetes pod names): netip,
// and CoreDNS's net.ParseIP, refuse leading zeros too.
func Octet(s string) (byte, bool) {
	if len(s) == 0 || len(s) > 3 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}

// ReverseZones returns the reverse zones that cover prefix p exactly, as
// CoreDNS expands a CIDR zone: one zone when p ends on an octet (IPv4) or
// nibble (IPv6) boundary, else every zone of the next boundary inside p
// (10.0.0.0/15 is 0.10.in-addr.arpa. and 1.10.in-addr.arpa.). The bits of
// p's address past its length are ignored.
func ReverseZones(p netip.Prefix) []string {
	p = p.Masked()
	unit := 8
	if p.Addr().Is6() {
		unit = 4
	}
	bits := (p.Bits() + unit - 1) / unit * unit
	n := 1 << (bits - p.Bits())
	out := make([]string, 0, n)
	a := p.Addr()
	for i := 0; i < n; i++ {
		if i > 0 {
			a = addAt(a, bits, 1)
		}
		out = append(out, reverseName(a, bits))
	}
	return out
}

// reverseName is the reverse name of the first bits of a, a multiple of 8
// for IPv4 and of 4 for IPv6.
func reverseName(a netip.Addr, bits int) string {
	var b []byte
	if a.Is4() {
		o := a.As4()
		for i := bits/8 - 1; i >= 0; i-- {
			b = strconv.AppendUint(b, uint64(o[i]), 10)
			b = append(b, '.')
		}
		return string(append(b, ReverseV4...))
	}
	o := a.As16()
	for i := bits/4 - 1; i >= 0; i-- {
		nib := o[i/2] >> 4
		if i%2 == 1 {
			nib = o[i/2] & 0xf
		}
		b = append(b, "0123456789abcdef"[nib], '.')
	}
	return string(append(b, ReverseV6...))
}

// addAt adds n at bit position bits (counted from the left, at least 1)
// of a.
func addAt(a netip.Addr, bits int, n int) netip.Addr {
	b := a.AsSlice()
	// The unit that ends at bit position bits.
	pos := bits - 1
	carry := n << (7 - pos%8)
	for i := pos / 8; i >= 0 && carry > 0; i-- {
		v := int(b[i]) + carry
		b[i] = byte(v)
		carry = v >> 8
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}
