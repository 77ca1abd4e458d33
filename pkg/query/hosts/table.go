package hosts

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
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
				if !dnsname.InZones(n, t.zones) {
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

// lookup answers (name, qtype); see Hosts.Lookup.
func (t *table) lookup(name string, qtype uint16) (*dns.Msg, bool) {
	if qtype == dns.TypePTR {
		// PTR is answered whatever the zones, and falls through whenever
		// there is no record, fallthrough or not (CoreDNS).
		// The table keeps IPv4 addresses unmapped: an IPv4-mapped
		// ip6.arpa. name asks for the IPv4 address.
		a, ok := dnsname.ParseReverse(name)
		if !ok {
			return nil, false
		}
		rv := t.addrs[a.Unmap()]
		if rv == nil {
			return nil, false
		}
		return t.ptrMsg(rv, name), true
	}
	if !dnsname.InZones(name, t.zones) {
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
	return t.fallAll || t.fall != nil && dnsname.InZones(name, t.fall)
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
