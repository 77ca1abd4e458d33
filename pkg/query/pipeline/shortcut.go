package pipeline

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
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
//   - the walk's decision (walkMemo entry): it dies when the memo forgets,
//     replaces, evicts or purges it, and when it expires, so A and AAAA
//     keep following one decision;
//   - the search-path settings (a reload changes the pointer);
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
	// scShards splits the table so that readers on several cores do not
	// queue on one lock.
	scShards = 16
	// scEntries and scBytes bound the table: about 600 bytes an entry
	// (the reply, the winner's cached reply, the step names).
	scEntries = 8192
	scBytes   = 4 << 20
	// scTrimBatch bounds the dead entries one insertion removes.
	scTrimBatch = 8
)

// scKey identifies a shortcut reply.
type scKey struct {
	name  string // the name asked, lower-case
	qtype uint16
	flags uint8 // DO, CD: a cached winner depends on them
}

func scFlags(c *call) uint8 {
	var f uint8
	if c.q.DO {
		f |= 1
	}
	if c.q.CD() {
		f |= 2
	}
	return f
}

// scEntry is one kept shortcut reply. Immutable but for gen.
type scEntry struct {
	// key is what the entry answers; the table is keyed by its hash.
	key scKey
	// ns is the client's namespace, the string the Pods source gave (the
	// same string on the next query, so comparing it reads no memory).
	ns   string
	set  *walkSettings
	memo *memoEntry
	// steps are the walk's names up to the winner, which is last.
	steps []string
	// cluster: the cluster's message for the winner; nil for a cached
	// winner.
	cluster *dns.Msg
	// gen is the cluster Generation the entry was last checked at.
	gen atomic.Uint64
	// wire is the reply (ID 0, lower-case question, no OPT); ttls the
	// offsets of its TTL fields (used for a cached winner).
	wire []byte
	ttls []uint16
	// winHit is the cache's stored reply for a cached winner: a query
	// takes its hit through it, without a lookup.
	winHit stage.StoredHit
}

func (e *scEntry) idx() int { return len(e.steps) - 1 }

func (e *scEntry) cost() int64 {
	n := len(e.key.name) + len(e.ns) + len(e.wire) + 2*len(e.ttls) + 200
	for _, s := range e.steps {
		n += len(s) + 16
	}
	return int64(n)
}

// shortcutTable keeps shortcut replies, bounded by entries and bytes.
type shortcutTable struct {
	seed   maphash.Seed
	budget int64 // bytes per shard
	shards [scShards]scShard
}

// scShard is one lock around one LRU and its byte count. The LRU is keyed
// by the key's 64-bit hash (scTable.hash, which also picks the shard), so a
// lookup hashes the name once; the entry's own key is compared after.
type scShard struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[uint64, *scEntry]
	bytes int64 // guarded by mu
}

func newShortcutTable(entries int, budget int64) *shortcutTable {
	t := &shortcutTable{seed: maphash.MakeSeed(), budget: max(budget/scShards, 1)}
	for i := range t.shards {
		sh := &t.shards[i]
		// The callback runs under sh.mu: only the shard's own calls evict.
		l, err := simplelru.NewLRU(max(entries/scShards, 1), func(_ uint64, e *scEntry) { sh.bytes -= e.cost() })
		if err != nil {
			panic(err) // size >= 1 always
		}
		sh.lru = l
	}
	return t
}

// hash is k's hash and the shard that keeps it.
func (t *shortcutTable) hash(k scKey) (uint64, *scShard) {
	h := maphash.String(t.seed, k.name)
	// The type and flags, spread by an odd multiplier (a bijection).
	h ^= (uint64(k.qtype)<<8 | uint64(k.flags) + 1) * 0x9E3779B97F4A7C15
	return h, &t.shards[(h>>32)%scShards]
}

// get returns the entry for k (hash h), or nil; an entry of another key
// with the same hash is a miss.
func (sh *scShard) get(h uint64, k scKey) *scEntry {
	sh.mu.Lock()
	e, _ := sh.lru.Get(h)
	sh.mu.Unlock()
	if e == nil || e.key != k {
		return nil
	}
	return e
}

// add keeps e for k, replacing what k held. Entries whose decision has
// died go first from the old end, then the oldest while the shard is over
// budget.
func (sh *scShard) add(h uint64, e *scEntry, now int64, budget int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := 0; i < scTrimBatch; i++ {
		_, old, ok := sh.lru.GetOldest()
		if !ok || old.memo.alive(now) {
			break
		}
		sh.lru.RemoveOldest()
	}
	if old, ok := sh.lru.Peek(h); ok {
		sh.bytes -= old.cost() // Add replaces without the callback
	}
	sh.bytes += e.cost()
	sh.lru.Add(h, e)
	for sh.bytes > budget && sh.lru.Len() > 1 {
		sh.lru.RemoveOldest()
	}
}

func (sh *scShard) remove(h uint64, e *scEntry) {
	sh.mu.Lock()
	if cur, ok := sh.lru.Peek(h); ok && cur == e {
		sh.lru.Remove(h)
	}
	sh.mu.Unlock()
}

func (t *shortcutTable) purge() {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.lru.Purge()
		sh.mu.Unlock()
	}
}

func (t *shortcutTable) len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.lru.Len()
		sh.mu.Unlock()
	}
	return n
}

// clusterGen returns the cluster's generation (0: it cannot tell, and
// every check of a shortcut asks the cluster again).
func (p *Pipeline) clusterGen() uint64 { return p.cfg.Cluster.Generation() }

// shortcutHit appends the kept shortcut reply to c, a walk candidate from a
// pod in namespace ns, when there is one and it still holds.
func (p *Pipeline) shortcutHit(dst []byte, c *call, ns string) ([]byte, bool) {
	k := scKey{name: c.q.Name, qtype: c.q.Type, flags: scFlags(c)}
	h, sh := p.shortcuts.hash(k)
	e := sh.get(h, k)
	if e == nil {
		return dst, false
	}
	if e.ns != ns || e.set != p.walkConf() || !e.memo.alive(c.req.Received.UnixNano()) || !p.clusterStillHolds(e, c) {
		sh.remove(h, e)
		return dst, false
	}
	start := len(dst)
	if e.cluster == nil {
		// The winner's hit first: it is what may end the shortcut.
		ttl, ok := e.winHit.Hit()
		if !ok {
			sh.remove(h, e)
			return dst, false
		}
		dst = append(dst, e.wire...)
		dnswire.PutTTLs(dst[start:], e.ttls, ttl)
	} else {
		dst = append(dst, e.wire...)
	}
	dst = p.finish(dst, start, c, dns.RcodeSuccess)
	p.observe(c, stage.SourceAutopath, dns.RcodeSuccess, 1, e.idx(), dst[start:])
	return dst, true
}

// clusterStillHolds reports whether the cluster still answers as it did
// when e was built: nothing changed since (the generation), or every
// earlier step in the zone is still NXDOMAIN and a cluster winner still has
// the same message. An earlier step that now exists ends the decision: the
// name is walked again.
func (p *Pipeline) clusterStillHolds(e *scEntry, c *call) bool {
	gen := p.clusterGen()
	if gen != 0 && e.gen.Load() == gen {
		return true
	}
	if !p.stepsStillMissing(e.steps[:e.idx()], c.q.Type) {
		p.memo.forget(e.memo)
		return false
	}
	if e.cluster != nil {
		res, ok := p.cfg.Cluster.Lookup(e.steps[e.idx()], c.q.Type)
		if !ok || res.NotSynced || res.ExternalTarget != "" || res.Msg != e.cluster {
			return false
		}
	}
	e.gen.Store(gen)
	return true
}

// keepShortcut keeps m, the reply walk built on the reader for c from the
// memo entry me and the winner's answer a (steps: the walk's names up to
// the winner), as a shortcut, when a is the cluster's or a cached one (a
// static record is answered, not kept). gen is the cluster generation
// read before any answer was.
func (p *Pipeline) keepShortcut(c *call, ns string, set *walkSettings, me *memoEntry, steps []string, a answer, m *dns.Msg, gen uint64) {
	if a.Source != stage.SourceCluster && a.stored == nil {
		return
	}
	wire, err := p.pack(nil, c, m)
	if err != nil {
		return // answered all the same, packed again by send
	}
	ttls, err := dnswire.TTLOffsets(wire)
	if err != nil {
		return
	}
	k := scKey{name: strings.Clone(c.q.Name), qtype: c.q.Type, flags: scFlags(c)}
	e := &scEntry{key: k, ns: ns, set: set, memo: me, steps: steps, wire: wire, ttls: ttls}
	if a.Source == stage.SourceCluster {
		e.cluster = a.Msg
	} else {
		if len(ttls) == 0 {
			return // nothing to count down
		}
		e.winHit = a.stored
	}
	e.gen.Store(gen)
	h, sh := p.shortcuts.hash(k)
	sh.add(h, e, c.req.Received.UnixNano(), p.shortcuts.budget)
}

// asAsked answers r, a walk candidate, when the name asked exists in the
// cluster as it is: the walk's first step wins, whatever the type (a name
// exists or not for every type alike), and the reply is the cluster's
// answer itself, no CNAME: what the client gets without autopath. This is
// a pod's short name for a Service of its own namespace.
func (p *Pipeline) asAsked(dst []byte, c *call) ([]byte, bool) {
	res, ok := p.cfg.Cluster.Lookup(c.name, c.q.Type)
	if !ok || res.NotSynced || res.ExternalTarget != "" || res.Msg.Rcode == dns.RcodeNameError {
		return dst, false
	}
	return p.sendPacked(dst, c, res.Msg, stage.SourceCluster), true
}
