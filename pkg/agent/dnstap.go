package agent

import (
	"context"
	"time"

	"github.com/nodedns/nodedns/pkg/observe/dnstap"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// upstreamTap is the forwarders' tap: the agent's taps, or none (a nil
// interface, never a nil *dnstap.Set in one).
func (a *Agent) upstreamTap() upstream.Tap {
	if a.taps == nil {
		return nil
	}
	return a.taps
}

// tapStopWait bounds how long the agent waits for its taps to write what
// is queued when it stops (each tap bounds its own last writes to 1 s).
const tapStopWait = 3 * time.Second

// runTaps starts the taps, on a context of their own: they log what the
// agent answers until its sockets are closed, lameduck included. The
// function returned stops them and waits (bounded) for their last
// writes.
func (a *Agent) runTaps() func() {
	if a.taps == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.taps.Run(ctx)
	}()
	return func() {
		cancel()
		t := time.NewTimer(tapStopWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			a.log.Warn("dnstap: collectors still being written to at exit; what is queued is lost")
		}
	}
}

// tapStats are the taps' figures for /metrics and /stats.
func (a *Agent) tapStats() []dnstap.Stats {
	if a.taps == nil {
		return nil
	}
	return a.taps.Stats()
}
