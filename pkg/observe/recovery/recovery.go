// Package recovery turns a panic in one of the agent's goroutines into a
// logged, counted error, so that a bug met by one query, one refresh or one
// upstream exchange costs that piece of work and not the node's DNS.
//
// One Counter is shared by every package that runs work of its own (the
// server's query handling, the cache's background refreshes, the
// forwarder's shared exchanges and probes), so the agent reports one panic
// figure.
package recovery

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
)

// Counter counts recovered panics. The zero value is ready to use; a nil
// *Counter counts nothing but still logs. Safe for concurrent use.
type Counter struct{ n atomic.Uint64 }

// Count is how many panics were recovered.
func (c *Counter) Count() uint64 {
	if c == nil {
		return 0
	}
	return c.n.Load()
}

// Caught records p, a value returned by recover(), as a panic during what:
// it is counted and logged at error level with the stack and attrs. The
// caller calls recover() itself (recover only works in the deferred
// function) and decides what the failed work answers.
func (c *Counter) Caught(log *slog.Logger, p any, what string, attrs ...any) error {
	if c != nil {
		c.n.Add(1)
	}
	err := fmt.Errorf("panic %s: %v", what, p)
	if log != nil {
		log.Error("recovered from a panic", append([]any{"during", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack())}, attrs...)...)
	}
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
