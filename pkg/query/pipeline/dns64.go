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
// Where it departs from CoreDNS, whose dns64 wraps every plugin after it:
// the access list and rewrites run first here (CoreDNS's dns64 translates
// an AAAA query its acl refused when the A query is allowed), and the
// search-path walk is not taken for these queries (the client walks its
// list itself; each name it asks is translated as CoreDNS would).
func (p *Pipeline) dns64(dst []byte, c *call, d stage.DNS64) ([]byte, server.Verdict) {
	if !c.wait {
		return dst, server.Wait
	}
	a, translated := p.translate(c, d, c.name, p.lookupMsg(c, c.name, dns.TypeAAAA))
	if translated {
		// CoreDNS's reply is a fresh one: neither AA nor RA, whatever
		// the header plugin (which sits under dns64) says.
		c.hdr = Header{Clear: dnswire.FlagAA | dnswire.FlagRA}
	}
	return p.answered(dst, c, a)
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
	return answer{Result: stage.Result{Msg: d.Synthesize(a.Msg, v4.Msg), Source: v4.Source}}, true
}

// lookupTarget looks up a CNAME target of a stage's answer (an
// ExternalName's, a template's, an external zone's hostname) for c, as
// CoreDNS's plugins look theirs up: through the whole server, dns64
// included, so an AAAA target with only A records is translated for a
// client dns64 applies to. Waiting (c.wait).
func (p *Pipeline) lookupTarget(c *call, name string, qtype uint16) answer {
	a := p.lookupMsg(c, name, qtype)
	if pl := p.plugins.Load(); pl != nil && pl.DNS64 != nil && pl.DNS64.Applies(c.req.Client, qtype, c.q.Class) {
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
