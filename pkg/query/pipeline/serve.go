package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// call is one query being answered: the transport's request and what the
// pipeline learns about it on the way. It lives on the stack of Answer,
// Resolve or Refuse; nothing keeps it.
type call struct {
	req *server.Request
	q   *dnswire.Query // &req.Query: the question as asked
	// wait: the call may wait for what it needs (off the reader), until
	// ctx is done. Without it, it stops where a stage would block.
	wait bool
	ctx  context.Context
	// name is the name resolved: the question's, or what a rewrite rule
	// made of it (revert then maps the reply's names back).
	name   string
	revert func(*dns.Msg) *dns.Msg
	// maxSize is the largest reply the client accepts on this transport.
	maxSize int
	// parsed is false when the question could not be read (FORMERR
	// replies then carry no question).
	parsed bool
	// origin is who the query is resolved for, once known (hasOrigin).
	origin    stage.Origin
	hasOrigin bool
	// fail and failErr say why the pipeline answers SERVFAIL, for the
	// failure log (failures.go); empty when a stage answered it.
	fail    string
	failErr error
	// ede are the Extended DNS Errors of the reply (ede.go), sent to a
	// client that sent EDNS.
	ede edeSet
	// hdr are the header plugin's rules, once the reply is a stage's
	// (patchHeader).
	hdr Header
	// noTemplates: a template's CNAME targets are being looked up.
	noTemplates bool
	// zoneDepth counts the file zones' CNAME targets being looked up
	// (zone.go).
	zoneDepth uint8
	// nsid (hasNSID): the NSID option's payload the reply carries (the
	// query asked for it and the nsid plugin is configured).
	nsid    string
	hasNSID bool
	// tapped: the query got past the protocol checks, and its reply is
	// logged to the Tap (its query was, on the reader).
	tapped bool
	// view is the resolver of the view the query is for, once viewDone
	// (views.go); nil: none.
	view     stage.Resolver
	viewDone bool
	// optAt, when not 0, is the offset in the reply being finished of an
	// OPT record the stored reply ends with (a cache hit whose upstream
	// sent EDE options): finish makes it the reply's own.
	optAt int
	// What the Event reports of the upstream (how many exchanges) and of
	// the search path (pkg/ndots's figures).
	upstream int
	sp       ndots.Figures
	// translated counts dns64's translations for this query (the reply's
	// and its CNAME targets').
	translated int
}

// Answer implements server.Handler: it answers req on the reader when no
// stage needs waiting for, else says server.Wait.
func (p *Pipeline) Answer(dst []byte, req *server.Request) ([]byte, server.Verdict) {
	c := call{req: req, q: &req.Query, name: req.Query.Name}
	return p.serve(dst, &c)
}

// Resolve implements server.Handler: the same run as Answer's, allowed to
// wait (at most QueryTimeout).
func (p *Pipeline) Resolve(ctx context.Context, dst []byte, req *server.Request) []byte {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.QueryTimeout)
	defer cancel()
	c := call{req: req, q: &req.Query, name: req.Query.Name, wait: true, ctx: ctx}
	out, _ := p.serve(dst, &c)
	return out
}

// Refuse implements server.Handler: SERVFAIL, at once, for a query the
// transport has no room to resolve.
func (p *Pipeline) Refuse(dst []byte, req *server.Request) []byte {
	// Answer said Wait: the query got past the protocol checks.
	c := call{req: req, q: &req.Query, name: req.Query.Name, parsed: true, fail: failOverloaded, tapped: true}
	c.ede.add(dns.ExtendedErrorCodeOther, edeTextInflight)
	c.setMaxSize(p.cfg.MaxUDPSize)
	return p.reply(dst, &c, dns.RcodeServerFailure, stage.SourceLocal)
}

// serve answers c: first what the pipeline answers itself (check), then
// the rewrite, the search-path walk for a pod's expansion, and the stage
// order (lookup) for everything else. Run without c.wait, it returns
// server.Wait where a stage would block.
func (p *Pipeline) serve(dst []byte, c *call) (out []byte, v server.Verdict) {
	defer func() {
		if x := recover(); x != nil {
			p.cfg.Panics.Caught(p.log, x, "answering a query", "name", c.q.Name, "type", c.q.Type)
			c.fail = failPanic
			c.ede.add(dns.ExtendedErrorCodeOther, edeTextPanic)
			out, v = p.reply(dst, c, dns.RcodeServerFailure, stage.SourceLocal), server.Reply
		}
	}()
	if out, v, done := p.check(dst, c); done {
		return out, v
	}
	if out, done := p.rewrite(dst, c); done {
		return out, server.Reply
	}
	pl := p.plugins.Load()
	if pl != nil {
		if pl.DNS64 != nil && pl.DNS64.Applies(c.req.Client, c.name, c.q.Type, c.q.Class) {
			// Before the access list, which it asks itself (dns64.go).
			c.hdr = pl.Header
			return p.dns64(dst, c, pl)
		}
		if pl.ACL != nil {
			if out, v, done := p.acl(dst, c, pl.ACL); done {
				return out, v
			}
		}
	}
	if c.q.Type == dns.TypeANY {
		// After the access list, as in CoreDNS, whose acl runs before
		// anything answers an ANY question (without its any plugin the
		// stages answer it): `block type ANY` refuses it.
		return p.answerANY(dst, c), server.Reply
	}
	if pl != nil {
		// From here on the reply is a stage's.
		c.hdr = pl.Header
	}
	if ns, ok := p.podQuery(c); ok {
		if out, v, done := p.searchPath(dst, c, ns); done {
			return out, v
		}
	}
	return p.answer(dst, c)
}

// check answers what the pipeline answers itself, before any stage: a
// packet to drop, an unreadable or unsupported query (FORMERR, NOTIMP,
// BADVERS, REFUSED), RFC 8482's minimal ANY. done is false for a query
// the stages answer.
func (p *Pipeline) check(dst []byte, c *call) (out []byte, v server.Verdict, done bool) {
	err := c.req.Err
	switch {
	case errors.Is(err, dnswire.ErrHeader):
		return dst, server.Drop, true
	case c.q.Response():
		// Never answer a response: that is how reflection loops start.
		return dst, server.Drop, true
	case err != nil && c.q.QEnd == 0:
		c.setMaxSize(p.cfg.MaxUDPSize)
		// RFC 8906 §3.1.4 / RFC 1035 §4.1.1: an opcode we do not
		// implement is NOTIMP whatever else the message holds (no
		// question, or one we cannot read), never FORMERR.
		if c.q.Opcode() != dns.OpcodeQuery {
			return p.reply(dst, c, dns.RcodeNotImplemented, stage.SourceLocal), server.Reply, true
		}
		return p.reply(dst, c, dns.RcodeFormatError, stage.SourceLocal), server.Reply, true
	}
	c.parsed = true
	c.setMaxSize(p.cfg.MaxUDPSize)
	switch {
	case c.q.Opcode() != dns.OpcodeQuery:
		// Before the checks of the rest of the message: an UPDATE's
		// sections, say, are not ours to judge.
		return p.reply(dst, c, dns.RcodeNotImplemented, stage.SourceLocal), server.Reply, true
	case err != nil: // the question read, the rest did not (bad or repeated OPT)
		return p.reply(dst, c, dns.RcodeFormatError, stage.SourceLocal), server.Reply, true
	case c.q.QDCount != 1:
		return p.reply(dst, c, dns.RcodeFormatError, stage.SourceLocal), server.Reply, true
	case c.q.EDNS && c.q.EDNSVersion != 0:
		return p.reply(dst, c, dns.RcodeBadVers, stage.SourceLocal), server.Reply, true
	}
	// What CoreDNS's server hands its plugins, dnstap first: the query is
	// logged once, on the reader (Resolve runs these checks again).
	c.tapped = true
	if p.cfg.Tap != nil && !c.wait {
		p.cfg.Tap.ClientQuery(c.req.Proto == "tcp", netip.AddrPortFrom(c.req.Client, c.req.ClientPort), c.req.Received, c.req.Packet)
	}
	if pl := p.plugins.Load(); pl != nil {
		if c.q.NSID && pl.NSID != nil && pl.NSID.covers(c.q.Name) {
			// From here on every reply carries the NSID option, as
			// CoreDNS's nsid wraps the writer of every plugin after it.
			c.nsid, c.hasNSID = pl.NSID.Data, true
		}
		if out, done := p.builtin(dst, c, pl); done {
			return out, server.Reply, true
		}
	}
	switch {
	case c.q.Class != dns.ClassINET:
		c.hasNSID = false // CoreDNS's server refuses it, not a plugin
		c.ede.add(dns.ExtendedErrorCodeNotSupported, edeTextClass)
		return p.reply(dst, c, dns.RcodeRefused, stage.SourceLocal), server.Reply, true
	}
	switch c.q.Type {
	case dns.TypeAXFR, dns.TypeIXFR:
		// A policy: the whole cluster zone would list every Service.
		// CoreDNS's plugins refuse it with an rcode the server writes:
		// no NSID.
		c.hasNSID = false
		c.ede.add(dns.ExtendedErrorCodeProhibited, edeTextTransfer)
		return p.reply(dst, c, dns.RcodeRefused, stage.SourceLocal), server.Reply, true
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeMAILA, dns.TypeMAILB, 0:
		c.hasNSID = false
		return p.reply(dst, c, dns.RcodeFormatError, stage.SourceLocal), server.Reply, true
	}
	return dst, 0, false
}

// answerANY answers an ANY question as RFC 8482 says: a minimal answer
// instead of everything we know (serve, once the access list let it by).
func (p *Pipeline) answerANY(dst []byte, c *call) []byte {
	m := &dns.Msg{Answer: []dns.RR{&dns.HINFO{
		Hdr: dns.RR_Header{Name: c.q.Name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: 3600},
		Cpu: "RFC8482"}}}
	c.ede.add(dns.ExtendedErrorCodeSynthesized, edeTextANY)
	return p.send(dst, c, m, stage.SourceLocal, 0, 0)
}

// rewrite applies the rewriter to c: when a rule applies, c resolves the
// rewritten name from here on and its reply is mapped back. done: the
// rewrite gave an invalid name, and c is answered SERVFAIL.
func (p *Pipeline) rewrite(dst []byte, c *call) (out []byte, done bool) {
	box := p.rewriter.Load()
	if box == nil {
		return dst, false
	}
	to, revert, ok, err := box.rw.Rewrite(c.q.Name)
	if err != nil {
		c.fail, c.failErr = failRewrite, err
		return p.reply(dst, c, dns.RcodeServerFailure, stage.SourceLocal), true
	}
	if ok {
		c.name, c.revert = to, revert
	}
	return dst, false
}

// answer answers c as asked, through the stage order.
func (p *Pipeline) answer(dst []byte, c *call) ([]byte, server.Verdict) {
	start := len(dst)
	f := asWire
	if c.revert != nil {
		f = asMsg // mapped back, then packed
	}
	a, out := p.lookup(c, dst, c.name, c.q.Type, f)
	switch {
	case a.wait:
		return dst, server.Wait
	case a.err != nil:
		// The SERVFAIL CoreDNS's server writes for a plugin that failed
		// (errorFunc), past nsid's writer: no NSID.
		c.hasNSID = false
		c.fail, c.failErr = failureReason(a.err), a.err
		c.ede.failed(a.err)
		return p.reply(dst, c, dns.RcodeServerFailure, a.Source), server.Reply
	case a.wire:
		if a.rcode == dns.RcodeServerFailure {
			c.ede.add(dns.ExtendedErrorCodeCachedError, "")
		}
		// Two loads for a reply without additional records (most).
		if at, ok := dnswire.LastOPT(out[start:]); ok {
			c.optAt = at
		}
		out = p.finish(out, start, c, a.rcode)
		p.observe(c, a.Source, a.rcode, 0, 0, out[start:])
		return out, server.Reply
	case a.stable && c.revert == nil:
		return p.sendPacked(dst, c, a.Msg, a.Source), server.Reply
	}
	return p.send(dst, c, a.Msg, a.Source, 0, 0), server.Reply
}

// answer is what the stage order gives for one question.
type answer struct {
	stage.Result
	// wire: a cache hit appended to the caller's buffer (ID zero,
	// lower-case question, no OPT, AA clear), with its rcode.
	wire  bool
	rcode int
	// stable: Msg is the stage's own (static records, the cluster zone),
	// the same for the question until its records change, so its packed
	// form may be kept.
	stable bool
	// stored is the cache's stored reply a message was unpacked from
	// (asMsgRef).
	stored stage.StoredHit
	// wait: a stage would block (only without call.wait).
	wait bool
	err  error
}

// form is how lookup hands back a cache hit found without waiting.
type form uint8

const (
	asWire   form = iota // appended to the caller's buffer
	asMsg                // unpacked into a message
	asMsgRef             // unpacked, with the stored reply (to keep a shortcut on)
)

// lookup resolves (name, qtype) through the stages, in the one order the
// pipeline has: static records, the cluster zone, then cache and upstream
// (the Resolver, or Route's for a routed zone). Every path uses it: a
// query as asked, each step of the search-path walk, an ExternalName's
// target, a rewritten name.
//
// Without c.wait (on the reader) it stops with a.wait where a stage would
// block: a cluster name before the sync or an ExternalName, a cache miss.
// A cache hit is then handed back as f says; with c.wait the cache and
// upstream answer through Resolve.
func (p *Pipeline) lookup(c *call, dst []byte, name string, qtype uint16, f form) (answer, []byte) {
	if c.wait {
		p.loop.saw(name)
	}
	if a, ok := p.held(c, name, qtype); ok {
		switch {
		case !a.NotSynced && a.ExternalTarget == "":
			return a, dst
		case !c.wait:
			return answer{wait: true}, dst
		case a.NotSynced:
			return p.beforeSync(c, name, qtype), dst
		}
		return p.externalName(c, a.Result, qtype), dst
	}
	r := p.resolver(c, name)
	if c.wait {
		return p.resolve(c, r, name, qtype), dst
	}
	cache := stage.Result{Source: stage.SourceCache}
	if f == asWire {
		start := len(dst)
		out, rcode, ok := r.AppendHit(dst, name, qtype, c.q.Class, c.q.DO, c.q.CD())
		if !ok {
			return answer{wait: true}, dst
		}
		// Not authoritative: a cached answer (RFC 1035 §4.1.1; as
		// unbound; CoreDNS 1.15 passes the upstream's AA on).
		out[start+2] &^= dnswire.FlagAA >> 8
		return answer{Result: cache, wire: true, rcode: rcode}, out
	}
	var (
		wire []byte
		ok   bool
		ref  stage.StoredHit
	)
	if f == asMsgRef {
		wire, _, ref, ok = r.AppendHitRef(nil, name, qtype, c.q.Class, c.q.DO, c.q.CD())
	} else {
		wire, _, ok = r.AppendHit(nil, name, qtype, c.q.Class, c.q.DO, c.q.CD())
	}
	if !ok {
		return answer{wait: true}, dst
	}
	if cache.Msg = new(dns.Msg); cache.Msg.Unpack(wire) != nil {
		return answer{wait: true}, dst
	}
	cache.Msg.Authoritative = false
	return answer{Result: cache, stored: ref}, dst
}

// held answers (name, qtype) from the stages that hold their own records,
// in the stage order: the templates, the static records, the cluster zone.
// ok is false when none holds the name. A cluster answer may still be
// pending (NotSynced, ExternalTarget): lookup resolves it.
func (p *Pipeline) held(c *call, name string, qtype uint16) (a answer, ok bool) {
	// One load of the plugins: a configuration reload between the template
	// and the k8s_external lookups must not answer from two generations.
	pl := p.plugins.Load()
	if pl != nil && pl.Templates != nil && !c.noTemplates {
		if a, ok := p.template(c, pl.Templates, name, qtype); ok {
			return a, true
		}
	}
	if p.cfg.Hosts != nil {
		if res, ok := p.cfg.Hosts.Lookup(name, qtype); ok {
			res.Source = stage.SourceHosts
			return answer{Result: res, stable: true}, true
		}
	}
	if pl != nil && pl.External != nil {
		if res, ok := pl.External.Lookup(name, qtype); ok {
			res.Source = stage.SourceCluster
			return answer{Result: res}, true
		}
	}
	if p.cfg.Cluster != nil {
		if res, ok := p.cfg.Cluster.Lookup(name, qtype); ok {
			res.Source = stage.SourceCluster
			return answer{Result: res, stable: !res.NotSynced && res.ExternalTarget == ""}, true
		}
	}
	if p.cfg.Files != nil {
		if za, ok := p.cfg.Files.Lookup(name, qtype); ok {
			return p.zoneFile(c, za, qtype), true
		}
	}
	return answer{}, false
}

// resolve asks r (cache, then upstream) for (name, qtype), waiting.
func (p *Pipeline) resolve(c *call, r stage.Resolver, name string, qtype uint16) answer {
	res, err := r.Resolve(c.ctx, p.origin(c), query(name, qtype, c.q.DO, c.q.CD()))
	if res.Source == "" {
		res.Source = stage.SourceUpstream
	}
	if res.Source != stage.SourceCache {
		c.upstream++
	}
	if err != nil {
		return answer{Result: stage.Result{Source: res.Source}, err: err}
	}
	if res.Msg.Truncated {
		return answer{Result: stage.Result{Source: res.Source}, err: errTruncated}
	}
	if res.Msg.Authoritative {
		// An answer we forwarded or cached is not ours to call
		// authoritative (RFC 1035 §4.1.1), whatever the upstream said:
		// as unbound, which never sets AA on recursion (CoreDNS 1.15
		// passes the upstream's AA on, miss and hit alike).
		// The message is shared and read-only: a copy of the header,
		// the sections shared.
		m := *res.Msg
		m.Authoritative = false
		res.Msg = &m
	}
	return answer{Result: res}
}

// origin is who c is resolved for, so that the forwarder can keep each
// client's (and namespace's) share of its slots.
func (p *Pipeline) origin(c *call) stage.Origin {
	if !c.hasOrigin {
		c.origin, c.hasOrigin = stage.Origin{Client: c.req.Client}, true
		if p.cfg.Pods != nil {
			c.origin.Namespace, _ = p.cfg.Pods.PodNamespace(c.req.Client)
		}
	}
	return c.origin
}

func query(name string, qtype uint16, do, cd bool) *dns.Msg {
	q := &dns.Msg{MsgHdr: dns.MsgHdr{Id: dns.Id(), RecursionDesired: true, CheckingDisabled: cd}}
	q.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	if do {
		q.SetEdns0(ourUDPSize, true)
	}
	return q
}

// beforeSync answers a cluster name while the cluster has not synced: from
// the central cluster DNS when one is configured, else SERVFAIL. Never a
// false NXDOMAIN.
func (p *Pipeline) beforeSync(c *call, name string, qtype uint16) answer {
	if p.cfg.ClusterDNS == nil {
		return answer{Result: stage.Result{Source: stage.SourceCluster}, err: errNotSynced}
	}
	upstream := stage.Result{Source: stage.SourceUpstream}
	c.upstream++
	m, err := p.cfg.ClusterDNS.Exchange(c.ctx, p.origin(c), query(name, qtype, false, false))
	if err == nil && m.Truncated {
		err = errTruncated
	}
	if err != nil {
		return answer{Result: upstream, err: fmt.Errorf("%w before sync: %w", errClusterDNS, err)}
	}
	upstream.Msg = m
	return answer{Result: upstream}
}

// maxChain bounds the CNAME hops followed for an ExternalName target.
const maxChain = 10

// externalName appends the answer for an ExternalName's out-of-zone target
// to the cluster's CNAME. Like CoreDNS, the target's NXDOMAIN does not
// become the reply's: the CNAME itself exists. A target the upstream
// could not resolve (SERVFAIL, REFUSED or any other error rcode, a cached
// SERVFAIL) is a SERVFAIL, with the target's EDE options: the CNAME alone
// with NOERROR would read as "no such record" to the client, which stops
// looking. CoreDNS 1.15 sends that NOERROR; a stated departure
// (docs/cluster-zone.md).
func (p *Pipeline) externalName(c *call, res stage.Result, qtype uint16) answer {
	out := &dns.Msg{MsgHdr: res.Msg.MsgHdr, Answer: append([]dns.RR(nil), res.Msg.Answer...)}
	cluster := stage.Result{Msg: out, Source: stage.SourceCluster}
	if qtype == dns.TypeCNAME {
		return answer{Result: cluster}
	}
	a := p.lookupTarget(c, res.ExternalTarget, qtype)
	if f, failed := targetFailed(c, a, "ExternalName", res.ExternalTarget); failed {
		return f
	}
	if a.Source == stage.SourceStale {
		c.ede.stale(a.Msg.Rcode)
	}
	// The target's message may be a stage's own: its sections are read,
	// never cut in place.
	target := a.Msg.Answer
	if len(target) > maxChain {
		target = target[:maxChain]
	}
	for range max(res.TargetTimes, 1) {
		out.Answer = append(out.Answer, target...)
	}
	if len(target) == 0 && !res.TargetAnswerOnly {
		out.Ns = a.Msg.Ns
	}
	return answer{Result: cluster}
}

// targetFailed returns the answer of a CNAME whose target (what, name: an
// ExternalName's, a template's) could not be resolved, a the target's
// lookup: failed false when it was (an answer, NODATA or NXDOMAIN). An
// error stays the error; a SERVFAIL, REFUSED or other error rcode becomes
// a SERVFAIL with the target's EDE options, from the target's source (a
// cached SERVFAIL says so, EDE 13). Never the CNAME alone with NOERROR:
// the client would read "no such record" and stop looking.
func targetFailed(c *call, a answer, what, name string) (answer, bool) {
	if a.err != nil {
		return answer{Result: stage.Result{Source: a.Source}, err: fmt.Errorf("resolving %s target %s: %w", what, name, a.err)}, true
	}
	if rc := a.Msg.Rcode; rc == dns.RcodeSuccess || rc == dns.RcodeNameError {
		return answer{}, false
	}
	c.ede.passOn(a.Msg)
	fail := &dns.Msg{MsgHdr: a.Msg.MsgHdr}
	fail.Rcode = dns.RcodeServerFailure
	return answer{Result: stage.Result{Msg: fail, Source: a.Source}}, true
}

// send encodes m as the reply to c, appends it and reports it.
func (p *Pipeline) send(dst []byte, c *call, m *dns.Msg, src stage.Source, steps, saved int) []byte {
	if c.revert != nil {
		m = c.revert(m)
	}
	switch {
	case src == stage.SourceStale:
		c.ede.stale(m.Rcode)
	case src == stage.SourceCache && m.Rcode == dns.RcodeServerFailure:
		c.ede.add(dns.ExtendedErrorCodeCachedError, "")
	}
	out := p.encode(dst, c, m)
	rcode := m.Rcode
	if c.fail == failPack {
		rcode = dns.RcodeServerFailure
	}
	p.observe(c, src, rcode, steps, saved, out[len(dst):])
	return out
}

// reply appends an error reply and reports it.
func (p *Pipeline) reply(dst []byte, c *call, rcode int, src stage.Source) []byte {
	out := p.errorReply(dst, c, rcode)
	p.observe(c, src, rcode, 0, 0, out[len(dst):])
	return out
}

// observe reports the answer to c (reply: its wire form as sent), and
// logs it (rate-limited) when it is a SERVFAIL.
func (p *Pipeline) observe(c *call, src stage.Source, rcode, steps, saved int, reply []byte) {
	if rcode == dns.RcodeServerFailure && p.cfg.Failures != nil {
		p.logFailure(c, src)
	}
	now := time.Now()
	if c.tapped && p.cfg.Tap != nil {
		p.cfg.Tap.ClientResponse(c.req.Proto == "tcp", netip.AddrPortFrom(c.req.Client, c.req.ClientPort), c.req.Received, now, reply)
	}
	if p.cfg.Observer == nil {
		return
	}
	ev := Event{Source: src, Rcode: rcode, Proto: c.req.Proto, Client: c.req.Client, Name: c.q.Name,
		Qtype: c.q.Type, Duration: now.Sub(c.req.Received), AutopathSteps: steps, AutopathSaved: saved,
		Listener: c.req.Listener, RequestSize: len(c.req.Packet), ResponseSize: len(reply), DO: c.q.DO,
		Upstream: c.upstream, SearchWinner: -1, DNS64Translated: c.translated}
	if len(reply) >= dnswire.HeaderLen {
		ev.Answers = int(reply[6])<<8 | int(reply[7])
		ev.Truncated = reply[2]&0x02 != 0
	}
	if c.hasOrigin || p.cfg.ClientNamespaces && p.cfg.Pods != nil {
		ev.Namespace = p.origin(c).Namespace
	}
	if ev.Namespace != "" {
		if !c.sp.Expansion && rcode == dns.RcodeNameError {
			c.sp = p.search.Missed(c.name, ev.Namespace)
		}
		ev.Expansion = c.sp.Expansion
		if c.sp.First {
			ev.SearchBase = c.sp.Base(c.name)
			ev.SearchList, ev.SearchWinner = c.sp.List, c.sp.Won
		}
	}
	p.cfg.Observer.Observe(ev)
}
