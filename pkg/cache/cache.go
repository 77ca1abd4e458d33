// Package cache keeps answers for external names and fetches misses
// through an upstream (a stage.Exchanger). It owns the caching rules: what
// is stored and for how long (RFC 2308 negative caching, clamps,
// short-lived SERVFAIL and upstream failures, zones not cached), TTLs that
// count down (or are kept), serve-stale when the upstream fails (RFC 8767; verify or
// immediate, prefer-positive) and prefetch of popular entries before they
// expire: CoreDNS 1.15's cache options.
//
// Entries are kept in wire form: the packed reply (ID zero, lower-case
// names, no OPT but one carrying the upstream's Extended DNS Errors, if it
// sent any) plus the offsets of its TTL fields, so a hit is a copy and a
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
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Key identifies a cached answer: the question's identity, which the
// forwarder also coalesces in-flight exchanges by (stage.Key).
type Key = stage.Key

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
	// lifetime is the SOA's TTL or MINIMUM, whichever is lower (RFC 2308),
	// at least MinNegativeTTL (default 0).
	MaxNegativeTTL, MinNegativeTTL time.Duration
	// ServfailTTL is how long a SERVFAIL or NOTIMP is kept, and a failure
	// of every upstream (no usable reply) remembered as a SERVFAIL;
	// default 5s, at most 5m (RFC 2308 §7.1); negative: never kept.
	ServfailTTL time.Duration
	// KeepTTL: hits carry the TTL the entry was stored with instead of
	// counting it down (CoreDNS's keepttl).
	KeepTTL bool
	// StaleFor is how long past expiry an entry may still be served when
	// every upstream fails; default 1h; negative disables serve-stale.
	StaleFor time.Duration
	// StaleTTL is the TTL on a stale answer; default 30s (RFC 8767);
	// negative: 0.
	StaleTTL time.Duration
	// StaleImmediate answers a query for an expired entry stale at once
	// and refreshes it in the background (CoreDNS's serve_stale
	// immediate), instead of verifying with the upstream first.
	StaleImmediate bool
	// StaleAnswerAfter is how long a query for an expired entry waits for
	// the upstream (verifying) before it is answered stale; default 1.8s
	// (RFC 8767's client response timer); negative: until the upstream
	// fails or answers (CoreDNS's verify without a timeout).
	StaleAnswerAfter time.Duration
	// StaleRetry is how long after a failed refresh stale answers are given
	// at once, without waiting on the upstream again (and, immediate,
	// before another refresh starts); default 10s; negative: 0.
	StaleRetry time.Duration
	// StalePreferPositive keeps an answer over a denial, a failure or an
	// answer that does not answer the question, for as long as it may be
	// served stale (CoreDNS's serve_stale_policy prefer_positive).
	StalePreferPositive bool
	// PrefetchHits is how many hits make an entry popular; default 2; a
	// negative value disables prefetch.
	PrefetchHits int
	// PrefetchWindow: only hits each within this of the previous one
	// count (a longer gap counts from 1 again); default 1m; negative: no
	// window.
	PrefetchWindow time.Duration
	// PrefetchPercent: a popular entry is refreshed on the hit that sees
	// its TTL at this share of the original or less (whole seconds,
	// rounded up, as CoreDNS); default 10.
	PrefetchPercent int
	// DisableSuccess and DisableDenial are zones (lower-case, fully
	// qualified; "." every name) whose answers, respectively denials
	// (NXDOMAIN, NODATA, SERVFAIL), are never stored (CoreDNS's disable).
	DisableSuccess, DisableDenial []string
	// ClearRD asks the upstream with RD clear (CoreDNS's header { query
	// clear rd }).
	ClearRD bool
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

// maxServfailTTL bounds ServfailTTL: RFC 2308 §7.1's 5 minutes, CoreDNS's
// bound too.
const maxServfailTTL = 5 * time.Minute

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
	if c.MinNegativeTTL < 0 || c.MinNegativeTTL > c.MaxNegativeTTL {
		return fmt.Errorf("cache negative TTL bounds min %s max %s: want 0 <= min <= max", c.MinNegativeTTL, c.MaxNegativeTTL)
	}
	if c.ServfailTTL == 0 {
		c.ServfailTTL = 5 * time.Second
	}
	if c.ServfailTTL > maxServfailTTL {
		c.ServfailTTL = maxServfailTTL
	}
	if c.StaleFor == 0 {
		c.StaleFor = time.Hour
	}
	// Negative values of the stale settings mean 0 (or no timer) and are
	// kept as they are: defaults may run again on a defaulted Config.
	if c.StaleTTL == 0 {
		c.StaleTTL = 30 * time.Second
	}
	if c.StaleAnswerAfter == 0 {
		c.StaleAnswerAfter = 1800 * time.Millisecond
	}
	if c.StaleRetry == 0 {
		c.StaleRetry = 10 * time.Second
	}
	if c.PrefetchHits == 0 {
		c.PrefetchHits = 2
	}
	if c.PrefetchWindow == 0 {
		c.PrefetchWindow = time.Minute
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

// Stats are the cache's counters. pkg/observe/metrics reports them as
// they are: the JSON names are the /stats document's (read by `nodedns
// stats --json`), so fields are added, never renamed.
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
	// Refreshes counts background refreshes started (prefetches and
	// refreshes of expired entries); RefreshFailed those whose upstream
	// failed or whose answer could not replace the entry, which is then
	// served stale at once for StaleRetry.
	Refreshes     uint64 `json:"refreshes"`
	RefreshFailed uint64 `json:"refresh_failed"`
}

// Cache is safe for concurrent use.
type Cache struct {
	// cfg and up change only through Reconfigure and SetExchanger; readers
	// load them once per operation.
	cfg  atomic.Pointer[Config]
	log  *slog.Logger
	up   atomic.Pointer[exchangerBox]
	seed maphash.Seed
	// gen moves whenever what a fetch under way would store may no longer
	// be stored: the upstream was replaced (SetExchanger), entries were
	// dropped (Forget, Reconfigure). A fetch reads it before it reads the
	// upstream, and its reply is stored only while gen has not moved
	// (checked under the shard's lock, so a drop that follows cannot miss
	// it).
	gen atomic.Uint64
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
	// refreshes and refreshFailed: see Stats.
	refreshes, refreshFailed atomic.Uint64
}

// New returns a cache in front of up.
func New(cfg Config, up stage.Exchanger) (*Cache, error) {
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
			e.setGone()
			sh.bytes -= e.cost()
			if e.denial() {
				sh.denials--
			}
			if sh.dropping {
				return
			}
			c.evictions.Add(1)
			if e.denial() {
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

type exchangerBox struct{ stage.Exchanger }

func (c *Cache) conf() *Config { return c.cfg.Load() }

// SetExchanger replaces the upstream (live reload). Exchanges already
// under way finish with the old one and answer their queries, but their
// replies are not stored: they are the old upstream's. The entries stored
// before stay; Forget drops those the new upstream would answer otherwise.
func (c *Cache) SetExchanger(up stage.Exchanger) {
	c.up.Store(&exchangerBox{up})
	// After the store: a fetch that reads the new generation reads the new
	// upstream too.
	c.gen.Add(1)
}

// Reconfigure applies new limits (live reload): size and byte bounds, TTL
// clamps, negative and SERVFAIL lifetimes, serve-stale and prefetch
// settings. The clock, panic counter, logger and MaxRefresh stay as they
// were. Smaller bounds evict the least recently used entries. Entries the
// new settings would not have stored as they are go (settingsDrop): those
// under a zone now in DisableSuccess or DisableDenial, and those whose
// lifetime is longer than the new bound of their kind; the others keep
// their lifetimes.
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
	if drop := settingsDrop(old, &cfg); drop != nil {
		if n := c.dropIf(drop); n > 0 {
			c.log.Info("cache entries dropped: the new settings would not keep them", "entries", n)
		}
	}
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
	s.Refreshes, s.RefreshFailed = c.refreshes.Load(), c.refreshFailed.Load()
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
