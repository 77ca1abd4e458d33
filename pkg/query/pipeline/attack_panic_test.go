package pipeline

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/observe/errlog"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
)

// TestAttackPanicLogLines: one client asking, again and again, a query
// that makes the pipeline panic gets SERVFAIL each time, every panic is
// counted, but the stacks logged are the limiter's burst and then at most
// one a second, as the agent wires them (the panic counter's lines through
// its failure-line limiter), not one per query.
func TestAttackPanicLogLines(t *testing.T) {
	res := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		panic("stage exploded")
	}}
	logs := &dnstest.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	lines := errlog.New(log, errlog.Config{})
	s, addr := start(t, Config{Resolver: res, Panics: recovery.NewCounter(lines), Failures: lines, Logger: log})
	const queries = 200
	began := time.Now()
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	for i := 0; i < queries; i++ {
		r, _, err := c.Exchange(q(sprintf("boom%d.example.", i), dns.TypeA), addr)
		if err != nil || r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("query %d: %v, %v", i, r, err)
		}
	}
	elapsed := time.Since(began)
	if got := s.Stats().Panics; got != queries {
		t.Fatalf("panics counted %d, want %d", got, queries)
	}
	stacks := strings.Count(logs.String(), "recovered from a panic")
	// The burst (10), then one a second at most.
	most := 10 + int(elapsed/time.Second) + 1
	t.Logf("%d panics in %v: %d stacks logged", queries, elapsed.Round(time.Millisecond), stacks)
	if stacks == 0 || stacks > most {
		t.Fatalf("%d panics in %v: %d stacks logged, want 1 to %d", queries, elapsed.Round(time.Millisecond), stacks, most)
	}
}
