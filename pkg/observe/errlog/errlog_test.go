package errlog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTest(t *testing.T) (*Limiter, *clock, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), Config{Burst: 3, Every: time.Second, MaxReasons: 2, Now: c.now})
	return l, c, &buf
}

// TestBurstThenRate: a reason gets its burst, then one line per Every; the
// line after a gap carries how many were held back.
func TestBurstThenRate(t *testing.T) {
	l, c, _ := newTest(t)
	for i := 0; i < 3; i++ {
		if n, ok := l.Allow("upstream failed"); !ok || n != 0 {
			t.Fatalf("line %d of the burst: ok %v suppressed %d", i, ok, n)
		}
	}
	for i := 0; i < 5; i++ {
		if _, ok := l.Allow("upstream failed"); ok {
			t.Fatalf("line %d past the burst allowed", i)
		}
	}
	// Another reason has its own bucket.
	if _, ok := l.Allow("overloaded"); !ok {
		t.Fatal("a second reason was limited by the first")
	}
	c.add(time.Second)
	n, ok := l.Allow("upstream failed")
	if !ok || n != 5 {
		t.Fatalf("after a second: ok %v suppressed %d, want true 5", ok, n)
	}
	if _, ok := l.Allow("upstream failed"); ok {
		t.Fatal("two lines in one second past the burst")
	}
	if got := l.Count()["upstream failed"]; got != 10 {
		t.Errorf("count %d, want 10", got)
	}
}

// TestBoundedReasons: reasons past MaxReasons share one bucket, so a
// caller inventing reasons cannot grow the limiter.
func TestBoundedReasons(t *testing.T) {
	l, _, _ := newTest(t)
	for i := 0; i < 100; i++ {
		l.Allow("reason " + strings.Repeat("x", i))
	}
	if n := len(l.buckets); n != 2 {
		t.Fatalf("%d buckets, want 2", n)
	}
	if l.Count()[otherReasons] != 98 {
		t.Errorf("other reasons: %d, want 98", l.Count()[otherReasons])
	}
}

// TestFlushReportsSuppressed: a burst followed by silence is reported once
// by the summary, and not again.
func TestFlushReportsSuppressed(t *testing.T) {
	l, _, buf := newTest(t)
	for i := 0; i < 10; i++ {
		l.Allow("cached SERVFAIL")
	}
	l.Flush()
	if !strings.Contains(buf.String(), `reason="cached SERVFAIL" suppressed=7`) {
		t.Fatalf("summary: %q", buf.String())
	}
	buf.Reset()
	l.Flush()
	if buf.Len() != 0 {
		t.Fatalf("second flush wrote %q", buf.String())
	}
}

// TestHandlerLimitsWarnings: warn records are limited by message and carry
// the suppressed count; info records pass untouched.
func TestHandlerLimitsWarnings(t *testing.T) {
	l, c, _ := newTest(t)
	var out bytes.Buffer
	log := slog.New(l.Handler(slog.NewTextHandler(&out, nil))).With("component", "upstream")
	for i := 0; i < 10; i++ {
		log.Warn("upstream exchange failed", "server", "127.0.0.1:53")
		log.Info("upstream back up")
	}
	if n := strings.Count(out.String(), "upstream exchange failed"); n != 3 {
		t.Fatalf("%d warn lines, want 3:\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), "upstream back up"); n != 10 {
		t.Fatalf("%d info lines, want 10", n)
	}
	c.add(2 * time.Second)
	out.Reset()
	log.Warn("upstream exchange failed", "server", "127.0.0.1:53")
	if !strings.Contains(out.String(), "component=upstream") || !strings.Contains(out.String(), "suppressed=7") {
		t.Fatalf("line after the gap: %q", out.String())
	}
}

// TestAllowAllocs: asking costs nothing on the serving path.
func TestAllowAllocs(t *testing.T) {
	l, _, _ := newTest(t)
	l.Allow("cached SERVFAIL")
	if n := testing.AllocsPerRun(100, func() { l.Allow("cached SERVFAIL") }); n != 0 {
		t.Fatalf("%.1f allocations per Allow", n)
	}
}

func TestRunStops(t *testing.T) {
	l, _, buf := newTest(t)
	l.cfg.Summary = time.Millisecond
	for i := 0; i < 5; i++ {
		l.Allow("x")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	cancel()
	<-done
	if !strings.Contains(buf.String(), "suppressed=2") {
		t.Fatalf("Run did not flush on exit: %q", buf.String())
	}
}
