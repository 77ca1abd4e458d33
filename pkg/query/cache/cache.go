// Package cache keeps answers for external names and fetches misses through
// an upstream Exchanger. It owns the caching rules: what is stored and for
// how long (RFC 2308 negative caching, clamps, short-lived SERVFAIL), TTLs
// that count down, serve-stale when the upstream fails (RFC 8767) and
// prefetch of popular entries before they expire.
//
// Entries are kept in wire form: the packed reply (ID zero, lower-case
// names, no OPT) plus the offsets of its TTL fields, so a hit is a copy and a
// few stores. The LRU is github.com/hashicorp/golang-lru/v2's simplelru,
// split in shards so that concurrent hits do not all queue on one lock;
// each shard evicts its own least recently used entries, so the bounds are
// exact and the order is LRU per shard, not globally. The cache is bounded
// by entries and by bytes (a reply's wire size plus a fixed overhead per
// entry), and replies above a size limit are never kept: a flood of names
// with very large answers cannot grow the agent past its memory limit.
//
// Lifetimes are measured on the monotonic clock: a step of the wall clock
// neither lengthens a TTL nor expires every entry at once.
package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// Exchanger sends a query upstream. It is what the cache needs from
// pkg/upstream; implementations must be safe for concurrent use.
type Exchanger interface {
	Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
}

// Key identifies a cached answer. Name is lower-case and fully qualified.
type Key struct {
	Name   string
	Type   uint16
	Class  uint16
	DO, CD bool
}

// Config tunes the cache. Zero values take the defaults named.
type Config struct {
	// Size bounds the number of entries; default 10000.
	Size int
	// MaxBytes bounds what the entries hold: their replies in wire form
	// plus entryOverhead each; default DefaultMaxBytes. The least
	// recently used entries go first.
	MaxBytes int64
	// MaxEntryBytes: a reply larger than this in wire form (compressed) is
	// answered but never kept; default DefaultMaxEntryBytes, at most
	// MaxBytes/16.
	MaxEntryBytes int
	// MinTTL and MaxTTL clamp the lifetime of positive answers; defaults 0
	// and 1h. A record's own TTL is honoured down to MinTTL.
	MinTTL, MaxTTL time.Duration
	// MaxNegativeTTL bounds NXDOMAIN/NODATA lifetimes; default 30m. The
	// lifetime is the SOA's TTL or MINIMUM, whichever is lower (RFC 2308).
	MaxNegativeTTL time.Duration
	// ServfailTTL is how long a SERVFAIL is kept; default 5s, at most 30s.
	ServfailTTL time.Duration
	// StaleFor is how long past expiry an entry may still be served when
	// every upstream fails; default 1h; negative disables serve-stale.
	StaleFor time.Duration
	// StaleTTL is the TTL on a stale answer; default 30s (RFC 8767).
	StaleTTL time.Duration
	// StaleAnswerAfter is how long a query for an expired entry waits for
	// the upstream before it is answered stale; default 1.8s (RFC 8767's
	// client response timer).
	StaleAnswerAfter time.Duration
	// StaleRetry is how long after a failed refresh stale answers are given
	// at once, without waiting on the upstream again; default 10s.
	StaleRetry time.Duration
	// PrefetchHits is how many hits make an entry popular; default 2; a
	// negative value disables prefetch.
	PrefetchHits int
	// PrefetchPercent: a popular entry is refreshed when its remaining
	// lifetime falls to this share of its original; default 10.
	PrefetchPercent int
	// MaxRefresh bounds concurrent background refreshes; default 32.
	MaxRefresh int
	// Clock reads monotonic time: the time elapsed since an origin of its
	// choosing, which never steps back or jumps with the wall clock.
	// Default: the runtime's monotonic clock (time.Since a reading taken
	// at New). Tests inject their own.
	Clock func() time.Duration
	// Panics counts panics recovered in background refreshes; nil: a
	// counter of the cache's own.
	Panics *recovery.Counter
	Logger *slog.Logger
}

// Defaults of the byte bounds. DefaultMaxBytes fits the DaemonSet's memory
// limit (deploy/daemonset.yaml: 256 MiB) with room for the cluster index at
// 10k Services and the Go heap's headroom; the default 10,000 entries of
// ordinary replies (a few hundred bytes) take about a tenth of it.
const (
	DefaultMaxBytes      = 32 << 20
	DefaultMaxEntryBytes = 16 << 10
	// entryOverhead is what an entry costs besides its bytes: the entry
	// itself (64 bytes), the LRU's list element and map slot.
	entryOverhead = 160
)

func (c *Config) defaults() error {
	if c.Size == 0 {
		c.Size = 10000
	}
	if c.Size < 1 {
		return fmt.Errorf("cache size %d: want at least 1", c.Size)
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxBytes < 64<<10 {
		return fmt.Errorf("cache max bytes %d: want at least 64 KiB", c.MaxBytes)
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	c.MaxEntryBytes = int(min(int64(c.MaxEntryBytes), c.MaxBytes/16, dns.MaxMsgSize))
	if c.MaxTTL == 0 {
		c.MaxTTL = time.Hour
	}
	if c.MaxNegativeTTL == 0 {
		c.MaxNegativeTTL = 30 * time.Minute
	}
	if c.MinTTL < 0 || c.MaxTTL < 0 || c.MaxNegativeTTL < 0 || c.MinTTL > c.MaxTTL {
		return fmt.Errorf("cache TTL bounds min %s max %s negative %s: want 0 <= min <= max", c.MinTTL, c.MaxTTL, c.MaxNegativeTTL)
	}
	if c.ServfailTTL == 0 {
		c.ServfailTTL = 5 * time.Second
	}
	if c.ServfailTTL > 30*time.Second {
		c.ServfailTTL = 30 * time.Second
	}
	if c.StaleFor == 0 {
		c.StaleFor = time.Hour
	}
	if c.StaleTTL <= 0 {
		c.StaleTTL = 30 * time.Second
	}
	if c.StaleAnswerAfter <= 0 {
		c.StaleAnswerAfter = 1800 * time.Millisecond
	}
	if c.StaleRetry <= 0 {
		c.StaleRetry = 10 * time.Second
	}
	if c.PrefetchHits == 0 {
		c.PrefetchHits = 2
	}
	if c.PrefetchPercent <= 0 || c.PrefetchPercent > 100 {
		c.PrefetchPercent = 10
	}
	if c.MaxRefresh <= 0 {
		c.MaxRefresh = 32
	}
	if c.Clock == nil {
		origin := time.Now()
		c.Clock = func() time.Duration { return time.Since(origin) }
	}
	if c.Panics == nil {
		c.Panics = new(recovery.Counter)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// kind classifies an entry; it decides the lifetime rule and whether the
// entry can stand in when the upstream fails.
type kind uint8

const (
	kindPositive kind = iota
	kindNegative
	kindServfail
)

// entry is immutable once stored, except for its counters. It is laid
// out to fit 64 bytes: a full cache holds a hundred thousand of them.
type entry struct {
	// wire is the packed reply (ID 0, lower-case names, no OPT). Its spare
	// capacity holds the offsets of its TTL fields, two bytes each (see
	// ttlOffsets): one allocation and no second slice header.
	wire     []byte
	stored   int64 // Clock reading, nanoseconds
	lifetime int64 // nanoseconds
	// staleUntil: after a failed refresh, stale answers are given at once
	// until this Clock reading.
	staleUntil atomic.Int64
	hits       atomic.Uint32
	rcode      uint16 // up to 4095 with the extended bits
	kind       kind
	flags      uint8 // keyFlags of the key it was stored for
	// refreshing is set while one background refresh runs for this entry.
	refreshing atomic.Bool
	// gone is set when the entry leaves the cache (evicted, or replaced by
	// a newer reply for its key): a kept StoredHit then misses.
	gone atomic.Bool
}

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
func (e *entry) denial() bool { return e.kind != kindPositive }

// cost is what e counts against MaxBytes.
func (e *entry) cost() int64 { return int64(cap(e.wire)) + entryOverhead }

// Stats are the cache's counters.
type Stats struct {
	Entries  int `json:"entries"`
	Capacity int `json:"capacity"`
	// Bytes is what the entries hold (MaxBytes bounds it).
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"max_bytes"`
	// TooLarge counts replies not kept for their size (MaxEntryBytes).
	TooLarge    uint64 `json:"too_large"`
	Hits        uint64 `json:"hits"`
	Misses      uint64 `json:"misses"`
	Evictions   uint64 `json:"evictions"`
	StaleServed uint64 `json:"stale_served"`
	Prefetches  uint64 `json:"prefetches"`
	// DenialEntries, DenialHits and DenialEvictions are the part of
	// Entries, Hits and Evictions that are denials (NXDOMAIN, NODATA and
	// cached SERVFAIL): CoreDNS's cache type "denial", the rest being
	// "success".
	DenialEntries   int    `json:"denial_entries"`
	DenialHits      uint64 `json:"denial_hits"`
	DenialEvictions uint64 `json:"denial_evictions"`
}

// Cache is safe for concurrent use.
type Cache struct {
	// cfg and up change only through Reconfigure and SetExchanger; readers
	// load them once per operation.
	cfg  atomic.Pointer[Config]
	log  *slog.Logger
	up   atomic.Pointer[exchangerBox]
	seed maphash.Seed
	// shards hold entries by a 64-bit hash of their Key (slot); the
	// entry's packed question and flags confirm the key on every lookup,
	// so a collision is a miss, never a wrong answer. Keying by the hash
	// instead of the Key saves the name string, and 16 bytes in each of
	// the LRU's list element and map slot: about 90 bytes an entry.
	shards []*shard
	// refreshSem bounds background refreshes (prefetch and stale refresh).
	refreshSem chan struct{}
	// bg is the context background refreshes run under; Close cancels it.
	bg     context.Context
	cancel context.CancelFunc
	// mu guards closed; wg counts background goroutines (Close waits).
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	hits, misses, evictions, stale, prefetches, tooLarge atomic.Uint64
	// denialHits and denialEvictions count the denial part of hits and
	// evictions (see Stats).
	denialHits, denialEvictions atomic.Uint64
}

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
}

// add stores e under h, then evicts the least recently used entries while
// the shard is over its byte budget (e itself stays: it fits MaxEntryBytes).
func (sh *shard) add(h uint64, e *entry) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Add replaces a present value without the evict callback: the old
	// entry's cost leaves the count here.
	if old, ok := sh.lru.Peek(h); ok {
		sh.bytes -= old.cost()
		if old.denial() {
			sh.denials--
		}
		old.gone.Store(true)
	}
	sh.bytes += e.cost()
	if e.denial() {
		sh.denials++
	}
	sh.lru.Add(h, e)
	sh.trim()
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

// New returns a cache in front of up.
func New(cfg Config, up Exchanger) (*Cache, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	n := 1
	for n < 16 && cfg.Size/(n*2) >= 256 {
		n *= 2
	}
	c := &Cache{log: cfg.Logger.With("component", "cache"), seed: maphash.MakeSeed(),
		refreshSem: make(chan struct{}, cfg.MaxRefresh)}
	c.cfg.Store(&cfg)
	c.up.Store(&exchangerBox{up})
	c.bg, c.cancel = context.WithCancel(context.Background())
	for i := 0; i < n; i++ {
		size := int(split(int64(cfg.Size), n, i))
		sh := &shard{budget: split(cfg.MaxBytes, n, i)}
		// The callback runs under sh.mu: only the shard's own calls evict.
		l, err := simplelru.NewLRU(size, func(_ uint64, e *entry) {
			e.gone.Store(true)
			sh.bytes -= e.cost()
			c.evictions.Add(1)
			if e.denial() {
				sh.denials--
				c.denialEvictions.Add(1)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("creating cache shard of %d: %w", size, err)
		}
		sh.lru = l
		c.shards = append(c.shards, sh)
	}
	return c, nil
}

type exchangerBox struct{ Exchanger }

func (c *Cache) conf() *Config { return c.cfg.Load() }

// SetExchanger replaces the upstream (live reload). Exchanges already
// under way finish with the old one.
func (c *Cache) SetExchanger(up Exchanger) { c.up.Store(&exchangerBox{up}) }

// Reconfigure applies new limits (live reload): size and byte bounds, TTL
// clamps, negative and SERVFAIL lifetimes, serve-stale and prefetch
// settings. The clock, panic counter, logger and MaxRefresh stay as they
// were. Entries already stored keep their lifetimes; smaller bounds evict
// the least recently used.
func (c *Cache) Reconfigure(cfg Config) error {
	old := c.conf()
	cfg.Clock, cfg.Panics, cfg.Logger, cfg.MaxRefresh = old.Clock, old.Panics, old.Logger, old.MaxRefresh
	if err := cfg.defaults(); err != nil {
		return err
	}
	if cfg.Size != old.Size || cfg.MaxBytes != old.MaxBytes {
		n := len(c.shards)
		for i, sh := range c.shards {
			sh.resize(int(split(int64(cfg.Size), n, i)), split(cfg.MaxBytes, n, i))
		}
	}
	c.cfg.Store(&cfg)
	return nil
}

// now reads the cache's monotonic clock, in nanoseconds.
func (c *Cache) now() int64 { return int64(c.conf().Clock()) }

// Close stops background refreshes and waits for them to return. The
// cache still answers afterwards, without refreshing in the background.
func (c *Cache) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// background runs f on a goroutine Close waits for; false once closed. A
// panic in f is recovered, counted and logged (f's own deferred calls run
// first, so it can clean up what it holds): background work must never
// take the agent down.
func (c *Cache) background(what string, f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.conf().Panics.Recover(c.log, what)
		f()
	}()
	return true
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

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	cfg := c.conf()
	s := Stats{Capacity: cfg.Size, MaxBytes: cfg.MaxBytes, Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(),
		StaleServed: c.stale.Load(), Prefetches: c.prefetches.Load(), TooLarge: c.tooLarge.Load()}
	for _, sh := range c.shards {
		sh.mu.Lock()
		s.Entries += sh.lru.Len()
		s.Bytes += sh.bytes
		s.DenialEntries += sh.denials
		sh.mu.Unlock()
	}
	s.DenialHits, s.DenialEvictions = c.denialHits.Load(), c.denialEvictions.Load()
	return s
}

// countHit counts a hit on e.
func (c *Cache) countHit(e *entry) {
	c.hits.Add(1)
	if e.denial() {
		c.denialHits.Add(1)
	}
}

// Len is the number of entries.
func (c *Cache) Len() int {
	n := 0
	for _, sh := range c.shards {
		sh.mu.Lock()
		n += sh.lru.Len()
		sh.mu.Unlock()
	}
	return n
}

// AppendHit appends the cached reply for k to dst when a fresh entry exists,
// with every TTL counted down. The header's ID and flags and the question's
// case are the caller's to patch. It is the allocation-free hit path: it
// unpacks nothing. ok is false on a miss or an expired entry (Resolve then
// deals with it).
func (c *Cache) AppendHit(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ok bool) {
	e, remain, ok := c.hit(name, qtype, qclass, do, cd)
	if !ok {
		return dst, 0, false
	}
	start := len(dst)
	dst = append(dst, e.wire...)
	e.putTTLs(dst[start:], ttlSeconds(remain))
	return dst, int(e.rcode), true
}

// AppendHitRef is AppendHit that also returns the stored reply that
// answered, as a *StoredHit (in an any, so that callers need not import
// this package), for a caller that keeps a copy of the reply and takes its
// later hits through StoredHit.Hit. It allocates the StoredHit.
func (c *Cache) AppendHitRef(dst []byte, name string, qtype, qclass uint16, do, cd bool) (out []byte, rcode int, ref any, ok bool) {
	e, remain, ok := c.hit(name, qtype, qclass, do, cd)
	if !ok {
		return dst, 0, nil, false
	}
	start := len(dst)
	dst = append(dst, e.wire...)
	e.putTTLs(dst[start:], ttlSeconds(remain))
	k := Key{Name: strings.Clone(name), Type: qtype, Class: qclass, DO: do, CD: cd}
	return dst, int(e.rcode), &StoredHit{c: c, e: e, k: k}, true
}

// StoredHit is one stored reply, kept by a caller that copied it
// (pkg/server's search-path shortcuts build a reply around it). A stored
// reply never changes: a refresh stores a new one, and this one is gone.
type StoredHit struct {
	c *Cache
	e *entry
	k Key
}

// storedTouchEvery: one Hit in this many also marks the entry recently
// used, so that a reply served only through StoredHits is not evicted as
// unused (a lookup per hit would cost what the caller avoids).
const storedTouchEvery = 64

// Hit takes a hit on the stored reply as AppendHit would (counted; a
// popular entry prefetched) without looking it up or copying it: ok while
// it is still the cache's fresh answer for its key, with its TTL now.
func (h *StoredHit) Hit() (ttl uint32, ok bool) {
	e := h.e
	if e.gone.Load() {
		return 0, false
	}
	remain := e.expires() - h.c.now()
	if remain <= 0 {
		return 0, false
	}
	h.c.countHit(e)
	h.c.maybePrefetch(h.k, e, remain)
	if e.hits.Load()%storedTouchEvery == 0 {
		h.c.get(&h.k)
	}
	return ttlSeconds(remain), true
}

// hit returns the fresh entry for the key and its remaining lifetime,
// counting the hit and prefetching a popular entry.
func (c *Cache) hit(name string, qtype, qclass uint16, do, cd bool) (*entry, int64, bool) {
	k := Key{Name: name, Type: qtype, Class: qclass, DO: do, CD: cd}
	e, found := c.get(&k)
	if !found {
		return nil, 0, false
	}
	remain := e.expires() - c.now()
	if remain <= 0 {
		return nil, 0, false
	}
	c.countHit(e)
	c.maybePrefetch(k, e, remain)
	return e, remain, true
}

// Peek returns the fresh entry for the key as a message with its TTLs
// counted down, without asking the upstream; ok is false on a miss or an
// expired entry.
func (c *Cache) Peek(name string, qtype, qclass uint16, do, cd bool) (*dns.Msg, bool) {
	k := Key{Name: name, Type: qtype, Class: qclass, DO: do, CD: cd}
	e, found := c.get(&k)
	if !found {
		return nil, false
	}
	remain := e.expires() - c.now()
	if remain <= 0 {
		return nil, false
	}
	m, err := e.msg(0, ttlSeconds(remain))
	if err != nil {
		return nil, false
	}
	c.countHit(e)
	c.maybePrefetch(k, e, remain)
	return m, true
}

func ttlSeconds(ns int64) uint32 {
	s := ns / int64(time.Second)
	if s > 1<<31-1 {
		s = 1<<31 - 1
	}
	return uint32(s)
}

// Resolve answers q from the cache, or from upstream on a miss. The reply's
// question is q's (lower-cased) and its ID is q's. fromCache is true when
// no upstream exchange was awaited; stale is true for a stale answer.
func (c *Cache) Resolve(ctx context.Context, q *dns.Msg) (reply *dns.Msg, fromCache, stale bool, err error) {
	if len(q.Question) != 1 {
		return nil, false, false, fmt.Errorf("cache: query has %d questions, want 1", len(q.Question))
	}
	k := KeyOf(q)
	e, found := c.get(&k)
	now := c.now()
	if found {
		if remain := e.expires() - now; remain > 0 {
			c.countHit(e)
			c.maybePrefetch(k, e, remain)
			r, err := e.msg(q.Id, ttlSeconds(remain))
			return r, true, false, err
		}
		if !c.usableStale(e, now) {
			found = false
		} else if e.staleUntil.Load() > now {
			// The upstream failed moments ago: answer stale at once and
			// let one background refresh find out whether it is back.
			c.refreshAsync(k, e)
			return c.serveStale(e, q.Id)
		}
	}
	c.misses.Add(1)
	if !found {
		r, _, err := c.fetch(ctx, k, q.Id)
		return r, false, false, err
	}
	// An expired entry that may stand in: give the upstream
	// StaleAnswerAfter, then answer stale while the fetch goes on in the
	// background (it outlives this query, not the cache).
	type result struct {
		r   *dns.Msg
		err error
	}
	ch := make(chan result, 1)
	id := q.Id // q is the caller's: not to be touched once Resolve returns
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.bg, cancel)
	if !c.background("refreshing an expired entry", func() {
		defer cancel()
		defer stop()
		res := result{err: errors.New("cache: refresh did not finish")}
		// Sent however the fetch ends, a panic included: the query
		// waiting on it then answers stale at once.
		defer func() {
			if res.err != nil || failed(res.r) {
				c.staleFor(e)
			}
			ch <- res
		}()
		res.r, _, res.err = c.fetch(fctx, k, id)
	}) {
		// Closed: no background work any more; ask in the foreground.
		cancel()
		stop()
		if r, _, err := c.fetch(ctx, k, id); err == nil && !failed(r) {
			return r, false, false, nil
		}
		return c.serveStale(e, q.Id)
	}
	timer := time.NewTimer(c.conf().StaleAnswerAfter)
	defer timer.Stop()
	select {
	case res := <-ch:
		if res.err == nil && !failed(res.r) {
			return res.r, false, false, nil
		}
		return c.serveStale(e, q.Id)
	case <-timer.C:
		// The upstream is slow: the queries that follow get the stale
		// answer at once instead of each waiting out the timer (and each
		// leaving a fetch behind) until the fetch under way has landed.
		c.staleFor(e)
		return c.serveStale(e, q.Id)
	case <-ctx.Done():
		return nil, false, false, fmt.Errorf("cache: waiting for upstream: %w", ctx.Err())
	}
}

// staleFor makes e answer stale at once for StaleRetry.
func (c *Cache) staleFor(e *entry) {
	e.staleUntil.Store(c.now() + int64(c.conf().StaleRetry))
}

func (c *Cache) usableStale(e *entry, now int64) bool {
	return c.conf().StaleFor > 0 && e.kind != kindServfail && now-e.expires() < int64(c.conf().StaleFor)
}

func (c *Cache) serveStale(e *entry, id uint16) (*dns.Msg, bool, bool, error) {
	c.stale.Add(1)
	r, err := e.msg(id, ttlSeconds(int64(c.conf().StaleTTL)))
	return r, true, true, err
}

// failed reports whether a reply is one a stale answer should replace.
func failed(r *dns.Msg) bool {
	return r.Rcode == dns.RcodeServerFailure || r.Rcode == dns.RcodeRefused
}

// fetch asks the upstream and stores what may be stored. A reply that was
// stored gets every TTL set to the entry's lifetime, so that the answer to
// the miss and the hits after it agree (clamps included). stored reports
// whether the reply replaced the entry for k. The reply's ID is id.
func (c *Cache) fetch(ctx context.Context, k Key, id uint16) (r *dns.Msg, stored bool, err error) {
	out := upstreamQuery(k, id)
	r, err = c.up.Load().Exchange(ctx, out)
	if err != nil {
		return nil, false, err
	}
	r.Id = id
	if len(r.Question) == 0 {
		r.Question = out.Question
	}
	if life, ok := c.store(k, r); ok {
		setTTLs(r, ttlSeconds(int64(life)))
		return r, true, nil
	}
	return r, false, nil
}

// setTTLs sets the TTL of every record of r but the OPT.
func setTTLs(r *dns.Msg, ttl uint32) {
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype != dns.TypeOPT {
				rr.Header().Ttl = ttl
			}
		}
	}
}

// upstreamQuery is the query the cache sends for k: lower-case name, RD,
// the client's CD, EDNS0 with DO when the client set it.
func upstreamQuery(k Key, id uint16) *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: id, RecursionDesired: true, CheckingDisabled: k.CD}}
	m.Question = []dns.Question{{Name: k.Name, Qtype: k.Type, Qclass: k.Class}}
	m.SetEdns0(1232, k.DO)
	return m
}

// KeyOf returns the cache key of a query.
func KeyOf(q *dns.Msg) Key {
	k := Key{Name: strings.ToLower(q.Question[0].Name), Type: q.Question[0].Qtype, Class: q.Question[0].Qclass, CD: q.CheckingDisabled}
	if o := q.IsEdns0(); o != nil {
		k.DO = o.Do()
	}
	return k
}

// Put stores r as the answer for k if the caching rules allow it.
func (c *Cache) Put(k Key, r *dns.Msg) { c.store(k, r) }

// keeps reports whether old must survive a SERVFAIL: it is still fresh, or
// could still be served stale (either is worth more than the failure).
func (c *Cache) keeps(old *entry, now int64) bool {
	return old.kind != kindServfail && (old.expires() > now || c.usableStale(old, now))
}

// store applies the caching rules (written next to the code that enforces
// them, as the RFCs they come from):
//   - truncated replies are never stored: the TCP retry has the real answer;
//   - the reply must answer exactly k's question;
//   - NOERROR with answers: lifetime is the smallest TTL in the message (OPT
//     excluded), clamped to [MinTTL, MaxTTL];
//   - NXDOMAIN, or NOERROR without answers (NODATA): only with an SOA in the
//     authority section; lifetime min(SOA TTL, SOA MINIMUM) (RFC 2308 §5),
//     at most MaxNegativeTTL; SOA-less denials are not stored;
//   - SERVFAIL: ServfailTTL, and never over an entry that is still fresh
//     (a failed prefetch) or could still be served stale: that entry is
//     worth more than the failure;
//   - everything else (REFUSED, FORMERR, NOTIMP, ...) is not stored.
//
// It returns the entry's lifetime and whether r was stored.
func (c *Cache) store(k Key, r *dns.Msg) (time.Duration, bool) {
	if r.Truncated || len(r.Question) != 1 {
		return 0, false
	}
	if q := r.Question[0]; q.Qtype != k.Type || q.Qclass != k.Class || !strings.EqualFold(q.Name, k.Name) {
		return 0, false
	}
	now := c.now()
	var life time.Duration
	var kd kind
	switch {
	case r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0:
		kd = kindPositive
		life = clamp(minTTL(r), c.conf().MinTTL, c.conf().MaxTTL)
	case r.Rcode == dns.RcodeNameError || r.Rcode == dns.RcodeSuccess:
		soa := findSOA(r)
		if soa == nil {
			return 0, false
		}
		kd = kindNegative
		ttl := min(soa.Hdr.Ttl, soa.Minttl)
		life = clamp(time.Duration(ttl)*time.Second, 0, c.conf().MaxNegativeTTL)
	case r.Rcode == dns.RcodeServerFailure:
		kd = kindServfail
		life = c.conf().ServfailTTL
		if old, ok := c.peek(&k); ok && c.keeps(old, now) {
			return 0, false
		}
	default:
		return 0, false
	}
	if life <= 0 {
		return 0, false
	}
	wire, err := pack(k, r, c.conf().MaxEntryBytes)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			c.tooLarge.Add(1)
		}
		c.log.Debug("not caching reply", "name", k.Name, "type", k.Type, "err", err)
		return 0, false
	}
	e := &entry{wire: wire, kind: kd, flags: keyFlags(&k), rcode: uint16(r.Rcode), stored: now, lifetime: int64(life)}
	sh, h := c.slot(&k)
	sh.add(h, e)
	return life, true
}

func clamp(d, lo, hi time.Duration) time.Duration { return max(lo, min(d, hi)) }

func minTTL(r *dns.Msg) time.Duration {
	m := uint32(1<<32 - 1)
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			m = min(m, rr.Header().Ttl)
		}
	}
	return time.Duration(m) * time.Second
}

func findSOA(r *dns.Msg) *dns.SOA {
	for _, rr := range r.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return soa
		}
	}
	return nil
}

// errTooLarge: the reply is larger than MaxEntryBytes.
var errTooLarge = errors.New("reply larger than the cache's entry limit")

// pack stores r in wire form: ID 0, lower-case question and owner names (so
// owners equal to the question compress against it and take the client's
// case when the server patches the question), no OPT. A reply that packs
// into more than limit bytes is refused with errTooLarge.
func pack(k Key, r *dns.Msg, limit int) ([]byte, error) {
	m := &dns.Msg{MsgHdr: r.MsgHdr, Compress: true}
	m.Id = 0
	m.Question = []dns.Question{{Name: k.Name, Qtype: k.Type, Qclass: k.Class}}
	// A reply whose records alone, each with a name compressed to a
	// pointer, exceed the limit is refused before anything is copied or
	// packed: the flood of very large answers this limit is for costs
	// no work here.
	if floor := packedFloor(r); floor > limit {
		return nil, fmt.Errorf("reply for %s: at least %d bytes: %w", k.Name, floor, errTooLarge)
	}
	lower := func(in []dns.RR) []dns.RR {
		out := make([]dns.RR, 0, len(in))
		for _, rr := range in {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if name := rr.Header().Name; hasUpper(name) {
				rr = dns.Copy(rr)
				rr.Header().Name = strings.ToLower(name)
			}
			out = append(out, rr)
		}
		return out
	}
	m.Answer, m.Ns, m.Extra = lower(r.Answer), lower(r.Ns), lower(r.Extra)
	packed, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing reply for %s: %w", k.Name, err)
	}
	if len(packed) > limit {
		return nil, fmt.Errorf("reply for %s: %d bytes: %w", k.Name, len(packed), errTooLarge)
	}
	// miekg/dns packs some records it unpacked into bytes it cannot read
	// back (a record with empty RDATA, say). The hit path serves these
	// bytes as they are, so they must parse: one unpack per stored entry,
	// off the hit path. Found by FuzzAppendHit.
	if err := new(dns.Msg).Unpack(packed); err != nil {
		return nil, fmt.Errorf("reply for %s packs into bytes that do not unpack: %w", k.Name, err)
	}
	offs, err := dnswire.TTLOffsets(packed)
	if err != nil {
		return nil, fmt.Errorf("indexing TTLs of reply for %s: %w", k.Name, err)
	}
	// One exact allocation (Pack's buffer is sized for the uncompressed
	// message): the reply, then its TTL offsets in the spare capacity.
	buf := make([]byte, len(packed), len(packed)+2*len(offs))
	copy(buf, packed)
	for _, o := range offs {
		buf = binary.BigEndian.AppendUint16(buf, o)
	}
	return buf[:len(packed)], nil
}

// packedFloor is a lower bound on r's packed size: the header, and each
// record's fixed fields and RDATA with its owner name a 2-byte pointer.
// RDATA lengths are the ones read off the wire (r came from Unpack);
// records built in memory have none and count for their fixed part only.
func packedFloor(r *dns.Msg) int {
	n := dnswire.HeaderLen
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			n += 2 + 10 + int(rr.Header().Rdlength)
		}
	}
	return n
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// msg unpacks the entry with every TTL set to ttl.
func (e *entry) msg(id uint16, ttl uint32) (*dns.Msg, error) {
	b := make([]byte, len(e.wire))
	copy(b, e.wire)
	e.putTTLs(b, ttl)
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, fmt.Errorf("cache: unpacking stored reply: %w", err)
	}
	m.Id = id
	return m, nil
}

// maybePrefetch refreshes a popular entry whose remaining lifetime has
// fallen to PrefetchPercent of its original, once at a time per entry.
func (c *Cache) maybePrefetch(k Key, e *entry, remain int64) {
	hits := e.hits.Add(1)
	if c.conf().PrefetchHits < 0 || int(hits) < c.conf().PrefetchHits || e.kind == kindServfail {
		return
	}
	if remain*100 > e.lifetime*int64(c.conf().PrefetchPercent) {
		return
	}
	if c.refreshAsync(k, e) {
		c.prefetches.Add(1)
	}
}

// refreshAsync starts one background fetch for k unless one is running for
// e, the refresh bound is reached or the cache is closed. It reports
// whether it started one.
func (c *Cache) refreshAsync(k Key, e *entry) bool {
	if !e.refreshing.CompareAndSwap(false, true) {
		return false
	}
	// The hit path may hand in a name that lives in the caller's reusable
	// buffer; the refresh outlives it.
	k.Name = strings.Clone(k.Name)
	select {
	case c.refreshSem <- struct{}{}:
	default:
		e.refreshing.Store(false)
		return false
	}
	started := c.background("refreshing a cached entry", func() {
		defer func() { <-c.refreshSem }()
		fetched := false
		defer func() {
			if !fetched {
				// The fetch panicked (background recovers it): leave e
				// so that a later query may refresh it again.
				c.staleFor(e)
				e.refreshing.Store(false)
			}
		}()
		r, stored, err := c.fetch(c.bg, k, 0)
		fetched = true
		switch {
		case err != nil || failed(r):
			// Stale answers (once e expires) go out at once for
			// StaleRetry; the next query that finds e starts another
			// refresh, one at a time.
			c.staleFor(e)
			e.refreshing.Store(false)
			if err != nil && !errors.Is(err, context.Canceled) {
				c.log.Debug("background refresh failed", "name", k.Name, "type", k.Type, "err", err)
			}
		case !stored:
			// An answer that may not be cached (no SOA, truncated, ...):
			// e stays, and may be refreshed again.
			e.refreshing.Store(false)
		}
		// Stored: e has been replaced, and its flag stays set so that a
		// query still holding e does not refresh it a second time.
	})
	if !started {
		<-c.refreshSem
		e.refreshing.Store(false)
	}
	return started
}
