package metrics

import (
	"context"
	"hash/maphash"
	"log/slog"
	"net/netip"
	"sync/atomic"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
)

// The query log's bounds. With a class logged whole (`log-queries-class`
// alone) or a large fraction, every answer of it is a line written
// synchronously by the query's goroutine: a client sending queries that
// fail as fast as it can would decide how much the agent logs (CPU, and
// the node's log volume), and its lines would bury everyone else's. So
// each second at most queryLogRate lines are written, and at most
// queryLogClientRate of them for one client address (clients are told
// apart by a keyed hash of the address into queryLogCells counters: two
// clients in one cell share its budget). The lines held back are counted:
// the next line written says how many (`suppressed`), a summary line at
// the turn of the second too (Run), and QueryLogSuppressed keeps the sum.
const (
	queryLogRate       = 1000
	queryLogClientRate = queryLogRate / 8
	queryLogCells      = 256
)

// queryLogLimit counts the query log's lines of the current second, in all
// and per cell of clients. Safe for concurrent use, allocation-free.
type queryLogLimit struct {
	seed  maphash.Seed
	sec   atomic.Int64
	total atomic.Int32
	cells [queryLogCells]atomic.Int32
	// held counts the lines held back since the last line or summary
	// written; heldAll all of them.
	held, heldAll atomic.Uint64
}

// allow reports whether a line for client may be written in second sec.
// The counts of a second are reset by the first line asked in the next;
// a line asked concurrently with the reset may be counted in either.
func (l *queryLogLimit) allow(sec int64, client netip.Addr) bool {
	if cur := l.sec.Load(); cur != sec && l.sec.CompareAndSwap(cur, sec) {
		l.total.Store(0)
		for i := range l.cells {
			l.cells[i].Store(0)
		}
	}
	// The client's cell first: a client past its share does not use up
	// the total.
	cell := &l.cells[maphash.Comparable(l.seed, client)%queryLogCells]
	if cell.Add(1) > queryLogClientRate || l.total.Add(1) > queryLogRate {
		l.held.Add(1)
		l.heldAll.Add(1)
		return false
	}
	return true
}

// QueryLogSuppressed is how many query log lines were held back by the
// log's bounds since the Recorder was made.
func (r *Recorder) QueryLogSuppressed() uint64 { return r.qlimit.heldAll.Load() }

// logQuery writes one query log record, within the bounds above. Its field
// names are a contract (docs/logging.md): add fields, never rename one.
func (r *Recorder) logQuery(ev *pipeline.Event, c replyClass, sec int64) {
	if !r.qlog.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	client := ev.Client.Unmap()
	if !r.qlimit.allow(sec, client) {
		return
	}
	attrs := [...]slog.Attr{
		slog.String("client", client.String()),
		slog.String("name", ev.Name),
		slog.String("type", typeName(ev.Qtype)),
		slog.String("rcode", rcodeName(ev.Rcode)),
		slog.String("class", classNames[c]),
		slog.Int("answers", ev.Answers),
		slog.Bool("truncated", ev.Truncated),
		slog.String("source", string(ev.Source)),
		slog.String("proto", ev.Proto),
		slog.Duration("duration", ev.Duration),
		{}, // suppressed, when some were
	}
	n := len(attrs) - 1
	if held := r.qlimit.held.Swap(0); held > 0 {
		attrs[n] = slog.Uint64("suppressed", held)
		n++
	}
	r.qlog.LogAttrs(context.Background(), slog.LevelInfo, "query", attrs[:n]...)
}

// flushQueryLog writes a summary line for the query log lines held back
// since the last line or summary, if any.
func (r *Recorder) flushQueryLog() {
	if held := r.qlimit.held.Swap(0); held > 0 {
		r.qlog.LogAttrs(context.Background(), slog.LevelInfo, "query log lines suppressed",
			slog.Uint64("suppressed", held), slog.Int("limit_per_second", queryLogRate),
			slog.Int("limit_per_client_per_second", queryLogClientRate))
	}
}
