package ndots

import (
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// memo remembers which expansion won a walk for (namespace, base), for a
// short time and a bounded number of names, so that A and AAAA for one
// name from one namespace always take the same path. Shortcuts built from
// a decision hold it and die with it: a decision is marked dead when it is
// replaced, forgotten, evicted or purged. Safe for concurrent use.
type memo struct {
	ttl time.Duration
	c   *lru.Cache[string, *decision]
}

// decision is one remembered winner.
type decision struct {
	key     string // "<namespace>/<base>"
	idx     int    // the winning step
	qtype   uint16 // the type whose walk found it
	expires int64  // unix nanoseconds
	// conf is the configuration generation (Stages.Conf) when the walk
	// that decided began: the decision holds only while it is current.
	conf uint64
	dead atomic.Bool
}

// alive reports whether the decision still stands at now (unix
// nanoseconds).
func (e *decision) alive(now int64) bool { return !e.dead.Load() && now < e.expires }

// newMemo returns a memo of at most size decisions (size > 0), each kept
// for ttl.
func newMemo(size int, ttl time.Duration) *memo {
	c, err := lru.NewWithEvict(size, func(_ string, e *decision) { e.dead.Store(true) })
	if err != nil {
		panic(err) // only for size <= 0, which callers never pass
	}
	return &memo{ttl: ttl, c: c}
}

// get returns the decision for key, if one made under conf still stands.
func (w *memo) get(key string, conf uint64) (*decision, bool) {
	e, ok := w.c.Get(key)
	if !ok || !e.alive(time.Now().UnixNano()) || e.conf != conf {
		return nil, false
	}
	return e, true
}

// put remembers idx as the winner for key, decided by a walk begun under
// conf, and returns the decision.
func (w *memo) put(key string, idx int, qtype uint16, conf uint64) *decision {
	e := &decision{key: key, idx: idx, qtype: qtype, expires: time.Now().Add(w.ttl).UnixNano(), conf: conf}
	if old, ok := w.c.Peek(key); ok {
		// Add replaces a value without the eviction callback.
		old.dead.Store(true)
	}
	w.c.Add(key, e)
	return e
}

// forget drops e's decision (if it is still the one kept for its key).
func (w *memo) forget(e *decision) {
	e.dead.Store(true)
	if cur, ok := w.c.Peek(e.key); ok && cur == e {
		w.c.Remove(e.key)
	}
}

// Purge forgets every decision (each is marked dead, and so is every
// shortcut built from one).
func (w *memo) Purge() { w.c.Purge() }

// Len is how many decisions are kept.
func (w *memo) Len() int { return w.c.Len() }
