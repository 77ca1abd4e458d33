package server

import (
	"context"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/autopath"
)

// walk answers r by walking the pod's search list on the server: the first
// expansion that is not NXDOMAIN wins and the client gets
// `<asked> CNAME <winner>` plus the winner's answer, in one round trip.
// NODATA at the winner is NODATA for the name asked. ok is false when the
// walk cannot decide (an expansion failed): the query is then answered as
// asked and the client walks its list itself, exactly as without autopath.
//
// steps is how many expansions were resolved; saved how many queries the
// client no longer sends for this type.
func (s *Server) walk(ctx context.Context, r *request) (m *dns.Msg, steps, saved int, ok bool) {
	ns, base, _ := s.walkTarget(r)
	names := autopath.Walk(base, ns, s.cfg.Cluster.Zone(), s.walkConf().search)
	// The winner is remembered per (namespace, base), whatever the type, so
	// that A and AAAA for one name from one pod always take the same path
	// even if some upstream answers the two types inconsistently. The key
	// holds the namespace: one namespace's result is never another's.
	key := ns + "/" + base
	tried := 0
	if e, hit := s.memo.get(key); hit && e.idx < len(names) && !s.stepsStillMissing(names[:e.idx], r.q.Type) {
		// An earlier step exists in the cluster now (a Service created
		// since): the client would stop there, so the walk must too.
		s.memo.forget(e)
	} else if hit && e.idx < len(names) {
		i := e.idx
		m, err := s.step(ctx, r, names[i], r.q.Type)
		if err == nil && (m.Rcode != dns.RcodeNameError || s.stillWins(ctx, r, names[i], e.qtype)) {
			// NXDOMAIN here for a winner that still exists for the type
			// that made it win (an upstream that answers A but not
			// AAAA) becomes NODATA for the name asked: same path.
			return s.walkReply(r, names, i, m), 1, i, true
		}
		// The winner has gone (a deleted Service, say: NXDOMAIN now for
		// the type that won too). Answering from it would turn its
		// NXDOMAIN into an empty NOERROR for the name asked, which stops
		// dig and musl, and the expansions after it would never be
		// tried: walk again from the start instead.
		s.memo.forget(e)
		tried = 1
	}
	var first *dns.Msg
	for i, name := range names {
		m, err := s.step(ctx, r, name, r.q.Type)
		if err != nil {
			return nil, tried + i + 1, 0, false
		}
		if i == 0 {
			first = m
		}
		if m.Rcode == dns.RcodeNameError {
			continue
		}
		s.memo.put(key, i, r.q.Type)
		return s.walkReply(r, names, i, m), tried + i + 1, i, true
	}
	// Nothing exists anywhere: NXDOMAIN for the name asked, with the
	// cluster zone's SOA. The client walks its own list after it (glibc,
	// musl and dig all do), so no query is saved: the later expansions
	// are answered locally or from the cache.
	return first, tried + len(names), 0, true
}

// walkFast answers a walk on the reader when its winner is remembered and
// the winner's answer is at hand without waiting (the cluster index, or a
// fresh cache entry): the common case of a pod looking up a popular name
// again. It keeps the reply it builds as a shortcut (shortcut.go), so the
// next query for the name is a copy of wire bytes. Everything else,
// including a remembered winner that now answers NXDOMAIN, goes to walk,
// off the reader.
func (s *Server) walkFast(dst []byte, r *request, ns, base string) ([]byte, bool) {
	set := s.walkConf()
	e, hit := s.memo.get(ns + "/" + base)
	if !hit {
		return dst, false
	}
	names := autopath.Walk(base, ns, s.cfg.Cluster.Zone(), set.search)
	if e.idx >= len(names) {
		return dst, false
	}
	// The generation is read before any answer: a change after this
	// point moves it, and the shortcut is checked again (shortcut.go).
	gen := s.clusterGen()
	w, ok := s.winnerNow(names[e.idx], r)
	if !ok || w.m.Rcode != dns.RcodeSuccess {
		return dst, false
	}
	// The remembered decision still holds in the cluster zone: every
	// earlier step there is still NXDOMAIN. (A Service created since the
	// walk would otherwise stay hidden until the memo expires.)
	if !s.stepsStillMissing(names[:e.idx], r.q.Type) {
		s.memo.forget(e)
		return dst, false
	}
	m := s.walkReply(r, names, e.idx, w.m)
	s.keepShortcut(r, ns, set, e, names[:e.idx+1], w, m, gen)
	return s.send(dst, r, m, SourceAutopath, 1, e.idx), true
}

// winner is the answer of a walk's winning step, read without waiting.
type winner struct {
	m *dns.Msg
	// cluster: m is the cluster index's message (compared by identity
	// later); else wire is the cached reply as the cache's hit path gave
	// it, and m was unpacked from it.
	cluster bool
	wire    []byte
	// stored is the cache's stored reply (RefHitCache), when it says.
	stored StoredHit
}

// winnerNow returns the answer for (name, r's type) if it needs no waiting.
func (s *Server) winnerNow(name string, r *request) (winner, bool) {
	if s.cfg.Hosts != nil {
		if _, ok := s.cfg.Hosts.Lookup(name, r.q.Type); ok {
			// Static records win over the cluster and the cache; the
			// shortcuts keep no hosts answers, so the walk takes the
			// general path (answer), off the reader.
			return winner{}, false
		}
	}
	if res, ok := s.cfg.Cluster.Lookup(name, r.q.Type); ok {
		if res.NotSynced || res.ExternalTarget != "" {
			return winner{}, false
		}
		return winner{m: res.Msg, cluster: true}, true
	}
	if s.cfg.HitCache == nil {
		return winner{}, false
	}
	var (
		wire   []byte
		rcode  int
		ref    any
		ok     bool
		stored StoredHit
	)
	if rc, isRef := s.cfg.HitCache.(RefHitCache); isRef {
		wire, rcode, ref, ok = rc.AppendHitRef(nil, name, r.q.Type, r.q.Class, r.q.DO, r.q.CD())
		stored, _ = ref.(StoredHit)
	} else {
		wire, rcode, ok = s.cfg.HitCache.AppendHit(nil, name, r.q.Type, r.q.Class, r.q.DO, r.q.CD())
	}
	if !ok || rcode != dns.RcodeSuccess {
		return winner{}, false
	}
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		return winner{}, false
	}
	return winner{m: m, wire: wire, stored: stored}, true
}

// stepsStillMissing reports whether every step in the cluster zone among
// names is still a name error there. Steps outside it (the node's search
// domains) were answered by the cache and upstream and are trusted for
// the memo's lifetime, as the walk that found them is.
func (s *Server) stepsStillMissing(names []string, qtype uint16) bool {
	for _, n := range names {
		res, ok := s.cfg.Cluster.Lookup(n, qtype)
		if ok && (res.NotSynced || res.Msg == nil || res.Msg.Rcode != dns.RcodeNameError) {
			return false
		}
	}
	return true
}

// stillWins reports whether the remembered winner name still exists for
// qtype, the type that made it win.
func (s *Server) stillWins(ctx context.Context, r *request, name string, qtype uint16) bool {
	if qtype == r.q.Type {
		return false // just asked: NXDOMAIN
	}
	m, err := s.step(ctx, r, name, qtype)
	return err == nil && m.Rcode != dns.RcodeNameError
}

// step resolves one expansion for qtype; a failure or a SERVFAIL/REFUSED
// reply is an error (the walk cannot tell whether the name exists).
func (s *Server) step(ctx context.Context, r *request, name string, qtype uint16) (*dns.Msg, error) {
	m, _, err := s.answer(ctx, name, qtype, r.q.DO, r.q.CD())
	if err != nil {
		return nil, err
	}
	if m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError {
		return nil, errStepFailed
	}
	return m, nil
}

type stepError string

func (e stepError) Error() string { return string(e) }

const errStepFailed = stepError("search-path step answered neither NOERROR nor NXDOMAIN")

func (s *Server) walkReply(r *request, names []string, i int, m *dns.Msg) *dns.Msg {
	if i == 0 {
		return m
	}
	out := &dns.Msg{MsgHdr: m.MsgHdr}
	out.Rcode = dns.RcodeSuccess
	if len(m.Answer) == 0 {
		out.Ns = m.Ns
		return out
	}
	// The CNAME is synthesized, so the reply is not authoritative unless
	// everything in it came from the cluster zone.
	cname := &dns.CNAME{Hdr: dns.RR_Header{Name: r.q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET,
		Ttl: m.Answer[0].Header().Ttl}, Target: names[i]}
	out.Answer = make([]dns.RR, 0, 1+len(m.Answer))
	out.Answer = append(append(out.Answer, cname), m.Answer...)
	out.Extra = m.Extra
	return out
}

// walkMemo remembers which expansion won for (namespace, base), for a short
// time and a bounded number of names. Shortcuts built from a decision hold
// its entry and die with it: an entry is marked dead when it is replaced,
// forgotten, evicted or purged.
type walkMemo struct {
	ttl time.Duration
	c   *lru.Cache[string, *memoEntry]
}

type memoEntry struct {
	key     string // "<namespace>/<base>"
	idx     int    // the winning step
	qtype   uint16 // the type whose walk found it
	expires int64  // unix nanoseconds
	dead    atomic.Bool
}

// alive reports whether the decision still stands at now (unix nanoseconds).
func (e *memoEntry) alive(now int64) bool { return !e.dead.Load() && now < e.expires }

func newWalkMemo(size int, ttl time.Duration) *walkMemo {
	c, err := lru.NewWithEvict(size, func(_ string, e *memoEntry) { e.dead.Store(true) })
	if err != nil {
		panic(err) // only for size <= 0, which callers never pass
	}
	return &walkMemo{ttl: ttl, c: c}
}

func (w *walkMemo) get(key string) (*memoEntry, bool) {
	e, ok := w.c.Get(key)
	if !ok || !e.alive(time.Now().UnixNano()) {
		return nil, false
	}
	return e, true
}

func (w *walkMemo) put(key string, idx int, qtype uint16) {
	e := &memoEntry{key: key, idx: idx, qtype: qtype, expires: time.Now().Add(w.ttl).UnixNano()}
	if old, ok := w.c.Peek(key); ok {
		// Add replaces a value without the eviction callback.
		old.dead.Store(true)
	}
	w.c.Add(key, e)
}

// forget drops e's decision (if it is still the one kept for its key).
func (w *walkMemo) forget(e *memoEntry) {
	e.dead.Store(true)
	if cur, ok := w.c.Peek(e.key); ok && cur == e {
		w.c.Remove(e.key)
	}
}

// walkSettings are the search-path settings that can change while the
// server runs (live reload).
type walkSettings struct {
	autopath bool
	search   []string
}

func (s *Server) walkConf() *walkSettings { return s.walkSet.Load() }

// SetSearchPath turns the search-path walk on or off and replaces the extra
// search domains (lower-case FQDNs). Queries under way finish with the old
// settings. Remembered winners are forgotten: the list they indexed changed.
func (s *Server) SetSearchPath(autopath bool, search []string) {
	s.walkSet.Store(&walkSettings{autopath: autopath, search: append([]string(nil), search...)})
	s.memo.c.Purge()
	s.shortcuts.purge()
}
