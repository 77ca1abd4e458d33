// Package recovery turns a panic in one of the agent's goroutines into a
// logged, counted error, so that a bug met by one query, one refresh or one
// upstream exchange costs that piece of work and not the node's DNS.
//
// One Counter is shared by every package that runs work of its own (the
// server's query handling and transport, the cache's background
// refreshes, the forwarder's shared exchanges and probes), so the agent
// reports one panic figure. Its log lines (a stack each) go through a line
// limiter when it has one (NewCounter): a client that finds a query which
// panics would otherwise decide how much the agent logs. The count is
// exact either way.
package recovery

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
)

// Counter counts recovered panics. The zero value is ready to use and
// logs every panic; a nil *Counter counts nothing but still logs. Safe for
// concurrent use.
type Counter struct {
	n     atomic.Uint64
	lines Limiter
}

// Limiter decides whether a log line may be written now (pkg/observe/
// errlog's Limiter: a burst per reason, then a steady rate); when it may,
// suppressed is how many lines of that reason were held back since the
// last one. Implementations must be safe for concurrent use.
type Limiter interface {
	Allow(reason string) (suppressed uint64, ok bool)
}

// NewCounter returns a Counter whose log lines lines limits, per kind of
// work that panicked (the what of Caught); nil: every panic is logged.
func NewCounter(lines Limiter) *Counter { return &Counter{lines: lines} }

// Count is how many panics were recovered.
func (c *Counter) Count() uint64 {
	if c == nil {
		return 0
	}
	return c.n.Load()
}

// Caught records p, a value returned by recover(), as a panic during what:
// it is counted and logged at error level with the stack and attrs, unless
// the counter's limiter holds the line back (it is counted all the same,
// and the next line written for what says how many were held back). The
// caller calls recover() itself (recover only works in the deferred
// function) and decides what the failed work answers.
func (c *Counter) Caught(log *slog.Logger, p any, what string, attrs ...any) error {
	if c != nil {
		c.n.Add(1)
	}
	err := fmt.Errorf("panic %s: %v", what, p)
	if log == nil {
		return err
	}
	var suppressed uint64
	if c != nil && c.lines != nil {
		n, ok := c.lines.Allow("recovered from a panic during " + what)
		if !ok {
			return err
		}
		suppressed = n
	}
	args := append([]any{"during", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack())}, attrs...)
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Error("recovered from a panic", args...)
	return err
}

// Recover is deferred by a goroutine that has nothing to clean up:
// `defer c.Recover(log, "refreshing")`. It recovers a panic, counts and
// logs it.
func (c *Counter) Recover(log *slog.Logger, what string, attrs ...any) {
	if p := recover(); p != nil {
		c.Caught(log, p, what, attrs...)
	}
}
