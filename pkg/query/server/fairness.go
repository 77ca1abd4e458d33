package server

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Per-client fairness on the slow path. MaxInflight bounds the
// queries resolved off the readers at once, for everyone together. Without
// a share per client, one client flooding random names (each a cache miss,
// each an upstream exchange) fills every slot, and then every other
// client's misses, cluster walks and ExternalNames get SERVFAIL while the
// machine's CPU goes to the flood. scripts/bounds.sh measured it: with a
// flooder at 5,000 random names/s, the other clients' misses were nearly
// all SERVFAIL and their cache hits' p99 went from under 1 ms to ~190 ms.
//
// So one client address may hold at most MaxClientInflight of the slots
// (by default an eighth of them, as one client's share of the forwarder's
// exchanges is: fairshare.PerClient); past it its queries get SERVFAIL at
// once, on the reader, costing neither a goroutine nor an upstream
// exchange, and the other slots stay for everyone else. The bound is on
// concurrency, not rate: a busy client whose answers come back fast is
// never limited. Clients are told apart by address only (all host-network
// pods share the node's).

// clientLimiter counts the slow-path queries each client has in flight.
// Entries exist only while a client has some, so its size is bounded by
// MaxInflight, never by the number of clients seen.
type clientLimiter struct {
	max  int32
	seed maphash.Seed
	// open lifts the per-client bound (counts are still kept, so that
	// release stays exact) while a backlog is read: see backlogGrace.
	open   atomic.Bool
	shards [32]limiterShard
}

// backlogGrace: sockets a Server is given (Config.Sockets) may hold a
// backlog: the queries that queued while no process read them (a
// supervised process replaced after a crash or a hang, pkg/supervisor; a
// new one starting). A process reads that backlog in one burst with a cold
// cache, so the queries of a busy client that were spread over the gap
// arrive at once, and its share of the slow path would refuse most of them
// (SERVFAIL) although it never flooded: seen in the e2e's SIGSTOP step,
// 163 of a pod's 400 q/s stream of two names got SERVFAIL from the new
// process. For this long after Serve, only MaxInflight bounds them; the
// upstream side coalesces the repeated names and keeps its own shares.
const backlogGrace = 3 * time.Second

type limiterShard struct {
	mu sync.Mutex
	n  map[netip.Addr]int32
}

// newClientLimiter returns a limiter allowing max per client; nil (no
// limit) when max <= 0.
func newClientLimiter(max int) *clientLimiter {
	if max <= 0 {
		return nil
	}
	l := &clientLimiter{max: int32(max), seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].n = make(map[netip.Addr]int32)
	}
	return l
}

func (l *clientLimiter) shard(a netip.Addr) *limiterShard {
	return &l.shards[maphash.Comparable(l.seed, a)%uint64(len(l.shards))]
}

// acquire takes one of a's slots; false when a holds max already.
func (l *clientLimiter) acquire(a netip.Addr) bool {
	if l == nil {
		return true
	}
	sh := l.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.n[a] >= l.max && !l.open.Load() {
		return false
	}
	sh.n[a]++
	return true
}

func (l *clientLimiter) release(a netip.Addr) {
	if l == nil {
		return
	}
	sh := l.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.n[a] <= 1 {
		delete(sh.n, a)
		return
	}
	sh.n[a]--
}

// admit takes a slow-path slot for a query of client: one of the client's
// own, then one of MaxInflight. False means answer SERVFAIL at once.
func (s *Server) admit(client netip.Addr) bool {
	if !s.fair.acquire(client) {
		s.clientLimited.Add(1)
		return false
	}
	select {
	case s.sem <- struct{}{}:
		return true
	default:
		s.fair.release(client)
		s.overloads.Add(1)
		return false
	}
}

// leave gives back what admit took.
func (s *Server) leave(client netip.Addr) {
	<-s.sem
	s.fair.release(client)
}
