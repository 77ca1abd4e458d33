package pipeline

import (
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Plugins are the CoreDNS plugins the pipeline runs around its stages, in
// CoreDNS's plugin order (plugin.cfg: local, chaos, rewrite, autopath,
// acl, cache, header, minimal, template, hosts, kubernetes, forward):
//
//   - Local and Chaos answer before anything else, rewrites included
//     (check);
//   - ACL decides after the rewrite, before the search-path walk and the
//     cache (acl);
//   - Templates answer before static records and the cluster zone
//     (lookup);
//   - Header's flags apply to every reply the stages give, cache hits
//     included (finish), not to what the pipeline answers itself (errors,
//     the answers above, the ACL's), as CoreDNS's header sits under those
//     plugins.
//   - DNS64 looks at the whole order's reply to an AAAA query, the
//     ACL's included, and may replace it (dns64.go; after the rewrites,
//     which CoreDNS runs under it on the same names);
//   - External (k8s_external) answers after static records, before the
//     cluster zone.
//
// Each field nil (or zero) is a plugin not configured: one pointer load
// and a nil test per query.
type Plugins struct {
	Local, Chaos stage.Builtin
	ACL          stage.ACL
	Templates    stage.Templates
	Header       Header
	// NSID is CoreDNS's nsid: queries that carry the NSID option (RFC
	// 5001) get it back with these bytes (check, finish). nil: off.
	NSID *NSID
	// DNS64 synthesizes AAAA answers (dns64.go).
	DNS64 stage.DNS64
	// External answers the external zones of Services (CoreDNS's
	// k8s_external), after static records, before the cluster zone.
	External stage.ExternalZone
}

// NSID is the nsid plugin: every reply to a query carrying the NSID
// option carries it with Data, as CoreDNS 1.15's nsid, which wraps the
// writer of every plugin after it: answers, NXDOMAIN and NODATA, cache
// hits, the access list's refusals, local, chaos and ANY answers; not the
// errors CoreDNS's server writes itself (FORMERR, NOTIMP, BADVERS, a
// failed resolution's SERVFAIL, REFUSED for another class or a zone
// transfer).
//
// Zones and Except (lower-case FQDNs) are the zones of the Corefile's
// server blocks with and without nsid: the query's name, as asked, is
// the most specific block's, as CoreDNS routes it. Zones empty: every
// name but Except's.
type NSID struct {
	Data          string
	Zones, Except []string
}

// covers reports whether the NSID goes on the reply to name (lower-case,
// as asked): the longest zone of Zones holding it is longer than the
// longest of Except. Asked only of queries carrying the option.
func (n *NSID) covers(name string) bool {
	on := 0 // labels of the longest zone holding name, plus one
	if len(n.Zones) == 0 {
		on = 1 // the root
	}
	for _, z := range n.Zones {
		if dnsname.InZone(name, z) {
			on = max(on, dns.CountLabel(z)+1)
		}
	}
	for _, z := range n.Except {
		if dnsname.InZone(name, z) && dns.CountLabel(z)+1 >= on {
			return false
		}
	}
	return on > 0
}

// Header is CoreDNS's header plugin: flags (dnswire.FlagAA, FlagRA,
// FlagRD) set or cleared on the stages' replies. RD rules of the query
// (`query set|clear rd`) are response rules here too: CoreDNS's cache hit
// copies RD from the changed query and its upstream echoes it, and the
// upstream query's RD is the cache's (cache.Config.ClearRD).
type Header struct {
	Set, Clear uint16
}

// SetPlugins replaces the plugins while the pipeline runs (nil: none).
// Queries under way finish with the old ones. Search-path decisions and
// shortcuts are made again (Invalidate): a template may now answer a
// step, the access list block one.
func (p *Pipeline) SetPlugins(pl *Plugins) {
	if pl != nil && *pl == (Plugins{}) {
		pl = nil
	}
	p.plugins.Store(pl)
	p.Invalidate()
}

// builtin answers c from the Local and Chaos answers, before the checks of
// class and type (CoreDNS's local and chaos come before its any and
// server checks); done false when neither answers.
func (p *Pipeline) builtin(dst []byte, c *call, pl *Plugins) ([]byte, bool) {
	for _, b := range [...]stage.Builtin{pl.Local, pl.Chaos} {
		if b == nil {
			continue
		}
		if res, ok := b.Lookup(c.q.Name, c.q.Type, c.q.Class); ok {
			return p.send(dst, c, res.Msg, stage.SourceLocal, 0, 0), true
		}
	}
	return dst, false
}

// acl applies the access list to c (its name after the rewrite): done when
// the query is blocked (REFUSED, EDE 15), filtered (NOERROR, EDE 17) or
// dropped (no reply). The EDE options go to clients that sent EDNS only
// (finish); CoreDNS adds an OPT to every such reply.
func (p *Pipeline) acl(dst []byte, c *call, a stage.ACL) ([]byte, server.Verdict, bool) {
	switch a.Decide(c.name, c.q.Type, c.req.Client) {
	case stage.ACLBlock:
		c.ede.add(dns.ExtendedErrorCodeBlocked, "")
		return p.reply(dst, c, dns.RcodeRefused, stage.SourceLocal), server.Reply, true
	case stage.ACLFilter:
		c.ede.add(dns.ExtendedErrorCodeFiltered, "")
		return p.reply(dst, c, dns.RcodeSuccess, stage.SourceLocal), server.Reply, true
	case stage.ACLDrop:
		if c.wait {
			// Decided on the reader the first time; a reload in
			// between turned it into a drop: refused instead of an
			// empty datagram.
			c.ede.add(dns.ExtendedErrorCodeBlocked, "")
			return p.reply(dst, c, dns.RcodeRefused, stage.SourceLocal), server.Reply, true
		}
		return dst, server.Drop, true
	}
	return dst, 0, false
}

// template answers (name, qtype) from the templates: ok false when none
// does. Without c.wait an answer whose CNAME targets must be looked up
// waits.
func (p *Pipeline) template(c *call, t stage.Templates, name string, qtype uint16) (answer, bool) {
	ta, ok := t.Lookup(name, qtype, c.q.Class, c.req.Client, c.q.ID)
	if !ok {
		return answer{}, false
	}
	if ta.HasEDE {
		c.ede.add(ta.EDECode, ta.EDEText)
	}
	res := stage.Result{Msg: ta.Msg, Source: stage.SourceTemplate}
	if len(ta.Targets) == 0 {
		return answer{Result: res, stable: ta.Fixed}, true
	}
	if !c.wait {
		return answer{wait: true}, true
	}
	// The targets' records, looked up through every stage (CoreDNS asks
	// its whole server); their NXDOMAIN is not the reply's, their TC is.
	// A target that could not be resolved makes the reply a SERVFAIL
	// (targetFailed), where CoreDNS's template appends the nothing its
	// lookup gave. Not through the templates again: a target a template
	// answers with another CNAME would go round.
	m := &dns.Msg{MsgHdr: ta.Msg.MsgHdr, Answer: append([]dns.RR(nil), ta.Msg.Answer...), Ns: ta.Msg.Ns, Extra: ta.Msg.Extra}
	c.noTemplates = true
	defer func() { c.noTemplates = false }()
	for _, target := range ta.Targets {
		a := p.lookupTarget(c, target, qtype)
		if a.wait || a.err == nil && a.Msg == nil {
			continue
		}
		if f, failed := targetFailed(c, a, "template CNAME", target); failed {
			return f, true
		}
		m.Answer = append(m.Answer, a.Msg.Answer...)
		m.Truncated = m.Truncated || a.Msg.Truncated
	}
	res.Msg = m
	return answer{Result: res}, true
}

// minimizable reports whether minimal-responses empties m's authority and
// additional sections: as CoreDNS's minimal, NOERROR answers (and NOERROR
// without records that is neither NODATA nor a referral); denials, errors
// and referrals keep theirs.
func minimizable(m *dns.Msg) bool {
	if m.Rcode != dns.RcodeSuccess {
		return false
	}
	if len(m.Answer) > 0 {
		return true
	}
	for _, rr := range m.Ns {
		if t := rr.Header().Rrtype; t == dns.TypeSOA || t == dns.TypeNS {
			return false
		}
	}
	return true
}

// header rules apply to flags of a stage's reply (patchHeader).
func (c *call) headerFlags(flags uint16) uint16 {
	return (flags | c.hdr.Set) &^ c.hdr.Clear
}
