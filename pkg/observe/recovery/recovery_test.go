package recovery_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodedns/nodedns/pkg/observe/errlog"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
)

func TestRecoverCountsAndLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	c := new(recovery.Counter)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Recover(log, "testing", "n", i)
			var s []int
			_ = s[i+5] // panics: index out of range
		}()
	}
	wg.Wait()
	if c.Count() != 3 {
		t.Fatalf("count %d, want 3", c.Count())
	}
	if got := buf.String(); strings.Count(got, "recovered from a panic") != 3 || !strings.Contains(got, "index out of range") || !strings.Contains(got, "during=testing") {
		t.Fatalf("log:\n%s", got)
	}
	var nilc *recovery.Counter
	func() {
		defer nilc.Recover(nil, "nil counter")
		panic("x")
	}()
	if nilc.Count() != 0 {
		t.Fatal("a nil counter counted")
	}
	err := c.Caught(nil, "boom", "exchanging")
	if err == nil || !strings.Contains(err.Error(), "boom") || c.Count() != 4 {
		t.Fatalf("Caught: %v, count %d", err, c.Count())
	}
}

// TestPanicLinesLimited: a client that finds a query which panics does
// not control the log: a counter given a line limiter (the agent's errlog
// limiter) writes a few stacks, then at most one per Every, each saying
// how many were held back; the count stays exact.
func TestPanicLinesLimited(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Unix(1_000_000, 0)
	lines := errlog.New(log, errlog.Config{Burst: 3, Every: time.Second, Now: func() time.Time { return now }})
	c := recovery.NewCounter(lines)
	panicOnce := func(what string) {
		defer c.Recover(log, what, "client", "10.0.0.1")
		panic("boom")
	}
	for i := 0; i < 1000; i++ {
		panicOnce("answering a query")
	}
	if n := strings.Count(buf.String(), "recovered from a panic"); n != 3 || c.Count() != 1000 {
		t.Fatalf("1,000 panics: %d lines written, count %d; want 3 lines (the burst) and 1,000 counted", n, c.Count())
	}
	// Another kind of panic has a budget of its own.
	panicOnce("reading UDP queries")
	if n := strings.Count(buf.String(), "recovered from a panic"); n != 4 {
		t.Fatalf("a panic elsewhere after a flood of one kind: %d lines, want 4", n)
	}
	// A second later: one more line, with the count of those held back.
	now = now.Add(time.Second)
	buf.Reset()
	panicOnce("answering a query")
	panicOnce("answering a query")
	if got := buf.String(); strings.Count(got, "recovered from a panic") != 1 || !strings.Contains(got, "suppressed=997") || !strings.Contains(got, "stack=") {
		t.Fatalf("a second later, log:\n%s", got)
	}
	if c.Count() != 1003 {
		t.Fatalf("count %d, want 1003", c.Count())
	}
	// The rest are reported by the limiter's summary.
	buf.Reset()
	lines.Flush()
	if got := buf.String(); !strings.Contains(got, "suppressed=1") {
		t.Fatalf("summary:\n%s", got)
	}
}
