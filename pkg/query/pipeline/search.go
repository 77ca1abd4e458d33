package pipeline

import (
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// The search path's side in the pipeline: which queries it is asked about
// (podQuery), and the stage order and access list it is given to walk
// with (ndots.Stages). The walk, its decisions and its shortcut replies
// are pkg/ndots's; the pipeline calls it once a query and encodes what it
// decided.

// podQuery returns the namespace of c's client when c may be a search-path
// expansion: the walk is on, the name is under `svc.<zone>`, and the
// client is a pod of this node. Whether it is the first expansion of the
// pod's own list, `<base>.<ns>.svc.<zone>`, is pkg/ndots's to say.
func (p *Pipeline) podQuery(c *call) (ns string, ok bool) {
	if !p.search.Settings().Autopath || p.cfg.Pods == nil || p.cfg.Cluster == nil {
		return "", false
	}
	zone := p.cfg.Cluster.Zone()
	// Under ".svc.<zone>" (no concatenation: it would allocate for a
	// long zone).
	if n := len(c.name) - len(zone); n < 5 || c.name[n:] != zone || c.name[n-5:n] != ".svc." {
		return "", false
	}
	ns, ok = p.cfg.Pods.PodNamespace(c.req.Client)
	c.origin, c.hasOrigin = stage.Origin{Client: c.req.Client, Namespace: ns}, true
	return ns, ok
}

// searchPath answers c, from a pod of namespace ns, when it is the first
// expansion of the pod's search list (pkg/ndots's Serve). done is false
// when c is no such expansion, or the walk cannot decide (an expansion
// failed): c is then answered as asked and the client walks its list
// itself, exactly as without autopath.
func (p *Pipeline) searchPath(dst []byte, c *call, ns string) ([]byte, server.Verdict, bool) {
	q := ndots.Query{Name: c.name, Asked: c.q.Name, Type: c.q.Type, DO: c.q.DO, CD: c.q.CD(), NS: ns,
		Wait: c.wait, Rewritten: c.revert != nil, NoShortcuts: p.views != nil,
		Now: c.req.Received.UnixNano()}
	st := ndots.Stages{
		Resolve: func(name string, qtype uint16, keep bool) (ndots.Answer, error) {
			f := asMsg
			if keep {
				f = asMsgRef
			}
			a, _ := p.lookup(c, nil, name, qtype, f)
			return a.step(), a.err
		},
		Held: func(name string, qtype uint16) (ndots.Answer, bool) {
			a, ok := p.held(c, name, qtype)
			return a.step(), ok
		},
		Pack: func(m *dns.Msg) ([]byte, error) { return p.pack(nil, c, m) },
		Conf: p.confGeneration,
	}
	// The access list asks about every step for the client asking
	// (CoreDNS's autopath asks each name through its acl): a name it would
	// not answer leaves the walk undecided, and the client walks its list
	// itself, each query judged as asked. One snapshot for the query: a
	// decision or shortcut made under a reload's race carries the old
	// configuration generation and is not used again.
	if pl := p.plugins.Load(); pl != nil && pl.ACL != nil && pl.ACL.ByName() {
		acl := pl.ACL
		st.Allowed = func(name string) bool { return acl.Decide(name, c.q.Type, c.req.Client) == stage.ACLPass }
	}
	start := len(dst)
	r := p.search.Serve(dst, &q, &st)
	c.sp = r.Figures
	if r.Synthesized {
		c.ede.add(dns.ExtendedErrorCodeSynthesized, edeTextSearch)
	}
	if r.Outcome == ndots.Walked && r.Answer.Source == stage.SourceStale {
		c.ede.stale(r.Answer.Msg.Rcode)
	}
	switch r.Outcome {
	case ndots.Wait:
		return dst, server.Wait, true
	case ndots.Shortcut:
		out := p.finish(r.Out, start, c, dns.RcodeSuccess)
		p.observe(c, stage.SourceAutopath, dns.RcodeSuccess, r.Steps, r.Saved, out[start:])
		return out, server.Reply, true
	case ndots.Held:
		if r.Answer.Stable {
			return p.sendPacked(dst, c, r.Answer.Msg, r.Answer.Source), server.Reply, true
		}
		return p.send(dst, c, r.Answer.Msg, r.Answer.Source, 0, 0), server.Reply, true
	case ndots.Walked:
		return p.send(dst, c, r.Msg, stage.SourceAutopath, r.Steps, r.Saved), server.Reply, true
	}
	return dst, 0, false
}

// step is a as the search path sees it.
func (a answer) step() ndots.Answer {
	return ndots.Answer{Result: a.Result, Stored: a.stored, Stable: a.stable, Wait: a.wait}
}

// SetSearchPath turns the search-path walk on or off and replaces the extra
// search domains (lower-case FQDNs). Queries under way finish with the old
// settings. Remembered winners are forgotten: the list they indexed
// changed.
func (p *Pipeline) SetSearchPath(autopath bool, search []string) {
	p.search.Set(ndots.Settings{Autopath: autopath, Search: search})
	// Its decisions and shortcuts are gone with the old settings; the
	// configuration generation moves for those made by queries under way.
	p.Invalidate()
}
