package dnstest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	fs "github.com/farsightsec/golang-framestream"
	"google.golang.org/protobuf/proto"
)

// Collector is a dnstap collector for tests: it accepts Frame Streams
// connections (bidirectional, content type protobuf:dnstap.Dnstap) on a
// unix or TCP socket and decodes every frame with golang-dnstap's
// generated types, the reference for the schema. It stops when the test
// ends.
type Collector struct {
	// Addr is the socket: a path (unix) or host:port (tcp).
	Addr string
	ln   net.Listener
	msgs chan *dnstappb.Dnstap

	mu    sync.Mutex
	conns map[net.Conn]bool
	// paused holds every connection's reads until it is closed.
	paused chan struct{}
	errs   []error
	wg     sync.WaitGroup
	// sink: frames are read and thrown away, without allocating (Sink).
	sink  bool
	bytes atomic.Int64
}

// collectorBuffer bounds the decoded messages held for the test.
const collectorBuffer = 100000

// StartCollector listens on network ("unix" or "tcp") at addr and collects
// what is sent there.
func StartCollector(t testing.TB, network, addr string) *Collector {
	t.Helper()
	return startCollector(t, network, addr, false)
}

// StartSink is a collector that reads every frame after the handshake and
// throws it away, allocating nothing per frame (for the allocation counts
// of the sender, which count every goroutine's): Next finds nothing,
// Bytes counts what was read.
func StartSink(t testing.TB, network, addr string) *Collector {
	t.Helper()
	return startCollector(t, network, addr, true)
}

// Bytes is what a sink read after the handshakes.
func (c *Collector) Bytes() int64 { return c.bytes.Load() }

func startCollector(t testing.TB, network, addr string, sink bool) *Collector {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("dnstap collector: listening on %s %s: %v", network, addr, err)
	}
	c := &Collector{Addr: ln.Addr().String(), ln: ln, msgs: make(chan *dnstappb.Dnstap, collectorBuffer), conns: map[net.Conn]bool{}, sink: sink}
	c.wg.Go(c.accept)
	t.Cleanup(c.Close)
	return c
}

func (c *Collector) accept() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.mu.Lock()
		c.conns[conn] = true
		paused := c.paused
		c.mu.Unlock()
		c.wg.Go(func() { c.read(conn, paused) })
	}
}

func (c *Collector) read(conn net.Conn, paused chan struct{}) {
	defer func() {
		c.mu.Lock()
		delete(c.conns, conn)
		c.mu.Unlock()
		_ = conn.Close()
	}()
	if paused != nil {
		// A collector that accepts and reads nothing, not even the
		// handshake, until it is closed.
		<-paused
		return
	}
	dec, err := fs.NewDecoder(conn, &fs.DecoderOptions{ContentType: []byte("protobuf:dnstap.Dnstap"), Bidirectional: true, Timeout: 5 * time.Second})
	if err != nil {
		c.fail(err)
		return
	}
	if c.sink {
		// The decoder's buffer may hold the first frames: they are not
		// counted (the sink's figure is a lower bound).
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			c.bytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
	for {
		b, err := dec.Decode()
		if err != nil {
			if !errors.Is(err, fs.EOF) && !errors.Is(err, net.ErrClosed) {
				c.fail(err)
			}
			return
		}
		m := new(dnstappb.Dnstap)
		if err := proto.Unmarshal(append([]byte(nil), b...), m); err != nil {
			c.fail(err)
			return
		}
		select {
		case c.msgs <- m:
		default:
			c.fail(errors.New("dnstap collector: more messages than the test reads"))
		}
	}
}

func (c *Collector) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// Errors are the errors met decoding what was sent (a bad frame, a bad
// protobuf, a bad handshake).
func (c *Collector) Errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// Pause makes the connections accepted from now on read nothing (a
// collector that hangs); Close ends them.
func (c *Collector) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = make(chan struct{})
	}
}

// Conns is the number of connections open now.
func (c *Collector) Conns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// Next returns the next message, or nil when none comes within wait.
func (c *Collector) Next(wait time.Duration) *dnstappb.Dnstap {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m := <-c.msgs:
		return m
	case <-t.C:
		return nil
	}
}

// Take returns n messages, or those that came within wait.
func (c *Collector) Take(n int, wait time.Duration) []*dnstappb.Dnstap {
	deadline := time.Now().Add(wait)
	var out []*dnstappb.Dnstap
	for len(out) < n {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		out = append(out, m)
	}
	return out
}

// Drain returns the messages already received.
func (c *Collector) Drain() []*dnstappb.Dnstap {
	var out []*dnstappb.Dnstap
	for {
		select {
		case m := <-c.msgs:
			out = append(out, m)
		default:
			return out
		}
	}
}

// Close stops listening and ends every connection.
func (c *Collector) Close() {
	_ = c.ln.Close()
	c.mu.Lock()
	if c.paused != nil {
		select {
		case <-c.paused:
		default:
			close(c.paused)
		}
	}
	for conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
