package upstream

import (
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// maxChainHops bounds the CNAME/DNAME hops followed from the question name.
const maxChainHops = 16

// minimal cuts r, an accepted reply to q read off the wire (not yet shared
// with anyone), down to what answers q, and returns it:
//   - in the answer section, the CNAME/DNAME chain from the question name
//     and the RRset of the type asked for at its end (with the RRSIGs that
//     cover them);
//   - in the authority section, for a negative answer (no RRset of the type
//     at the end of the chain), the SOA of a zone the final name is in,
//     with its RRSIG; for a client that asked for DNSSEC records (DO), the
//     NSEC/NSEC3 records and their RRSIGs, which prove the denial or the
//     wildcard;
//   - in the additional section, the OPT;
//
// and TTLs and SOA MINIMUMs of 2^31 or more read as 0, as RFC 2181 §8
// reads them (dnswire.ZeroHugeTTLs; the OPT's TTL field, its flags, is
// left alone).
//
// Everything else is dropped: NS records and glue, addresses of MX or SRV
// targets, records for names the question did not lead to. They would be
// cached and served under this question's key (a classic poisoning vector
// for an off-path attacker or a compromised authority), they lengthen the
// lifetime computation with TTLs that are not the answer's, and they cost
// bytes in the cache and on the wire. unbound's minimal-responses does the
// same for what it serves.
func minimal(q, r *dns.Msg) *dns.Msg {
	if r == nil || len(q.Question) != 1 {
		return r
	}
	qt, qc := q.Question[0].Qtype, q.Question[0].Qclass
	do := false
	if o := q.IsEdns0(); o != nil {
		do = o.Do()
	}
	keep := make([]bool, len(r.Answer))
	cur := q.Question[0].Name
	answered := false
	for hop := 0; hop <= maxChainHops; hop++ {
		// The RRset of the type asked for ends the chain.
		for i, rr := range r.Answer {
			if h := rr.Header(); h.Class == qc && h.Rrtype == qt && strings.EqualFold(h.Name, cur) {
				keep[i], answered = true, true
			}
		}
		if answered {
			keepSigs(r.Answer, keep, cur, qt, qc)
			break
		}
		next := ""
		// A DNAME at an ancestor of cur (RFC 6672) and the CNAME it
		// synthesizes at cur; a server that sends no CNAME gets one
		// derived here.
		for i, rr := range r.Answer {
			d, ok := rr.(*dns.DNAME)
			if !ok || d.Hdr.Class != qc || strings.EqualFold(d.Hdr.Name, cur) || !dns.IsSubDomain(d.Hdr.Name, cur) {
				continue
			}
			keep[i] = true
			keepSigs(r.Answer, keep, d.Hdr.Name, dns.TypeDNAME, qc)
			next = substituteSuffix(cur, d.Hdr.Name, d.Target)
			break
		}
		for i, rr := range r.Answer {
			c, ok := rr.(*dns.CNAME)
			if !ok || c.Hdr.Class != qc || !strings.EqualFold(c.Hdr.Name, cur) {
				continue
			}
			keep[i] = true
			keepSigs(r.Answer, keep, cur, dns.TypeCNAME, qc)
			next = c.Target
			break
		}
		if next == "" {
			break
		}
		cur = next
	}
	r.Answer = filter(r.Answer, func(i int, _ dns.RR) bool { return keep[i] })

	r.Ns = filter(r.Ns, func(_ int, rr dns.RR) bool {
		h := rr.Header()
		switch {
		case h.Class != qc:
			return false
		case h.Rrtype == dns.TypeSOA:
			return !answered && dns.IsSubDomain(h.Name, cur)
		case h.Rrtype == dns.TypeNSEC || h.Rrtype == dns.TypeNSEC3:
			return do
		case h.Rrtype == dns.TypeRRSIG:
			switch rr.(*dns.RRSIG).TypeCovered {
			case dns.TypeNSEC, dns.TypeNSEC3:
				return do
			case dns.TypeSOA:
				return !answered && dns.IsSubDomain(h.Name, cur)
			}
		}
		return false
	})
	r.Extra = filter(r.Extra, func(_ int, rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	// Here and not only in the cache: a reply handed on without it (the
	// cluster DNS's, before the index syncs) must carry none either.
	dnswire.ZeroHugeTTLs(r)
	return r
}

// keepSigs marks the RRSIGs in rrs that cover (owner, qtype).
func keepSigs(rrs []dns.RR, keep []bool, owner string, qtype, qclass uint16) {
	for i, rr := range rrs {
		if sig, ok := rr.(*dns.RRSIG); ok && sig.Hdr.Class == qclass && sig.TypeCovered == qtype && strings.EqualFold(sig.Hdr.Name, owner) {
			keep[i] = true
		}
	}
}

// filter keeps, in order and in place, the records for which ok is true.
func filter(rrs []dns.RR, ok func(i int, rr dns.RR) bool) []dns.RR {
	out := rrs[:0]
	for i, rr := range rrs {
		if ok(i, rr) {
			out = append(out, rr)
		}
	}
	for i := len(out); i < len(rrs); i++ {
		rrs[i] = nil // let dropped records go
	}
	return out
}

// substituteSuffix replaces the suffix owner of name (a subdomain of it) by
// target, as a DNAME does; "" if the result is not a valid name.
func substituteSuffix(name, owner, target string) string {
	n := dns.CountLabel(name) - dns.CountLabel(owner)
	idx := dns.Split(name)
	if n <= 0 || n >= len(idx) {
		return ""
	}
	prefix := name[:idx[n]]
	out := prefix + target
	if target == "." {
		out = prefix
	}
	if _, ok := dns.IsDomainName(out); !ok || len(out) > 255 {
		return ""
	}
	return dns.Fqdn(out)
}
