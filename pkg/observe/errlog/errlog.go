// Package errlog writes failure lines (the SERVFAILs the agent sends, the
// upstream exchanges that fail) at warn level, so an operator sees them
// without turning debug logging on, and keeps a storm of them from flooding
// the log or slowing the serving path, as CoreDNS's errors plugin does with
// `consolidate`.
//
// Each reason (a short constant string such as "upstream failed") has a
// token bucket: a burst of lines, then a steady rate. Lines the bucket
// refuses are counted, and the count is reported as `suppressed=N` on the
// reason's next line, or by a summary line within Config.Summary when no
// further line comes. Memory is bounded: at most Config.MaxReasons reasons
// are tracked; further ones share one bucket ("other reasons").
//
// Asking whether a line may be written (Allow) allocates nothing, so callers
// on the zero-allocation hit path ask first and build the line only when it
// will be written. Packages that log their failures themselves get the same
// limit through Handler, keyed by the record's message.
package errlog

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Limiter. Zero values take the defaults named.
type Config struct {
	// Burst is how many lines of one reason may be written back to back;
	// default 10.
	Burst int
	// Every is how often one more line of a reason may be written once its
	// burst is spent; default 1s.
	Every time.Duration
	// Summary is how often suppressed counts without a later line are
	// reported; default 30s.
	Summary time.Duration
	// MaxReasons bounds the reasons tracked apart; default 64.
	MaxReasons int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Burst <= 0 {
		c.Burst = 10
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.Summary <= 0 {
		c.Summary = 30 * time.Second
	}
	if c.MaxReasons <= 0 {
		c.MaxReasons = 64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// otherReasons names the bucket shared by reasons past MaxReasons.
const otherReasons = "other reasons"

// Limiter rate-limits failure lines per reason. It is safe for concurrent
// use.
type Limiter struct {
	cfg Config
	log *slog.Logger

	mu      sync.RWMutex
	buckets map[string]*bucket
	other   *bucket
}

// bucket is one reason's token bucket.
type bucket struct {
	reason string
	mu     sync.Mutex
	// tokens are counted in units of Every: a line costs one.
	tokens float64
	last   int64 // unix nanoseconds of the last refill
	// suppressed counts the lines refused since the last line written or
	// summary reported.
	suppressed uint64
	total      atomic.Uint64
}

// New returns a Limiter whose summary lines go to log (its own lines are
// written by the callers).
func New(log *slog.Logger, cfg Config) *Limiter {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	l := &Limiter{cfg: cfg, log: log, buckets: map[string]*bucket{}}
	l.other = l.newBucket(otherReasons)
	return l
}

func (l *Limiter) newBucket(reason string) *bucket {
	return &bucket{reason: reason, tokens: float64(l.cfg.Burst), last: l.cfg.Now().UnixNano()}
}

func (l *Limiter) bucket(reason string) *bucket {
	l.mu.RLock()
	b, ok := l.buckets[reason]
	l.mu.RUnlock()
	if ok {
		return b
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.buckets[reason]; ok {
		return b
	}
	if len(l.buckets) >= l.cfg.MaxReasons {
		return l.other
	}
	b = l.newBucket(reason)
	l.buckets[reason] = b
	return b
}

// Allow reports whether a line for reason may be written now. When it may,
// suppressed is how many lines of that reason were held back since the
// last one (the caller adds it to its line). It allocates nothing once the
// reason has been seen.
func (l *Limiter) Allow(reason string) (suppressed uint64, ok bool) {
	b := l.bucket(reason)
	b.total.Add(1)
	now := l.cfg.Now().UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := now - b.last; d > 0 {
		b.tokens = min(b.tokens+float64(d)/float64(l.cfg.Every), float64(l.cfg.Burst))
		b.last = now
	}
	if b.tokens < 1 {
		b.suppressed++
		return 0, false
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return suppressed, true
}

// Count is how many lines were asked for per reason (written or not),
// "other reasons" included when any went there.
func (l *Limiter) Count() map[string]uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]uint64, len(l.buckets)+1)
	for r, b := range l.buckets {
		out[r] = b.total.Load()
	}
	if n := l.other.total.Load(); n > 0 {
		out[otherReasons] = n
	}
	return out
}

// Run reports suppressed counts every Config.Summary until ctx is done, so
// that a burst followed by silence is still accounted for.
func (l *Limiter) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Summary)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Flush()
			return
		case <-t.C:
			l.Flush()
		}
	}
}

// Flush writes one summary line per reason with lines suppressed since its
// last line, and resets those counts.
func (l *Limiter) Flush() {
	l.mu.RLock()
	bs := make([]*bucket, 0, len(l.buckets)+1)
	for _, b := range l.buckets {
		bs = append(bs, b)
	}
	bs = append(bs, l.other)
	l.mu.RUnlock()
	for _, b := range bs {
		b.mu.Lock()
		n := b.suppressed
		b.suppressed = 0
		b.mu.Unlock()
		if n > 0 {
			l.log.Warn("similar failure lines suppressed", "reason", b.reason, "suppressed", n,
				"limit", l.limitText())
		}
	}
}

func (l *Limiter) limitText() string {
	return "burst " + strconv.Itoa(l.cfg.Burst) + ", then one per " + l.cfg.Every.String()
}

// Handler wraps inner so that records at warn level and above are limited
// per message, as Allow limits reasons; a record written after others were
// held back carries `suppressed=N`. Records below warn pass through.
func (l *Limiter) Handler(inner slog.Handler) slog.Handler {
	return &handler{inner: inner, l: l}
}

type handler struct {
	inner slog.Handler
	l     *Limiter
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		n, ok := h.l.Allow(r.Message)
		if !ok {
			return nil
		}
		if n > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Uint64("suppressed", n))
		}
	}
	return h.inner.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(attrs), l: h.l}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name), l: h.l}
}
