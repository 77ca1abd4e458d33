package pipeline

import (
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// walkStatus is how a walk ended.
type walkStatus uint8

const (
	// walkUndecided: an expansion failed; the query is answered as asked.
	walkUndecided walkStatus = iota
	walkDone
	// walkWait: the walk needs waiting (only without call.wait).
	walkWait
)

// podQuery returns the namespace of c's client when c may be a search-path
// expansion the pipeline walks itself: the walk is on, the name is under
// `svc.<zone>`, and the client is a pod of this node. Whether it is the
// first expansion of the pod's own list, `<base>.<ns>.svc.<zone>`, is
// searchPath's to say.
func (p *Pipeline) podQuery(c *call) (ns string, ok bool) {
	if !p.walkConf().autopath || p.cfg.Pods == nil || p.cfg.Cluster == nil {
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

// missedExpansion marks c, an NXDOMAIN for a pod of namespace ns that the
// walk did not take up, as a search-path expansion when its name is under
// one of the pod's search domains: the cluster zone (the first three) or
// the node's. One under `<ns>.svc.<zone>` is the pod's first expansion,
// which it now walks itself (autopath is off).
func (p *Pipeline) missedExpansion(c *call, ns string) {
	name, search := c.name, p.walkConf().search
	if p.cfg.Cluster != nil {
		zone := p.cfg.Cluster.Zone()
		if name != zone && dnsname.InZone(name, zone) {
			c.expansion = true
			if base, ok := ndots.Split(name, ns, zone); ok {
				c.search, c.searchCut, c.searchWon = true, len(name)-len(base), -1
				c.searchList = 4 + len(search)
			}
			return
		}
	}
	for _, d := range search {
		if name != d && dnsname.InZone(name, d) {
			c.expansion = true
			return
		}
	}
}

// walk answers c by walking the pod's search list in the pipeline: the
// first expansion that is not NXDOMAIN wins and the client gets
// `<asked> CNAME <winner>` plus the winner's answer, in one round trip.
// NODATA at the winner is NODATA for the name asked. It is undecided when
// an expansion failed: the query is then answered as asked and the client
// walks its list itself, exactly as without autopath.
//
// The winner is remembered per (namespace, base), whatever the type, so
// that A and AAAA for one name from one pod always take the same path even
// if some upstream answers the two types inconsistently. Without c.wait
// (on the reader) the walk goes as far as answers at hand take it (the
// cluster zone, the cache) and says walkWait at the first step that would
// block; a reply it builds there is kept as a shortcut (shortcut.go), so
// that the next query for the name is a copy of wire bytes. So a pod
// looking up a popular name again, or again once its decision has
// expired, is answered on the reader.
//
// steps is how many expansions were resolved; saved how many queries the
// client no longer sends for this type.
func (p *Pipeline) walk(c *call, ns, base string) (m *dns.Msg, steps, saved int, st walkStatus) {
	set := p.walkConf()
	names := ndots.Walk(base, ns, p.cfg.Cluster.Zone(), set.search)
	c.searchList = len(names)
	qtype := c.q.Type
	// The key holds the namespace: one namespace's result is never
	// another's.
	key := ns + "/" + base
	// The generations are read before any answer: a change after this
	// point moves them, and a shortcut built here is checked again
	// (shortcut.go), a decision made here not used again.
	gen, conf := p.clusterGen(), p.confGeneration()
	tried := 0
	// A decision is the namespace's; a client the access list keeps from
	// one of its steps walks from the start (and stops at that step),
	// leaving the decision to the others.
	if e, hit := p.memo.get(key, conf); hit && e.idx < len(names) && p.aclSteps(c, names[:e.idx+1], qtype) {
		i := e.idx
		if !p.stepsStillMissing(names[:i], qtype) {
			// An earlier step exists in the cluster now (a Service
			// created since): the client would stop there, so the walk
			// must too.
			p.memo.forget(e)
		} else {
			a, err := p.step(c, names[i], qtype, asMsgRef)
			switch {
			case a.wait || !c.wait && (err != nil || a.Msg.Rcode != dns.RcodeSuccess):
				return nil, 0, 0, walkWait
			case err == nil && a.Msg.Rcode == dns.RcodeSuccess:
				c.walkWon(i, a)
				m := p.walkReply(c, names, i, a.Msg)
				if !c.wait {
					p.keepShortcut(c, ns, set, e, names[:i+1], a, m, gen)
				}
				return m, 1, i, walkDone
			case err == nil && p.stillWins(c, names[i], e.qtype):
				// NXDOMAIN here for a winner that still exists for the
				// type that made it win (an upstream that answers A but
				// not AAAA) becomes NODATA for the name asked: same path.
				c.walkWon(i, a)
				return p.walkReply(c, names, i, a.Msg), 1, i, walkDone
			}
			// The winner has gone (a deleted Service, say: NXDOMAIN now
			// for the type that won too). Answering from it would turn
			// its NXDOMAIN into an empty NOERROR for the name asked,
			// which stops dig and musl, and the expansions after it
			// would never be tried: walk again from the start instead.
			p.memo.forget(e)
			tried = 1
		}
	}
	f := asMsg
	if !c.wait {
		f = asMsgRef // the winner's stored reply, to keep a shortcut on
	}
	var first *dns.Msg
	for i, name := range names {
		a, err := p.step(c, name, qtype, f)
		switch {
		case a.wait || !c.wait && err != nil:
			return nil, 0, 0, walkWait
		case err != nil:
			return nil, tried + i + 1, 0, walkUndecided
		}
		if i == 0 {
			first = a.Msg
		}
		if a.Msg.Rcode == dns.RcodeNameError {
			continue
		}
		e := p.memo.put(key, i, qtype, conf)
		c.walkWon(i, a)
		m := p.walkReply(c, names, i, a.Msg)
		if !c.wait {
			p.keepShortcut(c, ns, set, e, names[:i+1], a, m, gen)
		}
		return m, tried + i + 1, i, walkDone
	}
	// Nothing exists anywhere: NXDOMAIN for the name asked, with the
	// cluster zone's SOA. The client walks its own list after it (glibc,
	// musl and dig all do), so no query is saved: the later expansions
	// are answered locally or from the cache.
	c.searchWon = len(names)
	return first, tried + len(names), 0, walkDone
}

// walkWon notes on c what the walk's winner, step i answered by a, makes
// of the reply: synthesized when it is not the name asked, stale when its
// answer was.
func (c *call) walkWon(i int, a answer) {
	c.searchWon = i
	if i > 0 {
		c.ede.add(dns.ExtendedErrorCodeSynthesized, edeTextSearch)
	}
	if a.Source == stage.SourceStale {
		c.ede.stale(a.Msg.Rcode)
	}
}

// stepsStillMissing reports whether every step in the cluster zone among
// names is still a name error there. Steps outside it (the node's search
// domains) were answered by the cache and upstream and are trusted for
// the memo's lifetime, as the walk that found them is.
func (p *Pipeline) stepsStillMissing(names []string, qtype uint16) bool {
	for _, n := range names {
		res, ok := p.cfg.Cluster.Lookup(n, qtype)
		if ok && (res.NotSynced || res.Msg == nil || res.Msg.Rcode != dns.RcodeNameError) {
			return false
		}
	}
	return true
}

// stillWins reports whether the remembered winner name still exists for
// won, the type that made it win (c's type just got NXDOMAIN there).
func (p *Pipeline) stillWins(c *call, name string, won uint16) bool {
	if won == c.q.Type {
		return false // just asked: NXDOMAIN
	}
	a, err := p.step(c, name, won, asMsg)
	return err == nil && !a.wait && a.Msg.Rcode != dns.RcodeNameError
}

// step resolves one expansion for qtype through the stage order; a
// failure or a SERVFAIL/REFUSED reply is an error (the walk cannot tell
// whether the name exists).
func (p *Pipeline) step(c *call, name string, qtype uint16, f form) (answer, error) {
	if !p.aclStep(c, name) {
		return answer{}, errStepFailed
	}
	a, _ := p.lookup(c, nil, name, qtype, f)
	switch {
	case a.wait:
		return a, nil
	case a.err != nil:
		return a, a.err
	case a.Msg.Rcode != dns.RcodeSuccess && a.Msg.Rcode != dns.RcodeNameError:
		return a, errStepFailed
	}
	return a, nil
}

type stepError string

func (e stepError) Error() string { return string(e) }

const errStepFailed = stepError("search-path step answered neither NOERROR nor NXDOMAIN")

// walkReply is the reply to c when names[i] won with m.
func (p *Pipeline) walkReply(c *call, names []string, i int, m *dns.Msg) *dns.Msg {
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
	cname := &dns.CNAME{Hdr: dns.RR_Header{Name: c.name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET,
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
	// conf is the pipeline's confGeneration when the walk that decided
	// began: the decision holds only while it is still the pipeline's.
	conf uint64
	dead atomic.Bool
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

// get returns the decision for key, if one made under conf (the
// pipeline's confGeneration) still stands.
func (w *walkMemo) get(key string, conf uint64) (*memoEntry, bool) {
	e, ok := w.c.Get(key)
	if !ok || !e.alive(time.Now().UnixNano()) || e.conf != conf {
		return nil, false
	}
	return e, true
}

// put remembers idx as the winner for key, decided by a walk begun under
// conf, and returns the decision.
func (w *walkMemo) put(key string, idx int, qtype uint16, conf uint64) *memoEntry {
	e := &memoEntry{key: key, idx: idx, qtype: qtype, expires: time.Now().Add(w.ttl).UnixNano(), conf: conf}
	if old, ok := w.c.Peek(key); ok {
		// Add replaces a value without the eviction callback.
		old.dead.Store(true)
	}
	w.c.Add(key, e)
	return e
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

func (p *Pipeline) walkConf() *walkSettings { return p.walkSet.Load() }

// SetSearchPath turns the search-path walk on or off and replaces the extra
// search domains (lower-case FQDNs). Queries under way finish with the old
// settings. Remembered winners are forgotten: the list they indexed changed.
func (p *Pipeline) SetSearchPath(autopath bool, search []string) {
	p.walkSet.Store(&walkSettings{autopath: autopath, search: append([]string(nil), search...)})
	p.Invalidate()
}
