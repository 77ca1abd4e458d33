package hist

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The bounds are CoreDNS's: plugin.TimeBuckets and the metrics plugin's
// size buckets (coredns v1.15.0, plugin/plugin.go and
// plugin/metrics/vars/vars.go).
func TestBoundsAreCoreDNSs(t *testing.T) {
	want := prometheus.ExponentialBuckets(0.00025, 2, 16)
	if len(DurationBounds) != len(want) {
		t.Fatalf("%d duration bounds, want %d", len(DurationBounds), len(want))
	}
	for i := range want {
		if DurationBounds[i] != want[i] {
			t.Errorf("duration bound %d = %v, want %v", i, DurationBounds[i], want[i])
		}
	}
	for i, b := range SizeBounds {
		if float64(sizeBounds[i]) != b {
			t.Errorf("size bound %d: %d vs %v", i, sizeBounds[i], b)
		}
	}
}

// Every duration lands in the first bucket whose bound is at least the
// duration, checked against a plain search at and around each bound.
func TestDurationBucket(t *testing.T) {
	search := func(d time.Duration) int {
		for i, b := range DurationBounds {
			if d.Seconds() <= b {
				return i
			}
		}
		return NumDurationBuckets
	}
	ds := []time.Duration{-time.Second, 0, 1, time.Microsecond, time.Hour}
	for _, b := range DurationBounds {
		ns := time.Duration(math.Round(b * 1e9))
		ds = append(ds, ns-1, ns, ns+1)
	}
	for _, d := range ds {
		want := search(max(d, 0))
		if got := durationBucket(max(d, 0)); got != want {
			t.Errorf("bucket(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestDurationsSnapshot(t *testing.T) {
	var h Durations
	h.Observe(100 * time.Microsecond) // le 0.00025
	h.Observe(3 * time.Millisecond)   // le 0.004
	h.Observe(3 * time.Millisecond)
	h.Observe(20 * time.Second) // +Inf
	h.Observe(-time.Second)     // counts as 0
	s := h.Snapshot()
	if s.Count() != 5 {
		t.Fatalf("count %d, want 5", s.Count())
	}
	if got, want := s.Sum, 20.0061; math.Abs(got-want) > 1e-9 {
		t.Errorf("sum %v, want %v", got, want)
	}
	c := s.Cumulative()
	for b, want := range map[float64]uint64{0.00025: 2, 0.002: 2, 0.004: 4, 8.192: 4} {
		if c[b] != want {
			t.Errorf("cumulative at %v = %d, want %d", b, c[b], want)
		}
	}
}

func TestSizes(t *testing.T) {
	var h Sizes
	for _, n := range []int{0, 1, 100, 101, 511, 512, 1232, 65535, -3} {
		h.Observe(n)
	}
	s := h.Snapshot()
	c := s.Cumulative()
	for b, want := range map[float64]uint64{0: 2, 100: 4, 200: 5, 511: 6, 1023: 7, 2047: 8, 64e3: 8} {
		if c[b] != want {
			t.Errorf("cumulative at %v = %d, want %d", b, c[b], want)
		}
	}
	if s.Count() != 9 || s.Sum != 0+1+100+101+511+512+1232+65535 {
		t.Errorf("count %d sum %v", s.Count(), s.Sum)
	}
}

// Every size lands in the first bucket whose bound is at least the size.
func TestSizeBucketEverySize(t *testing.T) {
	for n := range 70000 {
		want := NumSizeBuckets
		for i, b := range sizeBounds {
			if n <= b {
				want = i
				break
			}
		}
		var h Sizes
		h.Observe(n)
		for i := range h.counts {
			if got := h.counts[i].Load(); (i == want) != (got == 1) {
				t.Fatalf("size %d counted in bucket %d, want %d", n, i, want)
			}
		}
	}
}

func TestQuantileAndMerge(t *testing.T) {
	var a, b Durations
	for range 90 {
		a.Observe(3 * time.Millisecond) // (0.002, 0.004]
	}
	for range 10 {
		b.Observe(100 * time.Millisecond) // (0.064, 0.128]
	}
	var s Snapshot
	s.Merge(a.Snapshot())
	s.Merge(b.Snapshot())
	if s.Count() != 100 {
		t.Fatalf("merged count %d", s.Count())
	}
	if q := s.Quantile(0.5); q <= 0.002 || q > 0.004 {
		t.Errorf("p50 %v, want within (0.002, 0.004]", q)
	}
	if q := s.Quantile(0.99); q <= 0.064 || q > 0.128 {
		t.Errorf("p99 %v, want within (0.064, 0.128]", q)
	}
	if q := (Snapshot{}).Quantile(0.5); q != 0 {
		t.Errorf("empty p50 %v", q)
	}
}

func TestConcurrentObserve(t *testing.T) {
	var h Durations
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				h.Observe(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if n := h.Snapshot().Count(); n != 4000 {
		t.Fatalf("count %d, want 4000", n)
	}
}

func TestObserveAllocs(t *testing.T) {
	var d Durations
	var s Sizes
	if n := testing.AllocsPerRun(100, func() { d.Observe(time.Millisecond); s.Observe(300) }); n != 0 {
		t.Fatalf("%v allocations per observation", n)
	}
}

func BenchmarkDurationsObserve(b *testing.B) {
	var h Durations
	for i := 0; b.Loop(); i++ {
		h.Observe(time.Duration(i&0xffff) * time.Microsecond)
	}
}

func BenchmarkSizesObserve(b *testing.B) {
	var h Sizes
	for i := 0; b.Loop(); i++ {
		h.Observe(40 + i&0xff)
	}
}
