package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/autopath"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/origin"
)

// verdict is what the reader does with a packet.
type verdict int

const (
	verdictDrop  verdict = iota // not answered at all
	verdictReply                // dst holds the reply
	verdictSlow                 // resolve off the reader
)

// fast handles everything that needs no waiting: validation and error
// replies, RFC 8482 ANY, cluster answers, cache hits. It appends a reply to
// dst (verdictReply), or says the packet must be dropped or resolved off
// the reader.
func (s *Server) fast(dst []byte, r *request) (out []byte, v verdict) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Panics.Caught(s.log, p, "answering a query", "name", r.q.Name, "type", r.q.Type)
			r.fail = failPanic
			out, v = s.reply(dst[:0], r, dns.RcodeServerFailure, SourceLocal), verdictReply
		}
	}()
	err := dnswire.ParseQuery(r.raw, &r.q)
	switch {
	case errors.Is(err, dnswire.ErrHeader):
		return dst, verdictDrop
	case r.q.Response():
		// Never answer a response: that is how reflection loops start.
		return dst, verdictDrop
	case err != nil && r.q.QEnd == 0:
		r.setMaxSize(s.cfg.MaxUDPSize)
		// RFC 8906 §3.1.4 / RFC 1035 §4.1.1: an opcode we do not
		// implement is NOTIMP whatever else the message holds (no
		// question, or one we cannot read), never FORMERR.
		if r.q.Opcode() != dns.OpcodeQuery {
			return s.reply(dst, r, dns.RcodeNotImplemented, SourceLocal), verdictReply
		}
		return s.reply(dst, r, dns.RcodeFormatError, SourceLocal), verdictReply
	}
	r.parsed = true
	r.setMaxSize(s.cfg.MaxUDPSize)
	switch {
	case r.q.Opcode() != dns.OpcodeQuery:
		// Before the checks of the rest of the message: an UPDATE's
		// sections, say, are not ours to judge.
		return s.reply(dst, r, dns.RcodeNotImplemented, SourceLocal), verdictReply
	case err != nil: // the question read, the rest did not (bad or repeated OPT)
		return s.reply(dst, r, dns.RcodeFormatError, SourceLocal), verdictReply
	case r.q.QDCount != 1:
		return s.reply(dst, r, dns.RcodeFormatError, SourceLocal), verdictReply
	case r.q.EDNS && r.q.EDNSVersion != 0:
		return s.reply(dst, r, dns.RcodeBadVers, SourceLocal), verdictReply
	case r.q.Class != dns.ClassINET:
		return s.reply(dst, r, dns.RcodeRefused, SourceLocal), verdictReply
	}
	switch r.q.Type {
	case dns.TypeAXFR, dns.TypeIXFR:
		return s.reply(dst, r, dns.RcodeRefused, SourceLocal), verdictReply
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeMAILA, dns.TypeMAILB, 0:
		return s.reply(dst, r, dns.RcodeFormatError, SourceLocal), verdictReply
	case dns.TypeANY:
		// RFC 8482: a minimal answer instead of everything we know.
		m := &dns.Msg{Answer: []dns.RR{&dns.HINFO{
			Hdr: dns.RR_Header{Name: r.q.Name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: 3600},
			Cpu: "RFC8482"}}}
		return s.send(dst, r, m, SourceLocal, 0, 0), verdictReply
	}
	if out, v, done := s.rewriteQuery(dst, r); done {
		return out, v
	}
	if ns, base, ok := s.walkTarget(r); ok {
		// A pod's first search-path expansion: a shortcut kept from an
		// earlier query, the name itself in the cluster, or a walk whose
		// winner is remembered and at hand; else the walk, off the
		// reader.
		if out, ok := s.shortcutHit(dst, r, ns); ok {
			return out, verdictReply
		}
		if out, ok := s.asAsked(dst, r); ok {
			return out, verdictReply
		}
		if out, ok := s.walkFast(dst, r, ns, base); ok {
			return out, verdictReply
		}
		return dst, verdictSlow
	}
	if s.cfg.Hosts != nil {
		if m, ok := s.cfg.Hosts.Lookup(r.q.Name, r.q.Type); ok {
			return s.sendCluster(dst, r, m, SourceHosts), verdictReply
		}
	}
	if s.cfg.Cluster != nil {
		if res, ok := s.cfg.Cluster.Lookup(r.q.Name, r.q.Type); ok {
			if res.NotSynced || res.ExternalTarget != "" {
				return dst, verdictSlow
			}
			return s.sendCluster(dst, r, res.Msg, SourceCluster), verdictReply
		}
	}
	if s.cfg.HitCache != nil {
		start := len(dst)
		if out, rcode, ok := s.cfg.HitCache.AppendHit(dst, r.q.Name, r.q.Type, r.q.Class, r.q.DO, r.q.CD()); ok {
			// Not authoritative: a cached answer (RFC 1035 §4.1.1; as
			// unbound; CoreDNS 1.15 passes the upstream's AA on).
			out[start+2] &^= dnswire.FlagAA >> 8
			out = s.finish(out, start, r, rcode)
			s.observe(r, SourceCache, rcode, 0, 0, out[start:])
			return out, verdictReply
		}
	}
	return dst, verdictSlow
}

// slow resolves what fast could not, off the reader, and appends the reply.
func (s *Server) slow(ctx context.Context, dst []byte, r *request) (out []byte) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Panics.Caught(s.log, p, "answering a query", "name", r.q.Name, "type", r.q.Type)
			r.fail = failPanic
			out = s.reply(dst[:0], r, dns.RcodeServerFailure, SourceLocal)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	// Who the query is for, so that the forwarder can keep each client's
	// (and namespace's) share of its slots (pkg/query/origin).
	o := origin.Origin{Client: r.client}
	if s.cfg.Pods != nil {
		o.Namespace, _ = s.cfg.Pods.PodNamespace(r.client)
	}
	ctx = origin.With(ctx, o)
	if _, _, ok := s.walkTarget(r); ok {
		if m, steps, saved, ok := s.walk(ctx, r); ok {
			return s.send(dst, r, m, SourceAutopath, steps, saved)
		}
	}
	m, src, err := s.answer(ctx, r.q.Name, r.q.Type, r.q.DO, r.q.CD())
	if err != nil {
		r.fail, r.failErr = failureReason(err), err
		return s.reply(dst, r, dns.RcodeServerFailure, src)
	}
	return s.send(dst, r, m, src, 0, 0)
}

// answer resolves one (name, type): static records, then the cluster zone
// when the name is the cluster's, else cache and upstream. It is the step
// the search-path walk repeats.
func (s *Server) answer(ctx context.Context, name string, qtype uint16, do, cd bool) (*dns.Msg, Source, error) {
	if loop := s.loopName.Load().(string); loop != "" && name == loop {
		s.loopSeen.Add(1)
	}
	if s.cfg.Hosts != nil {
		if m, ok := s.cfg.Hosts.Lookup(name, qtype); ok {
			return m, SourceHosts, nil
		}
	}
	if s.cfg.Cluster != nil {
		if res, ok := s.cfg.Cluster.Lookup(name, qtype); ok {
			switch {
			case res.NotSynced:
				return s.beforeSync(ctx, name, qtype)
			case res.ExternalTarget != "":
				return s.externalName(ctx, res, qtype, do, cd)
			}
			return res.Msg, SourceCluster, nil
		}
	}
	q := query(name, qtype, do, cd)
	m, fromCache, stale, err := s.cfg.Resolver.Resolve(ctx, q)
	src := SourceUpstream
	switch {
	case stale:
		src = SourceStale
	case fromCache:
		src = SourceCache
	}
	if err != nil {
		return nil, src, err
	}
	if m.Authoritative {
		// An answer we forwarded or cached is not ours to call
		// authoritative (RFC 1035 §4.1.1), whatever the upstream said:
		// as unbound, which never sets AA on recursion (CoreDNS 1.15
		// passes the upstream's AA on, miss and hit alike).
		// m is shared and read-only: a copy of the header, the sections
		// shared.
		c := *m
		c.Authoritative = false
		m = &c
	}
	return m, src, nil
}

func query(name string, qtype uint16, do, cd bool) *dns.Msg {
	q := &dns.Msg{MsgHdr: dns.MsgHdr{Id: dns.Id(), RecursionDesired: true, CheckingDisabled: cd}}
	q.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	if do {
		q.SetEdns0(ourUDPSize, true)
	}
	return q
}

// beforeSync answers a cluster name while the index has not synced: from
// the central cluster DNS when one is configured, else SERVFAIL. Never a
// false NXDOMAIN.
func (s *Server) beforeSync(ctx context.Context, name string, qtype uint16) (*dns.Msg, Source, error) {
	if s.cfg.ClusterDNS == nil {
		return nil, SourceCluster, errNotSynced
	}
	m, err := s.cfg.ClusterDNS.Exchange(ctx, query(name, qtype, false, false))
	if err != nil {
		return nil, SourceUpstream, fmt.Errorf("%w before sync: %w", errClusterDNS, err)
	}
	return m, SourceUpstream, nil
}

// maxChain bounds the CNAME hops followed for an ExternalName target.
const maxChain = 10

// externalName appends the answer for an ExternalName's out-of-zone target
// to the cluster's CNAME. Like CoreDNS, the target's rcode does not become
// the reply's: the CNAME itself exists.
func (s *Server) externalName(ctx context.Context, res ClusterResult, qtype uint16, do, cd bool) (*dns.Msg, Source, error) {
	out := &dns.Msg{MsgHdr: res.Msg.MsgHdr, Answer: append([]dns.RR(nil), res.Msg.Answer...)}
	if qtype == dns.TypeCNAME {
		return out, SourceCluster, nil
	}
	m, src, err := s.answer(ctx, res.ExternalTarget, qtype, do, cd)
	if err != nil {
		return nil, src, fmt.Errorf("resolving ExternalName target %s: %w", res.ExternalTarget, err)
	}
	if len(m.Answer) > maxChain {
		m.Answer = m.Answer[:maxChain]
	}
	out.Answer = append(out.Answer, m.Answer...)
	if len(m.Answer) == 0 {
		out.Ns = m.Ns
	}
	return out, SourceCluster, nil
}

// send encodes m as the reply to r, appends it and reports it.
func (s *Server) send(dst []byte, r *request, m *dns.Msg, src Source, steps, saved int) []byte {
	if r.revert != nil {
		m = r.revert(m)
	}
	out := s.encode(dst, r, m)
	rcode := m.Rcode
	if r.fail == failPack {
		rcode = dns.RcodeServerFailure
	}
	s.observe(r, src, rcode, steps, saved, out[len(dst):])
	return out
}

// reply appends an error reply and reports it.
func (s *Server) reply(dst []byte, r *request, rcode int, src Source) []byte {
	out := s.errorReply(dst, r, rcode)
	s.observe(r, src, rcode, 0, 0, out[len(dst):])
	return out
}

// observe reports the answer to r (reply: its wire form as sent), and
// logs it (rate-limited) when it is a SERVFAIL.
func (s *Server) observe(r *request, src Source, rcode, steps, saved int, reply []byte) {
	if rcode == dns.RcodeServerFailure && s.cfg.Failures != nil {
		s.logFailure(r, src)
	}
	if s.cfg.Observer == nil {
		return
	}
	ev := Event{Source: src, Rcode: rcode, Proto: r.proto, Client: r.client, Name: r.askedName(),
		Qtype: r.q.Type, Duration: time.Since(r.start), AutopathSteps: steps, AutopathSaved: saved,
		Listener: r.listener, RequestSize: len(r.raw), ResponseSize: len(reply), DO: r.q.DO}
	if len(reply) >= dnswire.HeaderLen {
		ev.Answers = int(reply[6])<<8 | int(reply[7])
		ev.Truncated = reply[2]&0x02 != 0
	}
	s.cfg.Observer.Observe(ev)
}

// walkTarget reports whether r is a search-path expansion the server
// should walk itself: the first expansion, `<base>.<ns>.svc.<zone>`, of
// the search list of a pod of this node in namespace ns.
func (s *Server) walkTarget(r *request) (ns, base string, ok bool) {
	if !s.walkConf().autopath || s.cfg.Pods == nil || s.cfg.Cluster == nil {
		return "", "", false
	}
	zone := s.cfg.Cluster.Zone()
	// Under ".svc.<zone>" (no concatenation: it would allocate for a
	// long zone).
	if n := len(r.q.Name) - len(zone); n < 5 || r.q.Name[n:] != zone || r.q.Name[n-5:n] != ".svc." {
		return "", "", false
	}
	if ns, ok = s.cfg.Pods.PodNamespace(r.client.Unmap()); !ok {
		return "", "", false
	}
	base, ok = autopath.Split(r.q.Name, ns, zone)
	return ns, base, ok
}
