package ndots

import (
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

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
	// shortcut on.
	Resolve func(name string, qtype uint16, keep bool) (Answer, error)
	// Held asks only the stages that hold their own records (templates,
	// static records, the cluster zone, in that order), without resolving
	// a cluster answer still pending (NotSynced, ExternalTarget): ok is
	// false when none holds the name.
	Held func(name string, qtype uint16) (a Answer, ok bool)
	// Allowed reports whether the access list lets the query's client
	// ask name: CoreDNS's autopath asks each step through its acl. nil:
	// no access list judges names, and every step is allowed.
	Allowed func(name string) bool
	// Pack is m in wire form as the reply to the query would carry it
	// (ID 0, the question as asked, no OPT), for a shortcut.
	Pack func(m *dns.Msg) ([]byte, error)
	// Conf is the pipeline's configuration generation: it moves with
	// every change that may change what the stages before the cluster zone
	// answer (templates, the access list, static records, rewrites,
	// routes, the upstreams). A decision or a shortcut made under another
	// is not used. It is read when a kept shortcut is checked and before
	// a walk's first answer, not for a name answered as it is.
	Conf func() uint64
}

// Query is what the search path needs to know of the query being
// answered.
type Query struct {
	// Name is the name resolved (lower-case FQDN), a rewrite rule's result
	// when one applied (Rewritten); Asked the name as asked, lower-case:
	// what a shortcut is kept under.
	Name, Asked string
	Type        uint16
	// DO and CD are the query's bits: a cached winner depends on them.
	DO, CD bool
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
	// Answer is, for Held, the stage's answer to send; for Walked, the
	// winner's answer (its Source says whether it was a stale cache
	// entry), zero when no step exists.
	Answer Answer
	Msg    *dns.Msg
	// Steps is how many steps were resolved; Saved how many queries the
	// client no longer sends for this type (Walked, Shortcut).
	Steps, Saved int
	// Synthesized: the reply's CNAME is the walk's, not a record's (the
	// winner is not the first step).
	Synthesized bool
	Figures     Figures
}

// Figures are what the search path did for one query, for its event: the
// pipeline reports them with every answer.
type Figures struct {
	// Expansion: the query is a search-path expansion a pod sent (a first
	// expansion, or an NXDOMAIN under one of its search domains:
	// SearchPath.Missed).
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
// decisions (memo.go) and the shortcut replies built from them. Safe for
// concurrent use; nothing in it allocates on a shortcut taken.
type SearchPath struct {
	cluster stage.Cluster
	memo    *memo
	table   *shortcutTable
	set     atomic.Pointer[Settings]
}

// New returns the search path over cluster (the cluster zone's index,
// which says which steps exist, and their generation), its decisions kept
// for memoTTL.
func New(cluster stage.Cluster, memoTTL time.Duration, set Settings) *SearchPath {
	s := &SearchPath{cluster: cluster, memo: newMemo(10000, memoTTL), table: newShortcutTable(scEntries, scBytes)}
	set.Search = append([]string(nil), set.Search...)
	s.set.Store(&set)
	return s
}

// Settings are the settings in force; read only (a shortcut is tied to
// the settings it was built under by this pointer).
func (s *SearchPath) Settings() *Settings { return s.set.Load() }

// Set replaces the settings (the search domains copied) and forgets every
// decision and shortcut: the list they indexed changed. Queries under way
// finish with the old settings; a shortcut they build is tied to them and
// not used.
func (s *SearchPath) Set(set Settings) {
	set.Search = append([]string(nil), set.Search...)
	s.set.Store(&set)
	s.Purge()
}

// Purge forgets every decision and every shortcut: what they were built
// from changed in a way they cannot be checked against.
func (s *SearchPath) Purge() {
	s.memo.Purge()
	s.table.purge()
}

// Shortcuts is how many shortcut replies are kept (for tests and
// debugging; it reads the whole table).
func (s *SearchPath) Shortcuts() int { return s.table.len() }

// Missed is the figures of an NXDOMAIN a pod of namespace ns got for name,
// which the walk did not take up: an expansion when name is under one of
// the pod's search domains, the cluster zone (the first three) or the
// node's; the pod's first, which it then walks itself (autopath off, or
// the walk undecided), when it is `<base>.<ns>.svc.<zone>`.
func (s *SearchPath) Missed(name, ns string) Figures {
	zone := ""
	if s.cluster != nil {
		zone = s.cluster.Zone()
	}
	search := s.Settings().Search
	exp, first, cut := missed(name, ns, zone, search)
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
func (s *SearchPath) Serve(dst []byte, q *Query, st *Stages) (r Result) {
	// A shortcut is looked for first: one kept for q.NS says the name is
	// an expansion of its list (it was built for one), which saves
	// splitting the name (reading the namespace's bytes) every time.
	if !q.Rewritten && !q.NoShortcuts && s.hit(dst, q, st, &r) {
		return r
	}
	base, ok := split(q.Name, q.NS, s.cluster.Zone())
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
	a, ok := st.Held(q.Name, q.Type)
	if !ok || a.Wait || a.NotSynced || a.ExternalTarget != "" || a.Msg.Rcode == dns.RcodeNameError {
		return Answer{}, false
	}
	return a, true
}
