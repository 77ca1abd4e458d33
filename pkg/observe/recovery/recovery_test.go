package recovery_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

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
