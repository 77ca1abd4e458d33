package metrics

import (
	"sync/atomic"
	"time"
)

// ringLen is the number of per-second buckets: more than the longest window
// (60 s) plus the second being filled.
const ringLen = 64

// secondRing counts events per wall-clock second. Each bucket packs the
// second it counts (low 32 bits of the Unix time) in its high half and the
// count in its low half, so that claiming a bucket for a new second and
// counting into it cannot lose one another's updates.
type secondRing struct {
	b [ringLen]atomic.Uint64
}

const countMask = 1<<32 - 1

func (q *secondRing) add(sec int64) {
	b := &q.b[uint64(sec)%ringLen]
	tag := uint64(uint32(sec)) << 32
	for {
		v := b.Load()
		if v&^countMask == tag {
			if v&countMask != countMask {
				b.Add(1)
			}
			return
		}
		if b.CompareAndSwap(v, tag|1) {
			return
		}
	}
}

// count returns the events counted in seconds [from, to).
func (q *secondRing) count(from, to int64) uint64 {
	var n uint64
	for s := from; s < to; s++ {
		v := q.b[uint64(s)%ringLen].Load()
		if v>>32 == uint64(uint32(s)) {
			n += v & countMask
		}
	}
	return n
}

// rate is the mean events per second over the window whole seconds before
// second now, over fewer when the recorder (started at second start) is
// younger than the window.
func (q *secondRing) rate(now, start, window int64) float64 {
	to := now
	span := min(window, to-start)
	if span <= 0 {
		return 0
	}
	return float64(q.count(to-span, to)) / float64(span)
}

// durationBounds are the upper bounds of the request duration buckets: a
// cache hit on the reader takes microseconds, an upstream exchange
// milliseconds to seconds.
var durationBounds = [...]time.Duration{
	25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond,
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// durationHistogram is a lock-free histogram with fixed buckets; the sum is
// kept in integer nanoseconds so that adding to it is one atomic add.
type durationHistogram struct {
	counts [len(durationBounds) + 1]atomic.Uint64 // the last is +Inf
	sumNs  atomic.Uint64
}

func (h *durationHistogram) observe(d time.Duration) {
	d = max(d, 0)
	i := 0
	for i < len(durationBounds) && d > durationBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(uint64(d))
}

// snapshot returns the total count, the sum in seconds and the cumulative
// bucket counts keyed by upper bound in seconds, as Prometheus wants them.
func (h *durationHistogram) snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(durationBounds))
	for i, b := range durationBounds {
		count += h.counts[i].Load()
		buckets[b.Seconds()] = count
	}
	count += h.counts[len(durationBounds)].Load()
	return count, float64(h.sumNs.Load()) / 1e9, buckets
}
