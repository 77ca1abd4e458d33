package server

import (
	"strings"

	"github.com/miekg/dns"
)

// NameRewriter rewrites query names before resolution (pkg/query/rewrite), as
// CoreDNS's rewrite plugin, which comes before everything else. It must be
// safe for concurrent use, and allocate nothing for a name it does not
// rewrite: it is asked about every query, on the reader.
type NameRewriter interface {
	// Rewrite returns the name to resolve instead of name (both lower-case
	// FQDNs) and revert, which returns a copy of a reply for it with the
	// names mapped back to those the client asked (it must not modify the
	// message it is given). ok is false when no rule applies; err means
	// the rewrite gave an invalid name (the client gets SERVFAIL).
	Rewrite(name string) (to string, revert func(*dns.Msg) *dns.Msg, ok bool, err error)
}

type rewriterBox struct{ rw NameRewriter }

// SetRewriter replaces the name rewriter while the server runs (nil: no
// rewriting). Queries under way finish with the old one.
func (s *Server) SetRewriter(rw NameRewriter) {
	if rw == nil {
		s.rewriter.Store(nil)
		return
	}
	s.rewriter.Store(&rewriterBox{rw: rw})
}

// rewriteQuery applies the rewriter to r. done false: no rule applied, and
// r continues unchanged. Otherwise r now asks for the rewritten name and
// takes the message path (a rewritten reply is mapped back, then packed):
// what needs no waiting is answered here, the rest off the reader.
func (s *Server) rewriteQuery(dst []byte, r *request) (out []byte, v verdict, done bool) {
	box := s.rewriter.Load()
	if box == nil {
		return dst, 0, false
	}
	to, revert, ok, err := box.rw.Rewrite(r.q.Name)
	if err != nil {
		r.fail, r.failErr = failRewrite, err
		return s.reply(dst, r, dns.RcodeServerFailure, SourceLocal), verdictReply, true
	}
	if !ok {
		return dst, 0, false
	}
	// The asked name lives in the reader's buffer; the request may go to a
	// goroutine.
	r.asked, r.q.Name, r.revert = strings.Clone(r.q.Name), to, revert
	if _, _, ok := s.walkTarget(r); ok {
		// A search-path expansion of a rewritten name: the walk off the
		// reader, whose reply is mapped back. The wire-form shortcuts
		// are kept for names as asked and are not used here.
		return dst, verdictSlow, true
	}
	if m, src, ok := s.peekAnswer(r); ok {
		return s.send(dst, r, m, src, 0, 0), verdictReply, true
	}
	return dst, verdictSlow, true
}

// peekAnswer is the answer to r that needs no waiting (static records,
// the cluster zone, a fresh cache entry), with its source.
func (s *Server) peekAnswer(r *request) (*dns.Msg, Source, bool) {
	if s.cfg.Hosts != nil {
		if m, ok := s.cfg.Hosts.Lookup(r.q.Name, r.q.Type); ok {
			return m, SourceHosts, true
		}
	}
	if s.cfg.Cluster != nil {
		if res, ok := s.cfg.Cluster.Lookup(r.q.Name, r.q.Type); ok {
			if res.NotSynced || res.ExternalTarget != "" {
				return nil, "", false
			}
			return res.Msg, SourceCluster, true
		}
	}
	if s.cfg.HitCache != nil {
		if m, ok := s.cfg.HitCache.Peek(r.q.Name, r.q.Type, r.q.Class, r.q.DO, r.q.CD()); ok {
			return m, SourceCache, true
		}
	}
	return nil, "", false
}

// askedName is the name the client asked (lower-case), whatever it was
// rewritten to.
func (r *request) askedName() string {
	if r.asked != "" {
		return r.asked
	}
	return r.q.Name
}
