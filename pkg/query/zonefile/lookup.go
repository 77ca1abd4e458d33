package zonefile

import (
	"github.com/miekg/dns"
)

// result classes a lookup in one zone, as CoreDNS's file names them.
type result uint8

const (
	success result = iota
	nameError
	delegation
	noData
	serverFailure
)

// found is what a lookup in a zone gives: the sections and the class;
// target, when set, is a CNAME target the zone does not hold, to be looked
// up through the server before the answer is complete (ext).
type found struct {
	answer, ns, extra []dns.RR
	res               result
	target            string
}

// maxCNAME bounds the CNAME records followed inside a zone (CoreDNS's 8).
const maxCNAME = 8

// lookup answers (qname, qtype) from z, qname lower-case and in z: the
// algorithm of CoreDNS 1.15's file plugin for zones without DNSSEC
// records (RFC 1034 §4.3.2 with RFC 4592's wildcards): the apex's SOA and
// NS; delegations found walking down from the origin (a referral: the
// child's NS and their glue); the name itself, its CNAME chased inside
// the zone; a wildcard unless a closer empty non-terminal exists; else
// NODATA for an empty non-terminal and NXDOMAIN. DNAME records are served
// as records, never used to synthesize (a departure: docs/plugins.md).
func (z *zone) lookup(qname string, qtype uint16) found {
	if qname == z.origin {
		switch qtype {
		case dns.TypeSOA:
			return found{answer: []dns.RR{z.soa}, ns: z.ns, res: success}
		case dns.TypeNS:
			return found{answer: z.ns, extra: z.glue(z.ns), res: success}
		}
	}
	var (
		elem     map[uint16][]dns.RR
		ok       bool
		wildName string
		wildElem map[uint16][]dns.RR
	)
	for i := 0; ; i++ {
		parts, shot := z.nameFromRight(qname, i)
		if shot {
			break
		}
		if elem, ok = z.names[parts]; !ok {
			if w := wildcardOf(parts); w != "" {
				if we, wok := z.names[w]; wok {
					wildName, wildElem = w, we
				} else if z.ents[w] {
					wildName, wildElem = w, nil
				}
			}
			continue
		}
		if ns, extra, deleg := z.delegation(elem, parts, qname, qtype); deleg {
			return found{ns: ns, extra: extra, res: delegation}
		}
	}
	if ok {
		if rrs := elem[dns.TypeCNAME]; len(rrs) > 0 && qtype != dns.TypeCNAME {
			return z.chase(rrs, qtype)
		}
		rrs := elem[qtype]
		if len(rrs) == 0 {
			return found{ns: []dns.RR{z.soa}, res: noData}
		}
		return found{answer: rrs, ns: z.ns, extra: z.additional(rrs), res: success}
	}
	if wildName != "" && !z.closerENT(qname, wildName) {
		if wildElem == nil {
			return found{ns: []dns.RR{z.soa}, res: noData}
		}
		if rrs := wildElem[dns.TypeCNAME]; len(rrs) > 0 && qtype != dns.TypeCNAME {
			return z.chase(synthesize(rrs, qname), qtype)
		}
		rrs := synthesize(wildElem[qtype], qname)
		if len(rrs) == 0 {
			return found{ns: []dns.RR{z.soa}, res: noData}
		}
		return found{answer: rrs, ns: z.ns, extra: z.additional(rrs), res: success}
	}
	res := nameError
	if z.ents[qname] {
		res = success // an empty non-terminal: NOERROR without records
	}
	return found{ns: []dns.RR{z.soa}, res: res}
}

// nameFromRight is qname cut to the origin and i more labels; shot when
// qname has fewer (CoreDNS's walk down from the origin: i = 0 is the
// origin, the last i not shot is qname itself).
func (z *zone) nameFromRight(qname string, i int) (string, bool) {
	if i <= 0 {
		return z.origin, false
	}
	n := dns.CountLabel(qname)
	if z.labels+i > n {
		return qname, true
	}
	idx := dns.Split(qname)
	return qname[idx[n-z.labels-i]:], false
}

// wildcardOf is name with its first label replaced by "*" ("" for the
// root).
func wildcardOf(name string) string {
	i, end := dns.NextLabel(name, 0)
	if end {
		return ""
	}
	return "*." + name[i:]
}

// delegation reports whether elem, the records of name on the way down to
// qname, is a zone cut: its NS records and their glue (not for a DS
// question at the cut itself, which the parent answers).
func (z *zone) delegation(elem map[uint16][]dns.RR, name, qname string, qtype uint16) (ns, extra []dns.RR, ok bool) {
	ns = elem[dns.TypeNS]
	if ns == nil || qtype == dns.TypeDS && name == qname {
		return nil, nil, false
	}
	return ns, z.glue(ns), true
}

// glue is the A and AAAA records of the NS targets below their owner.
func (z *zone) glue(ns []dns.RR) []dns.RR {
	glue := []dns.RR{}
	for _, rr := range ns {
		x, ok := rr.(*dns.NS)
		if !ok || !dns.IsSubDomain(x.Hdr.Name, x.Ns) {
			continue
		}
		if e, ok := z.names[x.Ns]; ok {
			glue = append(glue, e[dns.TypeA]...)
			glue = append(glue, e[dns.TypeAAAA]...)
		}
	}
	return glue
}

// closerENT reports whether a name between qname and the wildcard's
// parent has names below it: the wildcard then does not apply (RFC 4592
// §2.2.2).
func (z *zone) closerENT(qname, wildcard string) bool {
	if len(wildcard) < 2 || wildcard[:2] != "*." {
		return false
	}
	parent := wildcard[2:]
	name := qname
	for {
		i, end := dns.NextLabel(name, 0)
		if end {
			return false
		}
		name = name[i:]
		if name == parent || !dns.IsSubDomain(parent, name) {
			return false
		}
		if z.ents[name] {
			return true
		}
	}
}

// synthesize copies the wildcard's records with qname as their owner.
func synthesize(rrs []dns.RR, qname string) []dns.RR {
	if len(rrs) == 0 {
		return nil
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = dns.Copy(rr)
		out[i].Header().Name = qname
	}
	return out
}

// chase follows the CNAME rrs (the name's) inside the zone, as CoreDNS's
// file: a target under a delegation is a referral with the chain; a
// target the zone does not hold (outside it, or a missing name in it),
// or any NS question, or the SOA of the origin, is looked up through the
// server (target set); a target with records of qtype adds them; one
// without, the chain alone (NOERROR, the apex NS in authority).
func (z *zone) chase(rrs []dns.RR, qtype uint16) found {
	chain := append([]dns.RR(nil), rrs...)
	target := rrs[0].(*dns.CNAME).Target
	elem, ok := z.names[target]
	if f, done := z.step(chain, target, qtype, elem, ok); done {
		return f
	}
	for i := 0; ; {
		cname := elem[dns.TypeCNAME]
		if len(cname) == 0 {
			chain = append(chain, elem[qtype]...)
			return found{answer: chain, ns: z.ns, extra: z.additional(chain), res: success}
		}
		x := cname[0].(*dns.CNAME)
		if dns.CanonicalName(x.Hdr.Name) == dns.CanonicalName(x.Target) {
			return found{res: serverFailure}
		}
		chain = append(chain, cname...)
		target = x.Target
		elem, ok = z.names[target]
		if f, done := z.step(chain, target, qtype, elem, ok); done {
			return f
		}
		if i++; i > maxCNAME {
			return found{answer: chain, ns: z.ns, extra: z.additional(chain), res: success}
		}
	}
}

// step ends a chase at target (elem its records, ok whether the zone holds
// it): a referral under a zone cut, or a lookup through the server.
func (z *zone) step(chain []dns.RR, target string, qtype uint16, elem map[uint16][]dns.RR, ok bool) (found, bool) {
	if ns, extra, deleg := z.targetDelegation(target, qtype, elem); deleg {
		return found{answer: chain, ns: ns, extra: extra, res: delegation}, true
	}
	if !ok || qtype == dns.TypeNS || qtype == dns.TypeSOA && target == z.origin {
		return found{answer: chain, target: target}, true
	}
	return found{}, false
}

// targetDelegation finds a zone cut on the way from the origin down to a
// CNAME target (the target itself included when the zone holds it).
func (z *zone) targetDelegation(target string, qtype uint16, exact map[uint16][]dns.RR) (ns, extra []dns.RR, ok bool) {
	if !dns.IsSubDomain(z.origin, target) {
		return nil, nil, false
	}
	for i := 1; ; i++ {
		name, shot := z.nameFromRight(target, i)
		if shot {
			return nil, nil, false
		}
		if name == target {
			if exact == nil {
				return nil, nil, false
			}
			return z.delegation(exact, name, target, qtype)
		}
		if elem, ok := z.names[name]; ok {
			if ns, extra, ok := z.delegation(elem, name, target, qtype); ok {
				return ns, extra, true
			}
		}
	}
}

// ext completes a chase whose target was looked up through the server
// (reply, or failed): its answer records appended to the chain, the class
// from its rcode (NXDOMAIN, SERVFAIL, NOERROR without records: NODATA;
// anything else success), the authority from the class.
func (z *zone) ext(f found, reply *dns.Msg, failed bool) found {
	res := serverFailure
	if !failed && reply != nil {
		switch {
		case reply.Rcode == dns.RcodeNameError:
			res = nameError
		case reply.Rcode == dns.RcodeServerFailure:
			res = serverFailure
		case reply.Rcode == dns.RcodeSuccess && len(reply.Answer) == 0:
			res = noData
		default:
			res = success
		}
		f.answer = append(f.answer, reply.Answer...)
	}
	f.res, f.target = res, ""
	if res == nameError || res == noData {
		f.ns = []dns.RR{z.soa}
	} else {
		f.ns = z.ns
	}
	f.extra = z.additional(f.answer)
	return f
}

// additional is the A and AAAA records, from the zone, of the in-zone
// targets of the SRV, MX, SVCB and HTTPS records among rrs.
func (z *zone) additional(rrs []dns.RR) []dns.RR {
	var extra []dns.RR
	var seen map[string]bool
	for _, rr := range rrs {
		name := ""
		switch x := rr.(type) {
		case *dns.SRV:
			name = x.Target
		case *dns.MX:
			name = x.Mx
		case *dns.SVCB:
			name = x.Target
		case *dns.HTTPS:
			name = x.Target
		}
		if name == "" || !dns.IsSubDomain(z.origin, name) {
			continue
		}
		target := dns.CanonicalName(name)
		if seen[target] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[target] = true
		if e, ok := z.names[target]; ok {
			extra = append(extra, e[dns.TypeA]...)
			extra = append(extra, e[dns.TypeAAAA]...)
		}
	}
	return extra
}

// msg makes f the reply CoreDNS's file writes: authoritative (a referral
// is not), NXDOMAIN for a name error; a server failure without records is
// no message (the server's SERVFAIL).
func (f found) msg() (*dns.Msg, bool) {
	m := &dns.Msg{Answer: f.answer, Ns: f.ns, Extra: f.extra}
	m.Authoritative = true
	switch f.res {
	case nameError:
		m.Rcode = dns.RcodeNameError
	case delegation:
		if len(m.Answer) == 0 {
			m.Authoritative = false
		}
	case serverFailure:
		if len(m.Answer) == 0 {
			return nil, false
		}
		m.Rcode = dns.RcodeServerFailure
	}
	return m, true
}
