package upstream

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// histBuckets are log2 buckets of microseconds: bucket i holds durations in
// [2^(i-1), 2^i) µs, bucket 0 under 1 µs, the last everything above ~1 min.
const histBuckets = 28

// Histogram is a lock-free latency histogram with log2 buckets, good enough
// for p50/p99 in stats (within a factor of two, reported at the bucket's
// geometric middle). Prometheus gets exact buckets elsewhere.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	us := d.Microseconds()
	i := 0
	if us > 0 {
		i = 64 - bits.LeadingZeros64(uint64(us))
	}
	if i >= histBuckets {
		i = histBuckets - 1
	}
	h.counts[i].Add(1)
}

// Quantile returns an estimate of quantile q (0..1); 0 with no samples.
func (h *Histogram) Quantile(q float64) time.Duration {
	var snap [histBuckets]uint64
	var total uint64
	for i := range snap {
		snap[i] = h.counts[i].Load()
		total += snap[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range snap {
		seen += c
		if seen >= rank && c > 0 {
			if i == 0 {
				return 500 * time.Nanosecond
			}
			lo := math.Exp2(float64(i - 1))
			return time.Duration(lo * math.Sqrt2 * float64(time.Microsecond))
		}
	}
	return 0
}
