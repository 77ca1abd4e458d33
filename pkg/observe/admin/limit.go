package admin

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the endpoint. The TCP address is reachable by anything that
// reaches the node's IP (every pod of the cluster, in the DaemonSet), and
// net/http by itself takes any number of connections, each a goroutine
// with its buffers (9,000 slow ones took an agent from 42 to 205 MiB of
// its 256 MiB). Prometheus holds one or two connections per target and
// the probes use the unix socket, so these bounds leave room for both
// however many connections others try to hold.
const (
	// maxConns bounds the open TCP connections: ~30 KiB each at most
	// (goroutine, buffers, maxHeaderBytes), 2 MiB in all, plus a /metrics
	// exposition (~100 KiB) each while one is being written.
	maxConns = 64
	// maxConnsPerSource bounds what one client address holds: room for
	// Prometheus replicas and a person with curl, not for one client to
	// take the total.
	maxConnsPerSource = 8
	// maxHeaderBytes: probes and scrapes send a few hundred bytes of
	// headers (net/http's default lets each connection hold 1 MiB).
	maxHeaderBytes = 8 << 10
	// The times a request may take to arrive, its reply to be written,
	// and a kept-alive connection to stay idle: a slow client is cut
	// rather than held.
	readHeaderTimeout = 2 * time.Second
	readTimeout       = 5 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = 30 * time.Second
	// limitLogEvery spaces the warnings about connections refused or
	// evicted at the bounds.
	limitLogEvery = time.Minute
)

// limitListener bounds the connections of the TCP admin address, in all
// and per source address. At the per-source bound a new connection is
// closed as soon as it is accepted. At the total, a connection from a
// source that holds fewer than another takes the place of the oldest
// connection of the source holding the most (when that one holds at least
// two more): one client, or a few, filling the endpoint cannot keep a
// scrape from another address out, and a source holding one connection
// (a Prometheus) is never the one evicted. Otherwise the newcomer is
// closed.
type limitListener struct {
	net.Listener
	max, perSource int
	log            *slog.Logger

	mu    sync.Mutex
	open  int
	bySrc map[netip.Addr][]*limitedConn // per source, oldest first

	refused, evicted atomic.Uint64
	lastLog          atomic.Int64 // unix nanoseconds of the last warning
}

func newLimitListener(ln net.Listener, max, perSource int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: max, perSource: perSource, log: log, bySrc: make(map[netip.Addr][]*limitedConn)}
}

// limitedConn releases its place in the listener when closed.
type limitedConn struct {
	net.Conn
	l        *limitListener
	src      netip.Addr
	released bool // guarded by l.mu
}

func (c *limitedConn) Close() error {
	c.l.release(c)
	return c.Conn.Close()
}

// Accept returns the next connection within the bounds; the others are
// closed here, never handed to the HTTP server.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		// Counted once closed: the figure is of connections closed at
		// the bounds.
		_ = c.Close()
		l.count(&l.refused, "refused", sourceOf(c))
	}
}

func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// admit takes c in, making room at the total bound if it may; nil: c is
// refused (the caller closes and counts it).
func (l *limitListener) admit(c net.Conn) *limitedConn {
	src := sourceOf(c)
	l.mu.Lock()
	held := len(l.bySrc[src])
	if held >= l.perSource {
		l.mu.Unlock()
		return nil
	}
	var victim *limitedConn
	if l.open >= l.max {
		if victim = l.victimLocked(held); victim == nil {
			l.mu.Unlock()
			return nil
		}
		l.removeLocked(victim)
	}
	lc := &limitedConn{Conn: c, l: l, src: src}
	l.bySrc[src] = append(l.bySrc[src], lc)
	l.open++
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close() // its server goroutine sees the error and ends
		l.count(&l.evicted, "evicted", victim.src)
	}
	return lc
}

// victimLocked returns the oldest connection of the source holding the
// most, if it holds at least two more than held (the newcomer's source):
// then the eviction makes the shares more even, never less.
func (l *limitListener) victimLocked(held int) *limitedConn {
	var most []*limitedConn
	for _, cs := range l.bySrc {
		if len(cs) > len(most) {
			most = cs
		}
	}
	if len(most) < held+2 {
		return nil
	}
	return most[0]
}

func (l *limitListener) removeLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	l.open--
	cs := l.bySrc[c.src]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(l.bySrc, c.src)
	} else {
		l.bySrc[c.src] = cs
	}
}

func (l *limitListener) release(c *limitedConn) {
	l.mu.Lock()
	l.removeLocked(c)
	l.mu.Unlock()
}

// count counts a connection refused or evicted, and warns at most every
// limitLogEvery (a flood must not become a flood of log lines).
func (l *limitListener) count(n *atomic.Uint64, what string, src netip.Addr) {
	n.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(limitLogEvery) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("admin endpoint: connections refused or evicted at the bounds", "component", "admin",
		"last", what, "source", src.String(), "refused", l.refused.Load(), "evicted", l.evicted.Load(),
		"max", l.max, "max_per_source", l.perSource)
}

// ConnStats are the figures of the TCP address's connection bounds.
type ConnStats struct {
	// Open connections now; Refused and Evicted count the connections
	// closed at the bounds since the start.
	Open             int
	Refused, Evicted uint64
}

func (l *limitListener) stats() ConnStats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return ConnStats{Open: open, Refused: l.refused.Load(), Evicted: l.evicted.Load()}
}
