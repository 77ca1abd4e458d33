package pipeline

import (
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

// zoneFailed is the message of a failed zone answer, for the search path,
// which reads the rcode of what a stage holds (a written SERVFAIL wins a
// step); the reply to the client is the pipeline's SERVFAIL (errZone).
// Read-only.
var zoneFailed = &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure, Authoritative: true}}

// maxZoneDepth bounds the file zones' CNAME targets looked up through the
// stages within one query (CoreDNS's file stops past 8 loops).
const maxZoneDepth = 8

// zoneFile turns a file zone's answer into the stage order's: a CNAME
// target the zone does not hold is looked up through every stage, dns64
// included (CoreDNS's file asks its whole server) and handed back to the zone, which
// completes the answer. Without c.wait that lookup waits. A zone that
// cannot answer is a SERVFAIL the pipeline writes (errZone), as CoreDNS's
// server writes it for the file plugin.
func (p *Pipeline) zoneFile(c *call, za stage.ZoneAnswer, qtype uint16) answer {
	res := stage.Result{Source: stage.SourceFile}
	switch {
	case za.Failed:
		res.Msg = zoneFailed
		return answer{Result: res, err: errZone}
	case za.Target == "":
		res.Msg = za.Msg
		return answer{Result: res}
	case !c.wait:
		return answer{wait: true}
	case c.zoneDepth >= maxZoneDepth:
		res.Msg = zoneFailed
		return answer{Result: res, err: errZone}
	}
	c.zoneDepth++
	// Through dns64 too (lookupTarget): CoreDNS's file asks its whole
	// server, so an AAAA target with only A records comes back translated
	// and the zone's reply, holding an AAAA record, keeps its AA.
	a := p.lookupTarget(c, za.Target, qtype)
	c.zoneDepth--
	failed := a.err != nil || a.Msg == nil
	if a.Source == stage.SourceStale && !failed {
		c.ede.stale(a.Msg.Rcode)
	}
	res.Msg = za.Finish(a.Msg, failed)
	return answer{Result: res}
}
