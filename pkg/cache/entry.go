package cache

import (
	"encoding/binary"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// kind classifies an entry; it decides the lifetime rule and whether the
// entry can stand in when the upstream fails.
type kind uint8

const (
	// kindPositive: NOERROR with records that answer the question.
	kindPositive kind = iota
	kindNegative
	// kindServfail: SERVFAIL or NOTIMP (CoreDNS's server errors), or a
	// failure without a reply remembered as SERVFAIL.
	kindServfail
	// kindPartial: NOERROR with records that do not answer the question
	// (a CNAME chain that does not reach the type asked), with an SOA:
	// NODATA at the chain's end, stored for a denial's lifetime; counted
	// with the answers (CoreDNS's "success"), but not one
	// serve-stale-policy prefer-positive keeps.
	kindPartial
)

// entry is immutable once stored, except for its counters. It is laid
// out to fit 64 bytes: a full cache holds a hundred thousand of them.
type entry struct {
	// wire is the packed reply (ID 0, lower-case names, no OPT but one
	// with the upstream's EDE options, last). Its spare
	// capacity holds the offsets of its TTL fields, two bytes each (see
	// ttlOffsets): one allocation and no second slice header.
	wire     []byte
	stored   int64 // Clock reading, nanoseconds
	lifetime int64 // nanoseconds
	// staleUntil: after a failed refresh, stale answers are given at once
	// until this Clock reading.
	staleUntil atomic.Int64
	// freq counts the hits for prefetch (see hit): the last hit's Clock
	// reading in milliseconds above freqHitBits bits of count. One word,
	// so the entry keeps its 64 bytes.
	freq  atomic.Uint64
	rcode uint16 // up to 4095 with the extended bits
	kind  kind
	flags uint8 // keyFlags of the key it was stored for
	// st holds stRefreshing, set while one refresh runs for this entry,
	// and stGone, set when the entry leaves the cache (evicted, or
	// replaced by a newer reply for its key): a kept StoredHit then
	// misses. One word for both keeps the entry at 64 bytes.
	st atomic.Uint32
}

const (
	stRefreshing uint32 = 1 << iota
	stGone
)

// startRefresh marks a refresh of e under way; false if one already is.
func (e *entry) startRefresh() bool {
	for {
		old := e.st.Load()
		if old&stRefreshing != 0 {
			return false
		}
		if e.st.CompareAndSwap(old, old|stRefreshing) {
			return true
		}
	}
}

// endRefresh lets another refresh of e start.
func (e *entry) endRefresh() { e.st.And(^stRefreshing) }

func (e *entry) refreshing() bool { return e.st.Load()&stRefreshing != 0 }

func (e *entry) setGone() { e.st.Or(stGone) }

func (e *entry) gone() bool { return e.st.Load()&stGone != 0 }

// ttlOffsets returns the TTL offsets kept after the packed reply.
func (e *entry) ttlOffsets() []byte { return e.wire[len(e.wire):cap(e.wire)] }

// putTTLs writes ttl into every TTL field of m, a copy of e.wire.
func (e *entry) putTTLs(m []byte, ttl uint32) {
	offs := e.ttlOffsets()
	for i := 0; i+1 < len(offs); i += 2 {
		binary.BigEndian.PutUint32(m[binary.BigEndian.Uint16(offs[i:]):], ttl)
	}
}

func (e *entry) expires() int64 { return e.stored + e.lifetime }

// denial reports whether e is a denial (NXDOMAIN, NODATA or SERVFAIL).
func (e *entry) denial() bool { return e.kind == kindNegative || e.kind == kindServfail }

// freqHitBits is the width of the hit count in entry.freq; the count
// saturates there.
const (
	freqHitBits = 20
	freqHitMax  = 1<<freqHitBits - 1
)

// hits is the hit count of e (for prefetch, and how often a StoredHit
// touches the LRU).
func (e *entry) hits() uint32 { return uint32(e.freq.Load() & freqHitMax) }

// hit counts a hit at now (Clock nanoseconds) and returns the count. With
// a window (> 0), a hit more than window after the previous one starts the
// count again at 1, as CoreDNS's prefetch counts hits.
func (e *entry) hit(now int64, window time.Duration) uint32 {
	ms := uint64(max(now, 0) / int64(time.Millisecond))
	for {
		old := e.freq.Load()
		n := old & freqHitMax
		if window > 0 && int64(ms-min(old>>freqHitBits, ms)) > int64(window/time.Millisecond) {
			n = 0
		}
		if n < freqHitMax {
			n++
		}
		if e.freq.CompareAndSwap(old, ms<<freqHitBits|n) {
			return uint32(n)
		}
	}
}

// cost is what e counts against MaxBytes.
func (e *entry) cost() int64 { return int64(cap(e.wire)) + entryOverhead }

// shard is one lock around an LRU and what its entries cost, so that a
// replacement (the old entry's cost out, the new one's in) and the
// evictions it causes are one step and the count cannot drift.
type shard struct {
	mu     sync.Mutex
	lru    *simplelru.LRU[uint64, *entry]
	bytes  int64 // guarded by mu
	budget int64 // guarded by mu
	// denials counts the denial entries held; guarded by mu.
	denials int
	// dropping: entries leaving now are dropped (dropIf), not evicted;
	// guarded by mu.
	dropping bool
}

// add stores e under h, then evicts the least recently used entries while
// the shard is over its byte budget (e itself stays: it fits MaxEntryBytes).
// It stores nothing, and reports false, when gen no longer reads want: the
// reply was fetched before the upstream was replaced or entries dropped.
func (sh *shard) add(h uint64, e *entry, gen *atomic.Uint64, want uint64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if gen.Load() != want {
		return false
	}
	// Add replaces a present value without the evict callback: the old
	// entry's cost leaves the count here.
	if old, ok := sh.lru.Peek(h); ok {
		sh.bytes -= old.cost()
		if old.denial() {
			sh.denials--
		}
		old.setGone()
	}
	sh.bytes += e.cost()
	if e.denial() {
		sh.denials++
	}
	sh.lru.Add(h, e)
	sh.trim()
	return true
}

// trim evicts the oldest entries while over budget; sh.mu is held.
func (sh *shard) trim() {
	for sh.bytes > sh.budget && sh.lru.Len() > 1 {
		sh.lru.RemoveOldest()
	}
}

// resize applies new bounds; sh.mu is not held.
func (sh *shard) resize(size int, budget int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.budget = budget
	sh.lru.Resize(max(size, 1))
	sh.trim()
}

// split divides total among n shards, the remainder to the first ones.
func split(total int64, n, i int) int64 {
	v := total / int64(n)
	if int64(i) < total%int64(n) {
		v++
	}
	return v
}

// slot returns k's shard and hash.
func (c *Cache) slot(k *Key) (*shard, uint64) {
	h := maphash.String(c.seed, k.Name)
	// The rest of the key, spread by an odd multiplier (a bijection, so
	// keys that differ only here always hash apart).
	rest := uint64(k.Type)<<32 | uint64(k.Class)<<16 | uint64(keyFlags(k))
	h ^= (rest + 1) * 0x9E3779B97F4A7C15
	if len(c.shards) == 1 {
		return c.shards[0], h
	}
	return c.shards[(h>>32)%uint64(len(c.shards))], h
}

// get returns the entry for k, marking it recently used.
func (c *Cache) get(k *Key) (*entry, bool) { return c.lookup(k, true) }

// peek is get without touching the recency.
func (c *Cache) peek(k *Key) (*entry, bool) { return c.lookup(k, false) }

func (c *Cache) lookup(k *Key, touch bool) (*entry, bool) {
	sh, h := c.slot(k)
	var e *entry
	var ok bool
	sh.mu.Lock()
	if touch {
		e, ok = sh.lru.Get(h)
	} else {
		e, ok = sh.lru.Peek(h)
	}
	sh.mu.Unlock()
	if !ok || !e.is(k) {
		return nil, false
	}
	return e, true
}

func keyFlags(k *Key) uint8 {
	var f uint8
	if k.DO {
		f |= 1
	}
	if k.CD {
		f |= 2
	}
	return f
}

// is reports whether e was stored for k: the flags, and the question at
// the start of e's packed reply (packed from k's lower-case name, so a
// match is byte for byte).
func (e *entry) is(k *Key) bool {
	if e.flags != keyFlags(k) {
		return false
	}
	end, ok := wireNameIs(e.wire, dnswire.HeaderLen, k.Name)
	if !ok || end+4 > len(e.wire) {
		return false
	}
	return binary.BigEndian.Uint16(e.wire[end:]) == k.Type && binary.BigEndian.Uint16(e.wire[end+2:]) == k.Class
}

// wireNameIs reports whether the uncompressed name at m[off:] spells name
// (a fully qualified presentation name) exactly, and where it ends. A name
// with escapes is packed and compared as bytes.
func wireNameIs(m []byte, off int, name string) (int, bool) {
	if strings.IndexByte(name, '\\') >= 0 {
		var buf [256]byte
		n, err := dns.PackDomainName(name, buf[:], 0, nil, false)
		if err != nil || off+n > len(m) || string(m[off:off+n]) != string(buf[:n]) {
			return 0, false
		}
		return off + n, true
	}
	if name == "." {
		return off + 1, off < len(m) && m[off] == 0
	}
	i := 0
	for {
		if off >= len(m) {
			return 0, false
		}
		l := int(m[off])
		off++
		if l == 0 {
			return off, i == len(name)
		}
		// A dot inside a wire label is spelled "\." in a name, which the
		// escape case above compares.
		if l > 63 || off+l > len(m) || i+l >= len(name) || name[i+l] != '.' || string(m[off:off+l]) != name[i:i+l] ||
			strings.IndexByte(name[i:i+l], '.') >= 0 {
			return 0, false
		}
		off += l
		i += l + 1
	}
}
