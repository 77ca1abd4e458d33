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
	a, _ := p.lookup(c, nil, c.name, dns.TypeAAAA, asMsg)
	if a.err != nil || !d.Translate(a.Msg) {
		return p.answered(dst, c, a)
	}
	v4, _ := p.lookup(c, nil, c.name, dns.TypeA, asMsg)
	if v4.err != nil {
		return p.answered(dst, c, v4)
	}
	m := d.Synthesize(a.Msg, v4.Msg)
	// CoreDNS's reply is a fresh one: neither AA nor RA, whatever the
	// header plugin (which sits under dns64) says.
	c.hdr = Header{Clear: dnswire.FlagAA | dnswire.FlagRA}
	return p.send(dst, c, m, v4.Source, 0, 0), server.Reply
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
