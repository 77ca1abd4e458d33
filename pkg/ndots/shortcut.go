package ndots

import (
	"hash/maphash"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Search-path shortcuts served from wire form.
//
// A pod with ndots:5 asks for an external name, or a Service of another
// namespace, as `<name>.<its namespace>.svc.<zone>` first; with autopath
// the answer to that one query is `<asked> CNAME <winner>` plus the
// winner's answer (walk.go). Building that reply takes a walk, a message
// and a pack. The reply is kept here in wire form, keyed by the name asked
// (which names the pod's namespace: a namespace's shortcuts can only be
// found by a pod of that namespace), type, DO and CD, so the next query for
// it is a copy and a patch on the reader, as a cache hit is.
//
// A kept reply is served only while everything it was built from still
// holds:
//   - the walk's decision (memo.go): it dies when the memo forgets,
//     replaces, evicts or purges it, and when it expires, so A and AAAA
//     keep following one decision;
//   - the search-path settings (a reload changes the pointer);
//   - what the stages before the cluster zone answer, and the upstreams:
//     the decision's configuration generation (Stages.Conf: templates, the
//     access list, static records, rewrites, routes, the upstreams
//     replaced) must still be the pipeline's;
//   - the access list, for the client asking: every step must be one it
//     may visit (a rule by client network blocks one pod of a namespace,
//     not another);
//   - the cluster: while the index's Generation has not moved, nothing in
//     it changed; when it has, every earlier step in the cluster zone must
//     still be NXDOMAIN (else the decision is forgotten and the name
//     walked again) and a cluster winner must still answer with the same
//     message (else the reply is built again);
//   - a cached winner: the cache's stored reply the shortcut was built
//     from must still be its fresh answer; the hit, taken through it on
//     every query (counted, and letting the cache prefetch a popular
//     entry), gives its TTL, counting down, to every TTL of the reply.
//
// The namespace of a client is looked up on every query, so an address
// reused by a pod of another namespace finds that namespace's shortcuts.

const (
	// scEntries and scBytes bound the table: about 600 bytes an entry
	// (the reply, the step names).
	scEntries = 8192
	scBytes   = 4 << 20
	// scWays is how many entries share a bucket: with their tags, one
	// cache line.
	scWays = 4
	// scSweep bounds the slots one insertion looks at to bring the table
	// back under its byte budget.
	scSweep = 64
)

// scKey identifies a shortcut reply.
type scKey struct {
	name  string // the name asked, lower-case
	qtype uint16
	flags uint8 // DO, CD: a cached winner depends on them
}

// flags are a query's DO and CD bits as the shortcut key holds them.
func flags(do, cd bool) uint8 {
	var f uint8
	if do {
		f |= 1
	}
	if cd {
		f |= 2
	}
	return f
}

// scEntry is one kept shortcut reply. Immutable but for gen. The fields a
// hit reads come first.
type scEntry struct {
	// h is key's hash; key is what the entry answers.
	h   uint64
	key scKey
	// ns is the client's namespace, the string the Pods source gave (the
	// same string on the next query, so comparing it reads no memory).
	ns   string
	set  *Settings
	memo *decision
	// gen is the cluster Generation the entry was last checked at.
	gen atomic.Uint64
	// winHit is the cache's stored reply for a cached winner: a query
	// takes its hit through it, without a lookup.
	winHit stage.StoredHit
	// wire is the reply (ID 0, lower-case question, no OPT); ttls the
	// offsets of its TTL fields (used for a cached winner).
	wire []byte
	ttls []uint16
	// cluster: the cluster's message for the winner; nil for a cached
	// winner.
	cluster *dns.Msg
	// steps are the walk's names up to the winner, which is last; list
	// is the length of the whole search list, the name itself included.
	steps []string
	list  int
}

func (e *scEntry) idx() int { return len(e.steps) - 1 }

func (e *scEntry) cost() int64 {
	if e == nil {
		return 0
	}
	n := len(e.key.name) + len(e.ns) + len(e.wire) + 2*len(e.ttls) + 200
	for _, s := range e.steps {
		n += len(s) + 16
	}
	return int64(n)
}

// shortcutTable keeps shortcut replies, bounded by entries and bytes: an
// array of buckets of scWays entries, the bucket and a tag taken from the
// key's 64-bit hash. A lookup reads one bucket (its tags and pointers
// share a cache line) and the entry whose tag matches: no lock is taken
// and nothing is written, so the readers of every socket share the table
// without queueing on it or passing its cache lines between cores, and a
// shortcut costs fewer memory reads than a cache hit's lookup.
//
// A new entry takes its key's old slot, else an empty one, else one whose
// decision has died, else the bucket's slots in turn; past the byte
// budget, insertions clear slots across the table in turn until it fits.
// So an entry goes when its decision dies (hit drops it then) or
// when its bucket or the budget needs the room, not in LRU order.
type shortcutTable struct {
	seed    maphash.Seed
	buckets []scBucket
	budget  int64
	bytes   atomic.Int64
	// turn picks the next victim in a full bucket; sweep is where the
	// next sweep over budget starts.
	turn, sweep atomic.Uint64
}

// scBucket is one cache line: the tags (0: empty) and the entries.
type scBucket struct {
	tags  [scWays]atomic.Uint32
	slots [scWays]atomic.Pointer[scEntry]
	_     [64 - scWays*4 - scWays*8]byte
}

func newShortcutTable(entries int, budget int64) *shortcutTable {
	n := 1
	for n*scWays < entries {
		n <<= 1
	}
	return &shortcutTable{seed: maphash.MakeSeed(), buckets: make([]scBucket, n), budget: budget}
}

// hash is k's hash.
func (t *shortcutTable) hash(k scKey) uint64 {
	h := maphash.String(t.seed, k.name)
	// The type and flags, spread by an odd multiplier (a bijection).
	return h ^ (uint64(k.qtype)<<8|uint64(k.flags)+1)*0x9E3779B97F4A7C15
}

// at is the bucket and the tag of hash h.
func (t *shortcutTable) at(h uint64) (*scBucket, uint32) {
	return &t.buckets[h&uint64(len(t.buckets)-1)], uint32(h>>32) | 1
}

// get returns the entry for k (hash h), or nil.
func (t *shortcutTable) get(h uint64, k scKey) *scEntry {
	b, tag := t.at(h)
	for i := range b.tags {
		if b.tags[i].Load() != tag {
			continue
		}
		// The tag and the pointer are written one after the other: the
		// entry itself says whether it is k's.
		if e := b.slots[i].Load(); e != nil && e.h == h && e.key == k {
			return e
		}
	}
	return nil
}

// add keeps e (e.h set), replacing what its key held; now (unix
// nanoseconds) tells dead decisions.
func (t *shortcutTable) add(e *scEntry, now int64) {
	b, tag := t.at(e.h)
	i := -1
	for j := range b.slots {
		if old := b.slots[j].Load(); old != nil && old.h == e.h && old.key == e.key {
			i = j
			break
		}
	}
	for j := 0; i < 0 && j < scWays; j++ {
		if old := b.slots[j].Load(); old == nil || !old.memo.alive(now) {
			i = j
		}
	}
	if i < 0 {
		i = int(t.turn.Add(1) % scWays)
	}
	old := b.slots[i].Swap(e)
	b.tags[i].Store(tag)
	t.bytes.Add(e.cost() - old.cost())
	for n := 0; n < scSweep && t.bytes.Load() > t.budget; n++ {
		s := t.sweep.Add(1)
		sb := &t.buckets[(s/scWays)&uint64(len(t.buckets)-1)]
		t.clear(sb, int(s%scWays), sb.slots[s%scWays].Load())
	}
}

// remove drops e, if the table still holds it.
func (t *shortcutTable) remove(e *scEntry) {
	b, _ := t.at(e.h)
	for i := range b.slots {
		if b.slots[i].Load() == e {
			t.clear(b, i, e)
			return
		}
	}
}

// clear empties slot i of b if it holds e.
func (t *shortcutTable) clear(b *scBucket, i int, e *scEntry) {
	if e != nil && b.slots[i].CompareAndSwap(e, nil) {
		t.bytes.Add(-e.cost())
	}
}

func (t *shortcutTable) purge() {
	for i := range t.buckets {
		b := &t.buckets[i]
		for j := range b.slots {
			t.clear(b, j, b.slots[j].Load())
		}
	}
}

func (t *shortcutTable) len() int {
	n := 0
	for i := range t.buckets {
		for j := range t.buckets[i].slots {
			if t.buckets[i].slots[j].Load() != nil {
				n++
			}
		}
	}
	return n
}

// hit appends the kept shortcut reply to q to dst, into r, when there is
// one for q.NS and it still holds. One kept for another namespace is not
// q's (q is no expansion of that namespace's list) and stays.
func (s *SearchPath) hit(dst []byte, q *Query, st *Stages, r *Result) bool {
	k := scKey{name: q.Asked, qtype: q.Type, flags: flags(q.DO, q.CD)}
	e := s.table.get(s.table.hash(k), k)
	if e == nil || e.ns != q.NS {
		return false
	}
	if e.set != s.Settings() || !e.memo.alive(q.Now) || e.memo.conf != st.Conf() || !s.clusterStillHolds(e, q.Type) {
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
func (s *SearchPath) keep(q *Query, st *Stages, set *Settings, me *decision, steps []string, a Answer, m *dns.Msg, gen uint64, list int) {
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
	k := scKey{name: strings.Clone(q.Asked), qtype: q.Type, flags: flags(q.DO, q.CD)}
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
func (s *SearchPath) Kept(asked string, qtype uint16, do, cd bool) any {
	k := scKey{name: asked, qtype: qtype, flags: flags(do, cd)}
	if e := s.table.get(s.table.hash(k), k); e != nil {
		return e
	}
	return nil
}
