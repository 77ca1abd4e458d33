package hosts

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"
)

// table is one immutable version of the records: the configured entries
// and the file's, merged. Answers are built on first use and kept, so a
// repeated question is a map lookup and a shared message.
type table struct {
	zones   []string // lower-case FQDNs; "." is every name
	fall    []string // nil: no fallthrough; empty: every zone
	fallAll bool
	fallUns bool // fallthrough-unsupported
	ttl     uint32

	names map[string]*records     // exact names
	wild  map[string]*records     // "*.example.com." kept under "example.com."
	addrs map[netip.Addr]*reverse // PTR data, unless no-reverse
	count int                     // addresses across names, for Stats

	nodata   *dns.Msg // a name with records, none of the type asked
	servfail *dns.Msg // in the zones, no such name, no fallthrough (CoreDNS)
}

// records are one name's addresses, in the order the sources gave them
// (file first, then the configured entries), without duplicates.
type records struct {
	v4, v6  []netip.Addr
	a, aaaa atomic.Pointer[dns.Msg] // built on first use (exact names only)
}

type reverse struct {
	names []string
	ptr   atomic.Pointer[dns.Msg]
}

func newTable(s *settings, sources ...[]entry) *table {
	t := &table{zones: s.zones, fall: s.fall, fallAll: s.fall != nil && len(s.fall) == 0, fallUns: s.fallUnsupported,
		ttl: s.ttl, names: map[string]*records{}, wild: map[string]*records{}, addrs: map[netip.Addr]*reverse{},
		nodata:   &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}},
		servfail: &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}}}
	for _, src := range sources {
		for _, e := range src {
			for _, n := range e.names {
				if !inZones(t.zones, n) {
					continue // as CoreDNS: names outside the zones are ignored
				}
				m, key, isWild := t.names, n, strings.HasPrefix(n, "*.")
				if isWild {
					m, key = t.wild, n[2:]
				}
				r := m[key]
				if r == nil {
					r = &records{}
					m[key] = r
				}
				if e.addr.Is4() {
					r.v4 = appendNew(r.v4, e.addr)
				} else {
					r.v6 = appendNew(r.v6, e.addr)
				}
				if s.noReverse || isWild {
					continue // wildcards have no PTR (CoreDNS)
				}
				rv := t.addrs[e.addr]
				if rv == nil {
					rv = &reverse{}
					t.addrs[e.addr] = rv
				}
				if !slices.Contains(rv.names, n) {
					rv.names = append(rv.names, n)
				}
			}
		}
	}
	for _, m := range []map[string]*records{t.names, t.wild} {
		for _, r := range m {
			t.count += len(r.v4) + len(r.v6)
		}
	}
	return t
}

func appendNew(s []netip.Addr, a netip.Addr) []netip.Addr {
	if slices.Contains(s, a) {
		return s
	}
	return append(s, a)
}

// inZones reports whether name is zones' (zone or below).
func inZones(zones []string, name string) bool {
	for _, z := range zones {
		if inZone(z, name) {
			return true
		}
	}
	return false
}

func inZone(zone, name string) bool {
	if zone == "." || name == zone {
		return true
	}
	i := len(name) - len(zone)
	return i > 0 && name[i-1] == '.' && name[i:] == zone
}

// lookup answers (name, qtype); see Hosts.Lookup.
func (t *table) lookup(name string, qtype uint16) (*dns.Msg, bool) {
	if qtype == dns.TypePTR {
		// PTR is answered whatever the zones, and falls through whenever
		// there is no record, fallthrough or not (CoreDNS).
		a, ok := reverseAddr(name)
		if !ok {
			return nil, false
		}
		rv := t.addrs[a]
		if rv == nil {
			return nil, false
		}
		return t.ptrMsg(rv, name), true
	}
	if !inZones(t.zones, name) {
		return nil, false
	}
	exact := t.names[name]
	var wild *records
	if i := strings.IndexByte(name, '.'); i >= 0 && i+1 < len(name) {
		wild = t.wild[name[i+1:]]
	}
	switch qtype {
	case dns.TypeA:
		if exact != nil && len(exact.v4) > 0 {
			return t.addrMsg(&exact.a, name, exact.v4, dns.TypeA), true
		}
		if wild != nil && len(wild.v4) > 0 {
			return t.build(name, wild.v4, dns.TypeA), true
		}
	case dns.TypeAAAA:
		if exact != nil && len(exact.v6) > 0 {
			return t.addrMsg(&exact.aaaa, name, exact.v6, dns.TypeAAAA), true
		}
		if wild != nil && len(wild.v6) > 0 {
			return t.build(name, wild.v6, dns.TypeAAAA), true
		}
	default:
		if t.fallUns && (exact != nil || wild != nil) && t.through(name) {
			return nil, false
		}
	}
	if exact != nil || wild != nil {
		return t.nodata, true // the name exists: NODATA, authoritative
	}
	if t.through(name) {
		return nil, false
	}
	// CoreDNS would answer NXDOMAIN, but has no SOA to go with it, so it
	// answers SERVFAIL; so do we.
	return t.servfail, true
}

// through reports whether name falls through to the next stage.
func (t *table) through(name string) bool {
	return t.fallAll || t.fall != nil && inZones(t.fall, name)
}

// addrMsg returns the answer kept in p, building it on first use. Two
// readers may both build it; either result is the same answer.
func (t *table) addrMsg(p *atomic.Pointer[dns.Msg], name string, addrs []netip.Addr, qtype uint16) *dns.Msg {
	if m := p.Load(); m != nil {
		return m
	}
	m := t.build(strings.Clone(name), addrs, qtype)
	p.Store(m)
	return m
}

func (t *table) build(name string, addrs []netip.Addr, qtype uint16) *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Answer: make([]dns.RR, 0, len(addrs))}
	hdr := dns.RR_Header{Name: name, Rrtype: qtype, Class: dns.ClassINET, Ttl: t.ttl}
	for _, a := range addrs {
		if qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		} else {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return m
}

func (t *table) ptrMsg(rv *reverse, name string) *dns.Msg {
	if m := rv.ptr.Load(); m != nil {
		return m
	}
	name = strings.Clone(name)
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Answer: make([]dns.RR, 0, len(rv.names))}
	for _, n := range rv.names {
		m.Answer = append(m.Answer, &dns.PTR{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: t.ttl}, Ptr: n})
	}
	rv.ptr.Store(m)
	return m
}

// reverseAddr reads the address of a full reverse name
// ("4.3.2.1.in-addr.arpa.", or 32 nibbles under "ip6.arpa."), lower-case,
// without allocating. Partial names give ok false.
func reverseAddr(name string) (netip.Addr, bool) {
	const v4, v6 = ".in-addr.arpa.", ".ip6.arpa."
	switch {
	case strings.HasSuffix(name, v4):
		s := name[:len(name)-len(v4)]
		var b [4]byte
		for i := 3; i >= 0; i-- {
			j := strings.IndexByte(s, '.')
			label := s
			switch {
			case i > 0 && j < 0, i == 0 && j >= 0:
				return netip.Addr{}, false // not four labels
			case i > 0:
				label, s = s[:j], s[j+1:]
			}
			v, ok := octet(label)
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
			// Nibble i is the (31-i)th of the address, low nibble first.
			k := 31 - i
			if k%2 == 0 {
				b[k/2] |= v << 4
			} else {
				b[k/2] |= v
			}
		}
		return netip.AddrFrom16(b).Unmap(), true
	}
	return netip.Addr{}, false
}

// octet reads a decimal 0-255 without leading zeros.
func octet(s string) (byte, bool) {
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
