package metrics

import (
	"bytes"
	"hash/maphash"
	"log/slog"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/stage"
)

// TestAttackQueryLogBounded: with the query log on for a class (every
// query of it logged), one client sending errors as fast as it can cannot
// decide how much is logged, nor keep the others' queries out of the log:
// each second at most queryLogRate lines are written, at most
// queryLogClientRate of them one client's; the lines held back are counted
// (the next line and a summary say how many, and the figure keeps them).
func TestAttackQueryLogBounded(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	lines := func() int { mu.Lock(); defer mu.Unlock(); return strings.Count(buf.String(), `msg=query `) }
	now := time.Unix(1_000_000, 0)
	var clock sync.Mutex
	r := newRecorder(t, Config{LogClasses: []string{"error"}, Logger: slog.New(slog.NewTextHandler(w, nil)),
		Now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }})
	from := func(c netip.Addr, name string) {
		e := ev(stage.SourceUpstream, dns.RcodeServerFailure, name)
		e.Client = c
		r.Observe(e)
	}
	flooder := netip.MustParseAddr("fd00::66")
	for range 5000 {
		from(flooder, "flood.example.")
	}
	if n := lines(); n != queryLogClientRate {
		t.Fatalf("one client's 5,000 errors in a second: %d lines, want its share (%d)", n, queryLogClientRate)
	}
	// Another client in the same second is still logged, unless it shares
	// the flooder's cell (the seed is random: 1 in 256 addresses does, as
	// querylog.go says); one that does not is taken.
	cell := func(a netip.Addr) uint64 { return maphash.Comparable(r.qlimit.seed, a) % queryLogCells }
	other := netip.MustParseAddr("fd00::7")
	for cell(other) == cell(flooder) {
		other = other.Next()
	}
	for range 10 {
		from(other, "other.example.")
	}
	if n := lines(); n != queryLogClientRate+10 {
		t.Fatalf("another client after the flood: %d lines in all, want %d", n, queryLogClientRate+10)
	}
	// Many clients: the total holds.
	for i := range 40 {
		c := netip.AddrFrom16([16]byte{0xfd, 15: byte(i + 1), 14: 1})
		for range 100 {
			from(c, "many.example.")
		}
	}
	if n := lines(); n != queryLogRate {
		t.Fatalf("40 more clients: %d lines in the second, want the total bound (%d)", n, queryLogRate)
	}
	held := uint64(5000 + 10 + 4000 - queryLogRate)
	if got := r.QueryLogSuppressed(); got != held {
		t.Fatalf("suppressed %d, want %d", got, held)
	}
	// The next second: lines again.
	clock.Lock()
	now = now.Add(time.Second)
	clock.Unlock()
	from(flooder, "flood.example.")
	if n := lines(); n != queryLogRate+1 {
		t.Fatalf("the next second: %d lines in all, want %d", n, queryLogRate+1)
	}
	// A burst followed by silence is reported by the summary.
	for range 200 {
		from(flooder, "flood.example.")
	}
	r.flushQueryLog()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "query log lines suppressed") {
		t.Fatalf("no summary line after a burst:\n%s", out[max(0, len(out)-2000):])
	}
	// Every line held back is accounted for, on the line written after it
	// or in a summary.
	total := held + 200 + 1 - queryLogClientRate
	var said uint64
	for _, m := range regexp.MustCompile(`suppressed=(\d+)`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		said += n
	}
	if got := r.QueryLogSuppressed(); got != total || said != total {
		t.Fatalf("held back %d (figure) and %d (said in the log), want %d", got, said, total)
	}
}
