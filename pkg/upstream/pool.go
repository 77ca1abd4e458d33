package upstream

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Stream connections (TCP-only and TLS upstreams): a bounded pool of
// connections per server, each carrying several queries at once.
//
// A query takes the least busy open connection. An idle one is used as is;
// when every open connection has a query outstanding, a new one is opened,
// up to maxStreamConns, and only past that are queries pipelined onto busy
// connections (at most maxStreamPending each, RFC 7766 6.2.1.1), matched to
// their replies by ID whatever order the server answers in. So a server
// that answers one query per connection at a time (CoreDNS, dnsmasq) sees
// no head-of-line blocking under ordinary load, one that pipelines
// (unbound, the public DoT resolvers) keeps a handful of connections under
// heavy load, and a TLS handshake is paid once per connection, not per
// query. Beyond maxStreamConns x maxStreamPending queries wait for room
// until their deadline.
//
// A connection idle for streamIdle is closed (CoreDNS's expire default;
// GroupOptions.Expire sets another);
// one the server closed is dropped, and a query that was sent on a
// connection already open before it (the server may have closed it while
// it sat idle) and got no reply is sent once more on a fresh one. A query
// that times out on a connection that has delivered nothing since it was
// sent closes that connection: the path is dead, not the query slow.
const (
	maxStreamConns   = 8
	maxStreamPending = 32
	streamIdle       = 10 * time.Second
	// maxStreamStray bounds replies in a row that match no outstanding
	// query (late replies to queries that timed out are legitimate; a
	// stream of nothing else is not a working server).
	maxStreamStray = 64
)

var (
	errConnClosed = errors.New("connection closed")
	errPoolClosed = errors.New("upstream connection pool closed")
)

// streamPool is the connection pool of one TCP-only or TLS server.
type streamPool struct {
	addr string // ip:port to dial
	// tls, when set, returns the TLS configuration for a new connection
	// (it may change when the CA bundle is reloaded).
	tls  func() *tls.Config
	idle time.Duration
	now  func() time.Time

	mu      sync.Mutex
	conns   []*streamConn
	dialing int
	closed  bool
	// room is closed (and replaced) whenever a slot frees up, waking the
	// queries waiting for one.
	room chan struct{}

	dials atomic.Uint64 // connections opened
}

func newStreamPool(addr string, tlsCfg func() *tls.Config, idle time.Duration) *streamPool {
	if idle <= 0 {
		idle = streamIdle
	}
	return &streamPool{addr: addr, tls: tlsCfg, idle: idle, now: time.Now, room: make(chan struct{})}
}

// streamConn is one connection of a pool.
type streamConn struct {
	pool *streamPool
	nc   net.Conn

	wmu sync.Mutex // one writer at a time

	mu      sync.Mutex
	pending map[uint16]chan []byte
	err     error // set once the connection is dead
	// lastRead is when the last message arrived (UnixNano).
	lastRead atomic.Int64
	done     chan struct{} // closed when the connection is dead

	// Under pool.mu:
	inflight int       // queries holding a slot on this connection
	lastUsed time.Time // when the last slot was given back
}

// exchange sends m (its ID is replaced on the wire and restored) and
// returns the reply read on the same connection.
func (p *streamPool) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	c, fresh, err := p.acquire(ctx, false)
	if err != nil {
		return nil, err
	}
	r, retry, err := c.roundTrip(ctx, m)
	p.release(c)
	if err == nil || fresh || !retry || ctx.Err() != nil {
		return r, err
	}
	// The connection was open before this query and broke before any
	// reply: most likely the server closed it while it was idle.
	if c, _, err = p.acquire(ctx, true); err != nil {
		return nil, err
	}
	r, _, err = c.roundTrip(ctx, m)
	p.release(c)
	return r, err
}

// acquire returns a connection with a slot taken for one query; fresh
// reports that it was opened for this query. preferFresh asks for a new
// connection where the bound allows one (closing an idle one to make
// room), else it takes what an ordinary query would.
func (p *streamPool) acquire(ctx context.Context, preferFresh bool) (c *streamConn, fresh bool, err error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, false, errPoolClosed
		}
		full := len(p.conns)+p.dialing >= maxStreamConns
		if best := p.leastBusy(); !preferFresh && best != nil && best.inflight == 0 {
			best.inflight++
			p.mu.Unlock()
			return best, false, nil
		}
		if full && preferFresh {
			if c := p.idlest(); c != nil {
				p.removeLocked(c)
				p.mu.Unlock()
				c.close(errConnClosed)
				continue
			}
		}
		if !full {
			p.dialing++
			p.mu.Unlock()
			return p.dialSlot(ctx)
		}
		if best := p.leastBusy(); best != nil && best.inflight < maxStreamPending {
			best.inflight++
			p.mu.Unlock()
			return best, false, nil
		}
		wait := p.room
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("waiting for a connection to %s: %w", p.addr, ctx.Err())
		}
	}
}

// leastBusy is the open connection with the fewest queries (p.mu held).
func (p *streamPool) leastBusy() *streamConn {
	var best *streamConn
	for _, c := range p.conns {
		if best == nil || c.inflight < best.inflight {
			best = c
		}
	}
	return best
}

// dialSlot opens a new connection (p.dialing already counts it) and takes
// a slot on it.
func (p *streamPool) dialSlot(ctx context.Context) (*streamConn, bool, error) {
	nc, err := p.dial(ctx)

	p.mu.Lock()
	p.dialing--
	if err != nil {
		p.wakeLocked()
		p.mu.Unlock()
		return nil, false, err
	}
	c := &streamConn{pool: p, nc: nc, pending: map[uint16]chan []byte{}, done: make(chan struct{}), inflight: 1}
	c.lastRead.Store(p.now().UnixNano())
	if p.closed {
		p.mu.Unlock()
		nc.Close()
		return nil, false, errPoolClosed
	}
	p.conns = append(p.conns, c)
	// Queries waiting while every slot was a dial in progress can now
	// share this connection.
	p.wakeLocked()
	p.mu.Unlock()
	p.dials.Add(1)
	go c.readLoop()
	return c, true, nil
}

// idlest is an idle connection, the one unused longest (p.mu held).
func (p *streamPool) idlest() *streamConn {
	var best *streamConn
	for _, c := range p.conns {
		if c.inflight == 0 && (best == nil || c.lastUsed.Before(best.lastUsed)) {
			best = c
		}
	}
	return best
}

func (p *streamPool) dial(ctx context.Context) (net.Conn, error) {
	d := &net.Dialer{}
	if p.tls == nil {
		nc, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			return nil, fmt.Errorf("dialing %s over TCP: %w", p.addr, err)
		}
		return nc, nil
	}
	td := &tls.Dialer{NetDialer: d, Config: p.tls()}
	nc, err := td.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s over TLS: %w", p.addr, err)
	}
	return nc, nil
}

func (p *streamPool) release(c *streamConn) {
	p.mu.Lock()
	c.inflight--
	c.lastUsed = p.now()
	p.wakeLocked()
	p.mu.Unlock()
}

// wakeLocked wakes every query waiting for room (p.mu held).
func (p *streamPool) wakeLocked() {
	close(p.room)
	p.room = make(chan struct{})
}

func (p *streamPool) removeLocked(c *streamConn) {
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			p.wakeLocked()
			return
		}
	}
}

func (p *streamPool) remove(c *streamConn) {
	p.mu.Lock()
	p.removeLocked(c)
	p.mu.Unlock()
}

// expireIdle closes the connections idle for longer than p.idle.
func (p *streamPool) expireIdle() {
	now := p.now()
	var old []*streamConn
	p.mu.Lock()
	for _, c := range p.conns {
		if c.inflight == 0 && now.Sub(c.lastUsed) >= p.idle && now.Sub(time.Unix(0, c.lastRead.Load())) >= p.idle {
			old = append(old, c)
		}
	}
	for _, c := range old {
		p.removeLocked(c)
	}
	p.mu.Unlock()
	for _, c := range old {
		c.close(errConnClosed)
	}
}

// close closes every connection; queries on them fail.
func (p *streamPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.wakeLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close(errPoolClosed)
	}
}

// open reports how many connections are open.
func (p *streamPool) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// roundTrip writes m under a fresh ID and waits for the reply with that
// ID. On failure, retry reports that the connection broke with nothing
// read from it since the query was written: the query may safely go out
// again on another connection.
func (c *streamConn) roundTrip(ctx context.Context, m *dns.Msg) (r *dns.Msg, retry bool, err error) {
	addr := c.pool.addr
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, true, fmt.Errorf("%s: %w", addr, err)
	}
	id := uint16(rand.Uint32())
	for _, taken := c.pending[id]; taken; _, taken = c.pending[id] {
		id++
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}

	orig := m.Id
	m.Id = id
	buf, perr := m.Pack()
	m.Id = orig
	if perr != nil {
		forget()
		return nil, false, fmt.Errorf("packing query for %s: %w", addr, perr)
	}
	frame := make([]byte, 2+len(buf))
	binary.BigEndian.PutUint16(frame, uint16(len(buf)))
	copy(frame[2:], buf)

	before := c.lastRead.Load()
	c.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetWriteDeadline(dl)
	}
	_, werr := c.nc.Write(frame)
	c.wmu.Unlock()
	if werr != nil {
		forget()
		c.close(werr)
		return nil, true, fmt.Errorf("writing to %s: %w", addr, werr)
	}

	var b []byte
	select {
	case b = <-ch:
	case <-c.done:
		select {
		case b = <-ch:
		default:
			forget()
			return nil, c.lastRead.Load() == before, fmt.Errorf("reading from %s: %w", addr, c.deadErr())
		}
	case <-ctx.Done():
		forget()
		if c.lastRead.Load() == before {
			// Nothing at all came back since the query went out: the
			// connection, not the query, is what is stuck.
			c.close(fmt.Errorf("no reply within the deadline: %w", ctx.Err()))
		}
		return nil, false, fmt.Errorf("reading from %s: %w", addr, timeoutError{ctx.Err()})
	}
	r = new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		return nil, false, fmt.Errorf("reply from %s: %w: %w", addr, errMismatch, err)
	}
	r.Id = orig
	// The reply arrived with our ID on our connection; Validate checks
	// the rest (QR, opcode, question) against what was asked.
	if err := Validate(m, r); err != nil {
		return nil, false, fmt.Errorf("reply from %s: %w: %w", addr, errMismatch, err)
	}
	return r, false, nil
}

// timeoutError makes a context deadline a net.Error timeout, as the
// socket deadlines of the other transports report it.
type timeoutError struct{ err error }

func (e timeoutError) Error() string   { return "i/o timeout: " + e.err.Error() }
func (e timeoutError) Unwrap() error   { return e.err }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func (c *streamConn) deadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errConnClosed
	}
	return c.err
}

// readLoop reads replies and hands each to the query waiting for its ID,
// until the connection dies.
func (c *streamConn) readLoop() {
	var hdr [2]byte
	stray := 0
	for {
		if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
			c.close(err)
			return
		}
		n := binary.BigEndian.Uint16(hdr[:])
		if n < 12 {
			c.close(fmt.Errorf("message of %d bytes", n))
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(c.nc, b); err != nil {
			c.close(err)
			return
		}
		c.lastRead.Store(c.pool.now().UnixNano())
		id := binary.BigEndian.Uint16(b)
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch == nil {
			if stray++; stray > maxStreamStray {
				c.close(fmt.Errorf("%w: %d replies in a row to no outstanding query", errStreamStray, stray))
				return
			}
			continue
		}
		stray = 0
		ch <- b
	}
}

var errStreamStray = errors.New("stray replies")

// close marks the connection dead (the first error is kept), closes it
// and takes it out of the pool; queries waiting on it fail.
func (c *streamConn) close(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.mu.Unlock()
	c.pool.remove(c)
	c.nc.Close()
	close(c.done)
}
