package pipeline

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
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
// cache hit, instead of a pack. Replies of any size are kept: a headless
// Service with hundreds of endpoints is exactly the reply that is dear to
// pack, and a UDP client gets its TC reply from the kept header and
// question without a copy of the rest (sendPacked). Bounded by entries
// and by bytes, and entries idle for packedIdle are dropped.
type packedCache struct {
	seed      maphash.Seed
	shardCost int64 // byte budget per shard
	shards    [packedShards]packedShard
}

// packedShard is one lock around one LRU and its byte count, so that a
// replacement (the old version's cost out, the new one's in) and the
// evictions it causes are one step: with the LRU's own lock and a separate
// counter, concurrent replacements of one key counted some old versions
// twice or never, and the count drifted (TestPackedCacheConcurrentReplace).
type packedShard struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[packedKey, *packedEntry]
	bytes int64 // guarded by mu
}

// newPackedCache bounds the cache at entries entries and budget bytes.
func newPackedCache(entries int, budget int64) *packedCache {
	p := &packedCache{seed: maphash.MakeSeed(), shardCost: max(budget/packedShards, 1)}
	for i := range p.shards {
		sh := &p.shards[i]
		// The callback runs under sh.mu: only the shard's own calls evict.
		c, err := simplelru.NewLRU(max(entries/packedShards, 1), func(k packedKey, e *packedEntry) {
			sh.bytes -= e.cost(k)
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
// at now (monotonic nanoseconds).
func (sh *packedShard) get(k packedKey, m *dns.Msg, now int64) ([]byte, bool) {
	sh.mu.Lock()
	e, ok := sh.lru.Get(k)
	sh.mu.Unlock()
	if !ok || e.m != m {
		return nil, false
	}
	e.used.Store(now)
	return e.wire, true
}

// add keeps wire (packed from m) for k. Idle entries at the old end go
// first, then the oldest while the shard is over its byte budget (the
// newest stays, whatever its size: it is the one being asked).
func (sh *packedShard) add(k packedKey, m *dns.Msg, wire []byte, now int64, budget int64) {
	e := &packedEntry{m: m, wire: wire}
	e.used.Store(now)
	idleBefore := now - int64(packedIdle)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := 0; i < packedTrimBatch; i++ {
		_, old, ok := sh.lru.GetOldest()
		if !ok || old.used.Load() >= idleBefore {
			break
		}
		sh.lru.RemoveOldest()
	}
	// Add replaces a present value without the evict callback: the old
	// version's cost leaves the count here.
	if old, ok := sh.lru.Peek(k); ok {
		sh.bytes -= old.cost(k)
	}
	sh.bytes += e.cost(k)
	sh.lru.Add(k, e)
	for sh.bytes > budget && sh.lru.Len() > 1 {
		sh.lru.RemoveOldest()
	}
}

// sendPacked appends the reply to c for m, a message the stage src (the
// cluster zone or static records) keeps until its records change. The
// packed reply is kept whatever its size; a UDP client it does not fit gets
// the TC reply made from its header and question alone, so a Service too
// large for UDP costs a query no more than a small one, and nothing is
// packed twice for the same message.
func (p *Pipeline) sendPacked(dst []byte, c *call, m *dns.Msg, src stage.Source) []byte {
	start := len(dst)
	k := packedKey{name: c.q.Name, qtype: c.q.Type}
	sh := p.packed.shard(k.name)
	now := p.mono(c.req.Received)
	if wire, ok := sh.get(k, m, now); ok {
		if !c.fits(len(wire)) {
			dst = p.truncatedReply(dst, start, wire, c, m.Rcode)
			p.observe(c, src, m.Rcode, 0, 0, dst[start:])
			return dst
		}
		dst = append(dst, wire...)
	} else {
		var err error
		if dst, err = p.pack(dst, c, m); err != nil {
			c.fail, c.failErr = failPack, err
			return p.reply(dst[:start], c, dns.RcodeServerFailure, stage.SourceLocal)
		}
		// The query's name lives in a reused buffer; the key outlives it.
		k.name = strings.Clone(k.name)
		sh.add(k, m, append([]byte(nil), dst[start:]...), now, p.packed.shardCost)
	}
	dst = p.finish(dst, start, c, m.Rcode)
	p.observe(c, src, m.Rcode, 0, 0, dst[start:])
	return dst
}
