package metrics

import (
	"slices"
	"sync"
)

// decayPeriod is how often, in seconds, top-k counts are halved, so that
// the lists follow what is loud now rather than since start.
const decayPeriod = 60

// topK estimates the most frequent keys with the Space-Saving algorithm
// (Metwally et al., 2005) in a table of fixed size: a key not in a full
// table replaces the least counted one and inherits its count plus one.
// A key's count is thus an over-estimate by at most the count it
// inherited, and any key seen more often than total/size is in the table.
// Memory is the table, whatever the traffic.
type topK[K comparable] struct {
	mu    sync.Mutex
	size  int
	clone func(K) K // copies a key before it is stored
	pos   map[K]int // key -> index in items
	items []topItem[K]
	last  int64 // Unix second of the last decay (0: never)
}

type topItem[K comparable] struct {
	key   K
	count uint64
}

func newTopK[K comparable](size int, clone func(K) K) *topK[K] {
	return &topK[K]{size: size, clone: clone, pos: make(map[K]int, size), items: make([]topItem[K], 0, size)}
}

func (t *topK[K]) add(k K, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay(now)
	if i, ok := t.pos[k]; ok {
		t.items[i].count++
		t.down(i)
		return
	}
	k = t.clone(k)
	if len(t.items) < t.size {
		t.items = append(t.items, topItem[K]{key: k, count: 1})
		i := len(t.items) - 1
		t.pos[k] = i
		t.up(i)
		return
	}
	least := t.items[0]
	delete(t.pos, least.key)
	t.items[0] = topItem[K]{key: k, count: least.count + 1}
	t.pos[k] = 0
	t.down(0)
}

// decay halves every count once per period elapsed since the last decay
// and drops the keys that reach zero.
func (t *topK[K]) decay(now int64) {
	if t.last == 0 || now < t.last {
		t.last = now
		return
	}
	n := (now - t.last) / decayPeriod
	if n <= 0 {
		return
	}
	t.last += n * decayPeriod
	shift := min(n, 63)
	kept := t.items[:0]
	for _, it := range t.items {
		it.count >>= shift
		if it.count > 0 {
			kept = append(kept, it)
		}
	}
	clear(t.items[len(kept):]) // let dropped keys be collected
	t.items = kept
	clear(t.pos)
	// Halving keeps the heap order but dropping entries does not: rebuild.
	for i := len(t.items)/2 - 1; i >= 0; i-- {
		t.down(i)
	}
	for i, it := range t.items {
		t.pos[it.key] = i
	}
}

// snapshot returns a copy of the table, in no particular order.
func (t *topK[K]) snapshot(now int64) []topItem[K] {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay(now)
	return slices.Clone(t.items)
}

// The table is a min-heap on count, so the least counted entry is items[0].

func (t *topK[K]) less(i, j int) bool { return t.items[i].count < t.items[j].count }

func (t *topK[K]) swap(i, j int) {
	t.items[i], t.items[j] = t.items[j], t.items[i]
	t.pos[t.items[i].key] = i
	t.pos[t.items[j].key] = j
}

func (t *topK[K]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *topK[K]) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(t.items) {
			return
		}
		m := l
		if r := l + 1; r < len(t.items) && t.less(r, l) {
			m = r
		}
		if !t.less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}
