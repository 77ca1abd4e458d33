package dnswire

import "github.com/miekg/dns"

// ReadTTL reads a TTL field (or an SOA MINIMUM) as RFC 2181 §8 does, and
// unbound with it: a value with the most significant bit set, 2^31 or
// more, is 0. (RFC 8767 §4 would read it as a positive value capped at 7
// days instead: such a value only comes from a broken or hostile source,
// and it must not pin an answer for the longest lifetime allowed.)
func ReadTTL(v uint32) uint32 {
	if v >= 1<<31 {
		return 0
	}
	return v
}

// ZeroHugeTTLs rewrites every TTL and SOA MINIMUM of m, in every section,
// to what ReadTTL reads it as: those of 2^31 or more become 0, so that no
// such value is handed on. The OPT record is left alone, wherever it is:
// its TTL field is no TTL but the extended rcode, the EDNS version and the
// flags (RFC 6891 §6.1.3), and an extended rcode of 128 or more sets its
// top bit.
func ZeroHugeTTLs(m *dns.Msg) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rrtype == dns.TypeOPT {
				continue
			}
			h.Ttl = ReadTTL(h.Ttl)
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Minttl = ReadTTL(soa.Minttl)
			}
		}
	}
}
