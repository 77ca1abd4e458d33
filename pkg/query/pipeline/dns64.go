package pipeline

import (
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// dns64 answers an AAAA query the DNS64 stage applies to (CoreDNS's
// dns64): the stage order's AAAA reply, or, when the stage translates it,
// the reply it synthesizes from the A records of the same name looked up
// through the stage order again. Such queries take the slow path (the
// reply to translate is known only once resolved); every other query
// costs the pipeline one call to Applies.
//
// It comes before the access list, as CoreDNS's dns64 wraps its acl: the
// access list's reply to the AAAA question (REFUSED, or NOERROR without
// records) is translated like any other, so an AAAA query it refuses is
// answered from the A records when it allows those; the A question is
// judged in turn (refused or filtered: the reply, with its EDE; dropped:
// SERVFAIL, CoreDNS's dns64 getting no reply to its lookup). A dropped
// AAAA question is dropped. Rewrites run first (CoreDNS's sit under its
// dns64: the same names are asked). The search-path walk is not taken for
// these queries (the client walks its list itself; each name it asks is
// translated as CoreDNS would).
func (p *Pipeline) dns64(dst []byte, c *call, pl *Plugins) ([]byte, server.Verdict) {
	decide := func(qtype uint16) stage.ACLAction {
		if pl.ACL == nil {
			return stage.ACLPass
		}
		return pl.ACL.Decide(c.name, qtype, c.req.Client)
	}
	v6 := decide(dns.TypeAAAA)
	switch {
	case v6 == stage.ACLDrop && !c.wait:
		return dst, server.Drop
	case !c.wait:
		return dst, server.Wait
	}
	var a answer
	switch v6 {
	case stage.ACLPass:
		a = p.lookupMsg(c, c.name, dns.TypeAAAA)
	case stage.ACLBlock:
		a = answer{Result: stage.Result{Msg: &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeRefused}}, Source: stage.SourceLocal}}
	case stage.ACLFilter:
		a = answer{Result: stage.Result{Msg: &dns.Msg{}, Source: stage.SourceLocal}}
	default:
		// Decided a drop on the reader; a reload in between made it so
		// here: refused, as the access list's own path does.
		return p.aclReply(dst, c, stage.ACLBlock), server.Reply
	}
	d := pl.DNS64
	if a.err != nil || !d.Translate(a.Msg) {
		return p.answered(dst, c, a)
	}
	if v4 := decide(dns.TypeA); v4 != stage.ACLPass {
		return p.aclReply(dst, c, v4), server.Reply
	}
	a, _ = p.translate(c, d, c.name, a)
	// CoreDNS's reply is a fresh one: neither AA nor RA, whatever the
	// header plugin (which sits under dns64) says.
	c.hdr = Header{Clear: dnswire.FlagAA | dnswire.FlagRA}
	return p.answered(dst, c, a)
}

// aclReply is the reply of dns64 when the access list decides act about
// the A question of its synthesis: CoreDNS's dns64 takes the rcode and
// the OPT of the reply its acl gave (refused or filtered, with EDE 15 or
// 17), or answers SERVFAIL when it got none (dropped).
func (p *Pipeline) aclReply(dst []byte, c *call, act stage.ACLAction) []byte {
	c.hdr = Header{}
	switch act {
	case stage.ACLBlock:
		c.ede.add(dns.ExtendedErrorCodeBlocked, "")
		return p.reply(dst, c, dns.RcodeRefused, stage.SourceLocal)
	case stage.ACLFilter:
		c.ede.add(dns.ExtendedErrorCodeFiltered, "")
		return p.reply(dst, c, dns.RcodeSuccess, stage.SourceLocal)
	}
	c.fail = failDNS64Dropped
	return p.reply(dst, c, dns.RcodeServerFailure, stage.SourceLocal)
}

func (p *Pipeline) lookupMsg(c *call, name string, qtype uint16) answer {
	a, _ := p.lookup(c, nil, name, qtype, asMsg)
	return a
}

// translate returns a, the stage order's answer to (name, AAAA), or the
// answer d synthesizes from the A records of name when it translates a;
// translated says which. Waiting (c.wait).
func (p *Pipeline) translate(c *call, d stage.DNS64, name string, a answer) (answer, bool) {
	if a.err != nil || a.wait || !d.Translate(a.Msg) {
		return a, false
	}
	v4 := p.lookupMsg(c, name, dns.TypeA)
	if v4.err != nil || v4.wait {
		return v4, false
	}
	c.translated++
	return answer{Result: stage.Result{Msg: d.Synthesize(a.Msg, v4.Msg), Source: v4.Source}}, true
}

// lookupTarget looks up a CNAME target of a stage's answer (an
// ExternalName's, a template's, an external zone's hostname) for c, as
// CoreDNS's plugins look theirs up: through the whole server, dns64
// included, so an AAAA target with only A records is translated for a
// client dns64 applies to. Waiting (c.wait).
func (p *Pipeline) lookupTarget(c *call, name string, qtype uint16) answer {
	a := p.lookupMsg(c, name, qtype)
	if pl := p.plugins.Load(); pl != nil && pl.DNS64 != nil && pl.DNS64.Applies(c.req.Client, name, qtype, c.q.Class) {
		a, _ = p.translate(c, pl.DNS64, name, a)
	}
	return a
}

// answered sends a, an answer of the stage order looked up as a message
// for c's question.
func (p *Pipeline) answered(dst []byte, c *call, a answer) ([]byte, server.Verdict) {
	if a.err != nil {
		c.fail, c.failErr = failureReason(a.err), a.err
		c.ede.failed(a.err)
		return p.reply(dst, c, dns.RcodeServerFailure, a.Source), server.Reply
	}
	if a.stable && c.revert == nil {
		return p.sendPacked(dst, c, a.Msg, a.Source), server.Reply
	}
	return p.send(dst, c, a.Msg, a.Source, 0, 0), server.Reply
}
