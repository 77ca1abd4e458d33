// Package hist owns the lock-free histograms the query path counts into:
// fixed buckets, one atomic add for the bucket and one for the sum, no
// lock and no allocation per observation. Snapshot hands the figures to
// Prometheus (or to a quantile estimate) at read time.
//
// The buckets are CoreDNS 1.15's, so that dashboards and alerts written for
// CoreDNS's histograms read these unchanged: durations double from 0.25 ms
// to 8.192 s (CoreDNS's plugin.TimeBuckets), message sizes use the metrics
// plugin's bounds from 0 to 64000 bytes.
//
// Limits: the bucket of a duration is exact to the nanosecond, but a
// quantile read back from the buckets is only as good as their width (a
// factor of two for durations); the sum of durations wraps after 584 years
// of summed time, the sum of sizes after 2^64 bytes.
package hist

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// durationBase is the upper bound of the first duration bucket; each next
// bound doubles it.
const durationBase = 250 * time.Microsecond

// NumDurationBuckets is the number of finite duration buckets.
const NumDurationBuckets = 16

// DurationBounds are the upper bounds, in seconds, of the duration buckets:
// 0.00025 doubling to 8.192 (the same float64 values as
// prometheus.ExponentialBuckets(0.00025, 2, 16), which CoreDNS uses).
var DurationBounds = func() []float64 {
	b := make([]float64, NumDurationBuckets)
	v := durationBase.Seconds()
	for i := range b {
		b[i] = v
		v *= 2
	}
	return b
}()

// SizeBounds are the upper bounds, in bytes, of the message size buckets
// (CoreDNS's coredns_dns_request_size_bytes and response_size_bytes).
var SizeBounds = []float64{0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3}

// sizeBounds are SizeBounds as integers for the observe path.
var sizeBounds = [...]int{0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16000, 32000, 48000, 64000}

// NumSizeBuckets is the number of finite size buckets.
const NumSizeBuckets = len(sizeBounds)

// Durations is a histogram of durations with DurationBounds. The zero
// value is ready to use and safe for concurrent use.
type Durations struct {
	counts [NumDurationBuckets + 1]atomic.Uint64 // the last counts above the last bound (+Inf)
	sumNs  atomic.Uint64
}

// durationBucket returns the index of the bucket d falls in: the first
// whose bound is >= d. With bounds base·2^i that is ceil(log2(d/base)),
// worked out on integers: q = ceil(d/base), i = bit length of q-1.
func durationBucket(d time.Duration) int {
	if d <= durationBase {
		return 0
	}
	q := (uint64(d) + uint64(durationBase) - 1) / uint64(durationBase)
	return min(bits.Len64(q-1), NumDurationBuckets)
}

// Observe records d; a negative d counts as 0.
func (h *Durations) Observe(d time.Duration) {
	d = max(d, 0)
	h.counts[durationBucket(d)].Add(1)
	h.sumNs.Add(uint64(d))
}

// Snapshot returns the histogram's figures, the sum in seconds.
func (h *Durations) Snapshot() Snapshot {
	s := Snapshot{Bounds: DurationBounds, Counts: make([]uint64, NumDurationBuckets+1)}
	for i := range s.Counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = float64(h.sumNs.Load()) / 1e9
	return s
}

// Sizes is a histogram of message sizes in bytes with SizeBounds. The
// zero value is ready to use and safe for concurrent use.
type Sizes struct {
	counts [NumSizeBuckets + 1]atomic.Uint64
	sum    atomic.Uint64
}

// smallSizeBucket is the bucket of every size up to 511 bytes (most DNS
// messages): one load instead of a scan.
var smallSizeBucket = func() (t [512]uint8) {
	for n := range t {
		i := 0
		for n > sizeBounds[i] {
			i++
		}
		t[n] = uint8(i)
	}
	return t
}()

// Observe records a message of n bytes; a negative n counts as 0.
func (h *Sizes) Observe(n int) {
	n = max(n, 0)
	var i int
	if n < len(smallSizeBucket) {
		i = int(smallSizeBucket[n])
	} else {
		i = 6 // past 511
		for i < NumSizeBuckets && n > sizeBounds[i] {
			i++
		}
	}
	h.counts[i].Add(1)
	h.sum.Add(uint64(n))
}

// Snapshot returns the histogram's figures, the sum in bytes.
func (h *Sizes) Snapshot() Snapshot {
	s := Snapshot{Bounds: SizeBounds, Counts: make([]uint64, NumSizeBuckets+1)}
	for i := range s.Counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = float64(h.sum.Load())
	return s
}

// Snapshot is a histogram's figures at one moment.
type Snapshot struct {
	// Bounds are the buckets' upper bounds (shared: never modify them).
	Bounds []float64
	// Counts are per bucket, not cumulative: len(Bounds)+1 of them, the
	// last for everything above the last bound.
	Counts []uint64
	Sum    float64
}

// Count is the number of observations.
func (s Snapshot) Count() uint64 {
	var n uint64
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// Merge adds o's figures to s (same bounds; s may be the zero Snapshot).
func (s *Snapshot) Merge(o Snapshot) {
	if s.Counts == nil {
		s.Bounds = o.Bounds
		s.Counts = make([]uint64, len(o.Counts))
	}
	for i := range min(len(s.Counts), len(o.Counts)) {
		s.Counts[i] += o.Counts[i]
	}
	s.Sum += o.Sum
}

// Cumulative returns the cumulative count at each upper bound, as
// prometheus.NewConstHistogram takes them (+Inf is the total count).
func (s Snapshot) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(s.Bounds))
	var n uint64
	for i, b := range s.Bounds {
		n += s.Counts[i]
		out[b] = n
	}
	return out
}

// Quantile estimates quantile q (0 to 1) by linear interpolation inside
// the bucket it falls in, as Prometheus's histogram_quantile does; 0 with
// no observations. Above the last bound it returns the last bound.
func (s Snapshot) Quantile(q float64) float64 {
	total := s.Count()
	if total == 0 || math.IsNaN(q) {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(total)
	var seen uint64
	for i, c := range s.Counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		if i == len(s.Bounds) {
			return s.Bounds[len(s.Bounds)-1]
		}
		lo := 0.0
		if i > 0 {
			lo = s.Bounds[i-1]
		}
		return lo + (s.Bounds[i]-lo)*(rank-float64(seen))/float64(c)
	}
	return s.Bounds[len(s.Bounds)-1]
}
