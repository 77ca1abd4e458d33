package ndots

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Settings are the search-path settings that can change while the agent
// runs (live reload).
type Settings struct {
	// Autopath turns the server-side walk on.
	Autopath bool
	// Search are the node's search domains pods inherit (Search's
	// result): the walk's steps after the cluster's own three.
	Search []string
}

// Answer is one answer of the pipeline's stage order, as the walk sees it.
type Answer struct {
	stage.Result
	// Stored is the cache's stored reply Msg was unpacked from, when it
	// was asked for (Resolve's keep) and the answer is a cache hit.
	Stored stage.StoredHit
	// Stable: Msg is a stage's own (static records, the cluster zone),
	// the same for the question until its records change.
	Stable bool
	// Wait: a stage would block (only for a query that may not wait).
	Wait bool
}

// Stages is the pipeline's side of the walk, for the one query being
// answered: the pipeline implements it and the walk calls nothing else.
// Each function may block only when the query may wait (Query.Wait).
//
// It is a struct of functions rather than a Go interface on purpose: the
// query being answered lives on its reader's stack, and handing it
// through an interface method would move it to the heap, one allocation
// a query (TestHotPathAllocs pins 0). Closures over it that are only
// called, never kept, stay on the stack.
type Stages struct {
	// Resolve runs name through the stage order (templates, static
	// records, the cluster zone, then cache and upstream); keep asks for
	// the cache's stored reply of a hit (Answer.Stored), to keep a
	// shortcut on. held limits it to the stages that hold their own
	// records, before the cluster zone's pending answers are resolved:
	// ok is then false when none holds the name.
	Resolve func(name string, qtype uint16, keep, held bool) (a Answer, ok bool, err error)
	// Allowed reports whether the access list lets the query's client
	// ask name: CoreDNS's autopath asks each step through its acl. nil:
	// no access list judges names, and every step is allowed.
	Allowed func(name string) bool
	// Pack is m in wire form as the reply to the query would carry it
	// (ID 0, the question as asked, no OPT), for a shortcut.
	Pack func(m *dns.Msg) ([]byte, error)
}

// Query is what the search path needs to know of the query being
// answered.
type Query struct {
	// Name is the name resolved (lower-case FQDN), a rewrite rule's result
	// when one applied (Rewritten); Asked the name as asked, lower-case:
	// what a shortcut is kept under.
	Name, Asked string
	Type        uint16
	// Flags are the query's DO and CD bits (Flags).
	Flags uint8
	// NS is the namespace of the client, a pod of this node.
	NS string
	// Wait: the query may wait (off the reader). Without it the walk goes
	// as far as answers at hand take it and says Wait at the first step
	// that would block.
	Wait bool
	// Rewritten: a rewrite rule changed the name; its reply is mapped
	// back, so no shortcut is kept or taken and the walk runs off the
	// reader.
	Rewritten bool
	// NoShortcuts: shortcuts are kept per namespace, not per CoreDNS
	// view; the pipeline sets it when views are configured.
	NoShortcuts bool
	// Conf is the pipeline's configuration generation, read before any
	// answer: it moves with every change that may change what the stages
	// before the cluster zone answer (templates, the access list, static
	// records, rewrites, routes, the upstreams), and a decision or a
	// shortcut made under another is not used.
	Conf uint64
	// Now is when the query was received, in unix nanoseconds.
	Now int64
}

// Outcome is what the search path made of a query.
type Outcome uint8

const (
	// AsAsked: no first expansion of the pod's list, or the walk could
	// not decide (a step failed): the query is answered as asked and the
	// client walks its list itself, exactly as without autopath.
	AsAsked Outcome = iota
	// Wait: a step would block; the query is resolved again off the
	// reader.
	Wait
	// Shortcut: Result.Out is the caller's buffer with a kept reply
	// appended (ID 0, lower-case question, no OPT): the pipeline makes it
	// the reply to this request.
	Shortcut
	// Held: the name asked exists as it is in a stage that holds its own
	// records; Result.Answer is that stage's answer, sent as it is.
	Held
	// Walked: Result.Msg is the walk's reply: `<asked> CNAME <winner>`
	// and the winner's answer, the winner's own answer when it is the
	// first step, NODATA for NODATA at the winner, or the first step's
	// NXDOMAIN when no step exists.
	Walked
)

// Result is what Serve decided.
type Result struct {
	Outcome Outcome
	Out     []byte
	Answer  Answer
	Msg     *dns.Msg
	// Steps is how many steps were resolved; Saved how many queries the
	// client no longer sends for this type (Walked, Shortcut).
	Steps, Saved int
	// Synthesized: the reply's CNAME is the walk's, not a record's (the
	// winner is not the first step). Stale: the winner's answer is a
	// stale cache entry, its rcode StaleRcode.
	Synthesized bool
	Stale       bool
	StaleRcode  int
	Figures     Figures
}

// Figures are what the search path did for one query, for its event: the
// pipeline reports them with every answer.
type Figures struct {
	// Expansion: the query is a search-path expansion a pod sent (a first
	// expansion, or an NXDOMAIN under one of its search domains: Missed).
	Expansion bool
	// First: it is the pod's first expansion `<base>.<ns>.svc.<zone>`;
	// Cut is the length of `.<ns>.svc.<zone>` at the end of the name,
	// List the length of the search list with the name itself, Won the
	// step that answered (List when none did, -1 when the agent did not
	// walk it).
	First          bool
	Cut, List, Won int
}

// Base is the name the pod looked up, of a first expansion name.
func (f Figures) Base(name string) string { return name[:len(name)-f.Cut] }

// SearchPath is the search path of the pods of this node: the walk, its
// decisions (Memo) and the shortcut replies built from them. Safe for
// concurrent use; nothing in it allocates on a shortcut taken.
type SearchPath struct {
	cluster stage.Cluster
	memo    *Memo
	table   *shortcutTable
	set     atomic.Pointer[Settings]
}

// New returns the search path over cluster (the cluster zone's index,
// which says which steps exist, and their generation), its decisions kept
// for memo.
func New(cluster stage.Cluster, memo time.Duration, set Settings) *SearchPath {
	s := &SearchPath{cluster: cluster, memo: NewMemo(10000, memo), table: newShortcutTable(scEntries, scBytes)}
	s.Set(set)
	return s
}

// Settings are the settings in force.
func (s *SearchPath) Settings() *Settings { return s.set.Load() }

// Set replaces the settings (the search domains copied). Queries under
// way finish with the old ones; shortcuts built under them are not used
// again. The caller forgets the decisions (Purge): the list they indexed
// changed.
func (s *SearchPath) Set(set Settings) {
	set.Search = append([]string(nil), set.Search...)
	s.set.Store(&set)
}

// Purge forgets every decision and every shortcut: what they were built
// from changed in a way they cannot be checked against.
func (s *SearchPath) Purge() {
	s.memo.Purge()
	s.table.purge()
}

// Shortcuts is how many shortcut replies are kept.
func (s *SearchPath) Shortcuts() int { return s.table.len() }

// Missed is the figures of an NXDOMAIN a pod of namespace ns got for name,
// which the walk did not take up (Missed, with the settings in force).
func (s *SearchPath) Missed(name, ns string) Figures {
	zone := ""
	if s.cluster != nil {
		zone = s.cluster.Zone()
	}
	search := s.Settings().Search
	exp, first, cut := Missed(name, ns, zone, search)
	f := Figures{Expansion: exp}
	if first {
		f.First, f.Cut, f.Won, f.List = true, cut, -1, 4+len(search)
	}
	return f
}

// Serve answers q, from a pod of namespace q.NS, when it is the first
// expansion of the pod's search list: from a shortcut kept from an earlier
// query (appended to dst), the name itself where it exists as asked, or
// the walk. st is the pipeline, for this query.
func (s *SearchPath) Serve(dst []byte, q *Query, st *Stages) Result {
	var r Result
	// A shortcut is looked for first: one kept for q.NS says the name is
	// an expansion of its list (it was built for one), which saves
	// splitting the name (reading the namespace's bytes) every time.
	if !q.Rewritten && !q.NoShortcuts && s.hit(dst, q, st, &r) {
		return r
	}
	base, ok := Split(q.Name, q.NS, s.cluster.Zone())
	switch {
	case !ok:
		return r
	case !q.Rewritten:
		if a, ok := s.asAsked(q, st); ok {
			r.Outcome, r.Answer = Held, a
			return r
		}
	case !q.Wait:
		// A rewritten name: walked off the reader, its reply mapped back.
		r.Outcome = Wait
		return r
	}
	r.Figures = Figures{Expansion: true, First: true, Cut: len(q.Name) - len(base), Won: -1}
	s.walk(q, st, base, &r)
	return r
}

// asAsked is the answer to q, a walk candidate, when the name asked exists
// as it is in a stage that holds its own records, asked in the stage order
// (templates and static records before the cluster zone): the walk's first
// step wins, whatever the type (a name exists or not for every type
// alike), and the reply is that stage's answer itself, no CNAME: what the
// client gets without autopath. This is a pod's short name for a Service
// of its own namespace. What is not at hand (a cluster name before the
// sync or an ExternalName, a template's CNAME targets on the reader) and a
// name error are left to the walk.
func (s *SearchPath) asAsked(q *Query, st *Stages) (Answer, bool) {
	a, ok, _ := st.Resolve(q.Name, q.Type, false, true)
	if !ok || a.Wait || a.NotSynced || a.ExternalTarget != "" || a.Msg.Rcode == dns.RcodeNameError {
		return Answer{}, false
	}
	return a, true
}

// walk answers q by walking the pod's search list: the first expansion
// that is not NXDOMAIN wins and the client gets `<asked> CNAME <winner>`
// plus the winner's answer, in one round trip. NODATA at the winner is
// NODATA for the name asked. It is undecided (AsAsked) when an expansion
// failed.
//
// The winner is remembered per (namespace, base), whatever the type, so
// that A and AAAA for one name from one pod always take the same path even
// if some upstream answers the two types inconsistently. Without q.Wait
// (on the reader) the walk goes as far as answers at hand take it (the
// cluster zone, the cache) and says Wait at the first step that would
// block; a reply it builds there is kept as a shortcut, so that the next
// query for the name is a copy of wire bytes.
func (s *SearchPath) walk(q *Query, st *Stages, base string, r *Result) {
	set := s.Settings()
	names := Expansions(base, q.NS, s.cluster.Zone(), set.Search)
	r.Figures.List = len(names)
	qtype := q.Type
	// The key holds the namespace: one namespace's result is never
	// another's.
	key := q.NS + "/" + base
	// The cluster's generation is read before any answer: a change after
	// this point moves it, and a shortcut built here is checked again.
	gen := s.cluster.Generation()
	tried := 0
	// A decision is the namespace's; a client the access list keeps from
	// one of its steps walks from the start (and stops at that step),
	// leaving the decision to the others.
	if e, hit := s.memo.get(key, q.Conf); hit && e.idx < len(names) && allowed(st, names[:e.idx+1]) {
		i := e.idx
		if !s.stepsStillMissing(names[:i], qtype) {
			// An earlier step exists in the cluster now (a Service
			// created since): the client would stop there, so the walk
			// must too.
			s.memo.forget(e)
		} else {
			a, err := s.step(st, names[i], qtype, true)
			switch {
			case a.Wait || !q.Wait && (err != nil || a.Msg.Rcode != dns.RcodeSuccess):
				r.Outcome = Wait
				return
			case err == nil && a.Msg.Rcode == dns.RcodeSuccess:
				m := s.won(q, r, names, i, a)
				if !q.Wait {
					s.keep(q, st, set, e, names[:i+1], a, m, gen, len(names))
				}
				r.Outcome, r.Msg, r.Steps, r.Saved = Walked, m, 1, i
				return
			case err == nil && s.stillWins(q, st, names[i], e.qtype):
				// NXDOMAIN here for a winner that still exists for the
				// type that made it win (an upstream that answers A but
				// not AAAA) becomes NODATA for the name asked: same path.
				r.Outcome, r.Msg, r.Steps, r.Saved = Walked, s.won(q, r, names, i, a), 1, i
				return
			}
			// The winner has gone (a deleted Service, say: NXDOMAIN now
			// for the type that won too). Answering from it would turn
			// its NXDOMAIN into an empty NOERROR for the name asked,
			// which stops dig and musl, and the expansions after it
			// would never be tried: walk again from the start instead.
			s.memo.forget(e)
			tried = 1
		}
	}
	keep := !q.Wait // the winner's stored reply, to keep a shortcut on
	var first *dns.Msg
	for i, name := range names {
		a, err := s.step(st, name, qtype, keep)
		switch {
		case a.Wait || !q.Wait && err != nil:
			r.Outcome = Wait
			return
		case err != nil:
			return // undecided: answered as asked
		}
		if i == 0 {
			first = a.Msg
		}
		if a.Msg.Rcode == dns.RcodeNameError {
			continue
		}
		e := s.memo.put(key, i, qtype, q.Conf)
		m := s.won(q, r, names, i, a)
		if !q.Wait {
			s.keep(q, st, set, e, names[:i+1], a, m, gen, len(names))
		}
		r.Outcome, r.Msg, r.Steps, r.Saved = Walked, m, tried+i+1, i
		return
	}
	// Nothing exists anywhere: NXDOMAIN for the name asked, with the
	// cluster zone's SOA. The client walks its own list after it (glibc,
	// musl and dig all do), so no query is saved: the later expansions
	// are answered locally or from the cache.
	r.Figures.Won = len(names)
	r.Outcome, r.Msg, r.Steps = Walked, first, tried+len(names)
}

// won notes in r that step i won with a, and returns the reply to q.
func (s *SearchPath) won(q *Query, r *Result, names []string, i int, a Answer) *dns.Msg {
	r.Figures.Won = i
	r.Synthesized = i > 0
	if a.Source == stage.SourceStale {
		r.Stale, r.StaleRcode = true, a.Msg.Rcode
	}
	return reply(q.Name, names, i, a.Msg)
}

// allowed reports whether the access list lets the client visit every
// name of steps: a decision or shortcut made for one client of a
// namespace is another's only so.
func allowed(st *Stages, steps []string) bool {
	if st.Allowed == nil {
		return true
	}
	for _, n := range steps {
		if !st.Allowed(n) {
			return false
		}
	}
	return true
}

// stepsStillMissing reports whether every step in the cluster zone among
// names is still a name error there. Steps outside it (the node's search
// domains) were answered by the cache and upstream and are trusted for
// the memo's lifetime, as the walk that found them is.
func (s *SearchPath) stepsStillMissing(names []string, qtype uint16) bool {
	for _, n := range names {
		res, ok := s.cluster.Lookup(n, qtype)
		if ok && (res.NotSynced || res.Msg == nil || res.Msg.Rcode != dns.RcodeNameError) {
			return false
		}
	}
	return true
}

// stillWins reports whether the remembered winner name still exists for
// won, the type that made it win (q's type just got NXDOMAIN there).
func (s *SearchPath) stillWins(q *Query, st *Stages, name string, won uint16) bool {
	if won == q.Type {
		return false // just asked: NXDOMAIN
	}
	a, err := s.step(st, name, won, false)
	return err == nil && !a.Wait && a.Msg.Rcode != dns.RcodeNameError
}

// step resolves one expansion for qtype through the stage order; a step
// the access list keeps the client from, a failure, or a SERVFAIL or
// REFUSED reply is an error (the walk cannot tell whether the name
// exists).
func (s *SearchPath) step(st *Stages, name string, qtype uint16, keep bool) (Answer, error) {
	if st.Allowed != nil && !st.Allowed(name) {
		return Answer{}, errStepFailed
	}
	a, _, err := st.Resolve(name, qtype, keep, false)
	switch {
	case a.Wait:
		return a, nil
	case err != nil:
		return a, err
	case a.Msg.Rcode != dns.RcodeSuccess && a.Msg.Rcode != dns.RcodeNameError:
		return a, errStepFailed
	}
	return a, nil
}

type stepError string

func (e stepError) Error() string { return string(e) }

const errStepFailed = stepError("search-path step answered neither NOERROR nor NXDOMAIN")

// reply is the reply to a query for asked when names[i] won with m.
func reply(asked string, names []string, i int, m *dns.Msg) *dns.Msg {
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
	cname := &dns.CNAME{Hdr: dns.RR_Header{Name: asked, Rrtype: dns.TypeCNAME, Class: dns.ClassINET,
		Ttl: m.Answer[0].Header().Ttl}, Target: names[i]}
	out.Answer = make([]dns.RR, 0, 1+len(m.Answer))
	out.Answer = append(append(out.Answer, cname), m.Answer...)
	out.Extra = m.Extra
	return out
}

// hit appends the kept shortcut reply to q to dst, into r, when there is
// one for q.NS and it still holds. One kept for another namespace is not
// q's (q is no expansion of that namespace's list) and stays.
func (s *SearchPath) hit(dst []byte, q *Query, st *Stages, r *Result) bool {
	k := scKey{name: q.Asked, qtype: q.Type, flags: q.Flags}
	e := s.table.get(s.table.hash(k), k)
	if e == nil || e.ns != q.NS {
		return false
	}
	if e.set != s.Settings() || !e.memo.alive(q.Now) || e.memo.conf != q.Conf || !s.clusterStillHolds(e, q.Type) {
		s.table.remove(e)
		return false
	}
	if !allowed(st, e.steps) {
		// Another client of the namespace may still use it.
		return false
	}
	start := len(dst)
	if e.cluster == nil {
		// The winner's hit first: it is what may end the shortcut.
		ttl, ok := e.winHit.Hit()
		if !ok {
			s.table.remove(e)
			return false
		}
		dst = append(dst, e.wire...)
		dnswire.PutTTLs(dst[start:], e.ttls, ttl)
	} else {
		dst = append(dst, e.wire...)
	}
	r.Outcome, r.Out, r.Steps, r.Saved, r.Synthesized = Shortcut, dst, 1, e.idx(), e.idx() > 0
	r.Figures = Figures{Expansion: true, First: true, List: e.list, Won: e.idx(),
		Cut: 1 + len(q.NS) + len(".svc.") + len(s.cluster.Zone())}
	return true
}

// clusterStillHolds reports whether the cluster still answers as it did
// when e was built: nothing changed since (the generation), or every
// earlier step in the zone is still NXDOMAIN and a cluster winner still has
// the same message. An earlier step that now exists ends the decision: the
// name is walked again.
func (s *SearchPath) clusterStillHolds(e *scEntry, qtype uint16) bool {
	gen := s.cluster.Generation()
	if gen != 0 && e.gen.Load() == gen {
		return true
	}
	if !s.stepsStillMissing(e.steps[:e.idx()], qtype) {
		s.memo.forget(e.memo)
		return false
	}
	if e.cluster != nil {
		res, ok := s.cluster.Lookup(e.steps[e.idx()], qtype)
		if !ok || res.NotSynced || res.ExternalTarget != "" || res.Msg != e.cluster {
			return false
		}
	}
	e.gen.Store(gen)
	return true
}

// keep keeps m, the reply the walk built on the reader for q from the
// decision me and the winner's answer a (steps: the walk's names up to
// the winner; list: the whole list's length), as a shortcut, when a is
// the cluster's or a cached one (a static record is answered, not kept).
// gen is the cluster generation read before any answer was.
func (s *SearchPath) keep(q *Query, st *Stages, set *Settings, me *Decision, steps []string, a Answer, m *dns.Msg, gen uint64, list int) {
	if a.Source != stage.SourceCluster && a.Stored == nil {
		return
	}
	wire, err := st.Pack(m)
	if err != nil {
		return // answered all the same, packed again by the pipeline
	}
	ttls, err := dnswire.TTLOffsets(wire)
	if err != nil {
		return
	}
	k := scKey{name: strings.Clone(q.Asked), qtype: q.Type, flags: q.Flags}
	e := &scEntry{h: s.table.hash(k), key: k, ns: q.NS, set: set, memo: me, steps: steps, list: list, wire: wire, ttls: ttls}
	if a.Source == stage.SourceCluster {
		e.cluster = a.Msg
	} else {
		if len(ttls) == 0 {
			return // nothing to count down
		}
		e.winHit = a.Stored
	}
	e.gen.Store(gen)
	s.table.add(e, q.Now)
}

// Kept is the shortcut kept for (asked, qtype, flags), as an opaque value
// that is the same while the same reply is kept (nil: none): for tests
// and debugging, to tell a reply served from a kept shortcut from one
// built again.
func (s *SearchPath) Kept(asked string, qtype uint16, flags uint8) any {
	k := scKey{name: asked, qtype: qtype, flags: flags}
	if e := s.table.get(s.table.hash(k), k); e != nil {
		return e
	}
	return nil
}
