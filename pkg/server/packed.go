package server

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"
)

// packedShards splits the packed-reply cache so that readers on several
// cores do not queue on one lock.
const packedShards = 16

// packedKey identifies one packed cluster reply by question.
type packedKey struct {
	name  string
	qtype uint16
}

// packedEntry is the reply packed from the index's message m. The entry is
// valid only while the index still returns that same message for the
// question: a changed Service gets a new message, the pointers differ and
// the entry is packed again in place. So each question keeps one version,
// and holding m (the current message, which the index holds too) keeps its
// address from being reused while the entry exists.
type packedEntry struct {
	m    *dns.Msg
	wire []byte
	// used is when the entry last answered (UnixNano of the request's
	// receive time); entries idle for packedIdle are dropped.
	used atomic.Int64
}

// cost is what the entry holds, for the byte budget: the key, the wire
// reply and the LRU's bookkeeping. m is not counted: the index holds it
// while it is current, and an idle entry (the only kind that can hold a
// superseded m for long) is dropped after packedIdle.
func (e *packedEntry) cost(k packedKey) int64 {
	return int64(len(k.name) + len(e.wire) + 128)
}

const (
	// maxPackedReply: larger replies (big headless Services over TCP) are
	// packed per query rather than kept.
	maxPackedReply = 4096
	// packedIdle: an entry not used for this long is dropped the next time
	// its shard takes a new entry, so the cache follows the names being
	// asked (under Service churn, the names of deleted Services go).
	packedIdle = 2 * time.Minute
	// packedTrimBatch bounds the idle entries one insertion removes, so no
	// query pays for a large sweep.
	packedTrimBatch = 8
)

// packedCache keeps cluster replies in wire form (lower-case question, no
// OPT), so that a cluster answer on the reader is a copy and a patch, like a
// cache hit, instead of a pack. Bounded by entries and by bytes, and
// entries idle for packedIdle are dropped.
type packedCache struct {
	seed      maphash.Seed
	shardCost int64 // byte budget per shard
	shards    [packedShards]packedShard
}

type packedShard struct {
	lru   *lru.Cache[packedKey, *packedEntry]
	bytes atomic.Int64
}

// newPackedCache bounds the cache at entries entries and budget bytes.
func newPackedCache(entries int, budget int64) *packedCache {
	p := &packedCache{seed: maphash.MakeSeed(), shardCost: max(budget/packedShards, maxPackedReply)}
	for i := range p.shards {
		sh := &p.shards[i]
		c, err := lru.NewWithEvict(max(entries/packedShards, 1), func(k packedKey, e *packedEntry) {
			sh.bytes.Add(-e.cost(k))
		})
		if err != nil {
			panic(err) // size >= 1 always
		}
		sh.lru = c
	}
	return p
}

func (p *packedCache) shard(name string) *packedShard {
	return &p.shards[maphash.String(p.seed, name)%packedShards]
}

// get returns the wire reply for k if it was packed from m, marking it used
// at now.
func (sh *packedShard) get(k packedKey, m *dns.Msg, now int64) ([]byte, bool) {
	e, ok := sh.lru.Get(k)
	if !ok || e.m != m {
		return nil, false
	}
	e.used.Store(now)
	return e.wire, true
}

// add keeps wire (packed from m) for k. Idle entries at the old end go
// first, then the oldest while the shard is over its byte budget.
func (sh *packedShard) add(k packedKey, m *dns.Msg, wire []byte, now int64, budget int64) {
	e := &packedEntry{m: m, wire: wire}
	e.used.Store(now)
	idleBefore := now - int64(packedIdle)
	for i := 0; i < packedTrimBatch; i++ {
		_, old, ok := sh.lru.GetOldest()
		if !ok || old.used.Load() >= idleBefore {
			break
		}
		sh.lru.RemoveOldest()
	}
	// Add does not report a replaced value to the evict callback; Remove
	// does, so the old version's cost leaves the budget.
	sh.lru.Remove(k)
	sh.bytes.Add(e.cost(k))
	sh.lru.Add(k, e)
	for sh.bytes.Load() > budget && sh.lru.Len() > 1 {
		sh.lru.RemoveOldest()
	}
}

// sendCluster appends the reply to r for the cluster's message m.
func (s *Server) sendCluster(dst []byte, r *request, m *dns.Msg) []byte {
	start := len(dst)
	k := packedKey{name: r.q.Name, qtype: r.q.Type}
	sh := s.packed.shard(k.name)
	now := r.start.UnixNano()
	if wire, ok := sh.get(k, m, now); ok {
		dst = append(dst, wire...)
	} else {
		var err error
		if dst, err = s.pack(dst, r, m); err != nil {
			s.log.Warn("packing cluster reply failed", "name", r.q.Name, "type", r.q.Type, "err", err)
			return s.reply(dst[:start], r, dns.RcodeServerFailure, SourceLocal)
		}
		if n := len(dst) - start; n <= maxPackedReply {
			// The query's name lives in a reused buffer; the key outlives it.
			k.name = strings.Clone(k.name)
			sh.add(k, m, append([]byte(nil), dst[start:]...), now, s.packed.shardCost)
		}
	}
	dst = s.finish(dst, start, r, m.Rcode)
	s.observe(r, SourceCluster, m.Rcode, 0, 0, dst[start:])
	return dst
}
