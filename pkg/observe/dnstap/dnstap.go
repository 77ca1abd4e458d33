// Package dnstap sends a log of the agent's DNS messages to dnstap
// collectors (https://dnstap.info), as CoreDNS's dnstap plugin: the
// queries clients sent and the replies they got (CLIENT_QUERY,
// CLIENT_RESPONSE), and the exchanges with upstream servers
// (FORWARDER_QUERY, FORWARDER_RESPONSE), each a protobuf dnstap.Dnstap
// (encode.go) in a Frame Streams frame of content type
// "protobuf:dnstap.Dnstap", over a unix socket, TCP or TLS.
//
// The query path never waits for a collector: a message is encoded, as a
// frame, straight into the tap's queue (ring.go), one buffer allocated at
// start and bounded in bytes and in messages; when the queue is full (a
// slow collector, or none) the message is dropped and counted. One
// goroutine per collector (Run) writes the queue out, stretches of whole
// frames at a time, connects again with a backoff when the connection
// fails, and counts what it sent and what it lost. A message costs its
// encoding (a copy of the DNS messages) under the queue's lock, and no
// allocation.
//
// Limits: the extra field is sent as written (CoreDNS replaces metadata
// placeholders in it); the agent connects to collectors, it does not
// listen for them (CoreDNS's `dnstap listen`).
package dnstap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	fs "github.com/farsightsec/golang-framestream"
)

// ContentType is the Frame Streams content type of dnstap.
const ContentType = "protobuf:dnstap.Dnstap"

// Defaults and bounds of a tap's queue.
const (
	// DefaultQueueMessages is CoreDNS's queue (10000 messages).
	DefaultQueueMessages = 10000
	// DefaultQueueBytes bounds the bytes queued: about 10000 messages of
	// a query and a reply each, without most of them.
	DefaultQueueBytes = 8 << 20
	// MaxQueueMessages and MaxQueueBytes bound what a configuration may
	// ask for.
	MaxQueueMessages = 1_000_000
	MaxQueueBytes    = 1 << 30
)

// Timeouts of the writer, as CoreDNS's: a connection attempt, and a
// write (a collector that reads nothing for this long is given up and
// connected again).
const (
	dialTimeout  = 4 * time.Second
	writeTimeout = 4 * time.Second
	// stopFlush bounds the last writes when the tap stops.
	stopFlush = time.Second
	// maxWrite bounds one write to the connection (whole frames, at
	// least one).
	maxWrite = 256 << 10
)

// Config is one collector and what is sent to it.
type Config struct {
	// Socket is the collector: unix:///path (or a bare path), tcp://host:port
	// or tls://host:port.
	Socket string
	// Full includes the DNS messages in wire form; without it a message
	// says who, when and what type only (CoreDNS's `full`).
	Full bool
	// Identity, Version and Extra are the fields of every message
	// (Identity: default the host's name; Version: default "nodedns").
	Identity, Version, Extra string
	// SkipVerify accepts any certificate of a tls:// collector.
	SkipVerify bool
	// QueueMessages and QueueBytes bound what waits for the collector;
	// defaults DefaultQueueMessages and DefaultQueueBytes.
	QueueMessages, QueueBytes int
	// Backoff is the first pause before connecting again after a failure,
	// doubled each time up to MaxBackoff; defaults 250ms and 10s.
	Backoff, MaxBackoff time.Duration
	Logger              *slog.Logger
}

// Endpoint splits a Socket into the network and address to dial: unix
// (unix:// or a path), tcp or tls.
func Endpoint(socket string) (network, addr string, err error) {
	s := strings.TrimSpace(socket)
	switch {
	case strings.HasPrefix(s, "unix://"):
		network, addr = "unix", strings.TrimPrefix(s, "unix://")
	case strings.HasPrefix(s, "tcp://"), strings.HasPrefix(s, "tls://"):
		u, perr := url.Parse(s)
		if perr != nil {
			return "", "", fmt.Errorf("dnstap socket %q: %w", socket, perr)
		}
		if u.Port() == "" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
			return "", "", fmt.Errorf("dnstap socket %q: want %s://host:port", socket, u.Scheme)
		}
		network, addr = u.Scheme, u.Host
	case strings.Contains(s, "://"):
		return "", "", fmt.Errorf("dnstap socket %q: want unix://, tcp:// or tls://", socket)
	default:
		network, addr = "unix", s
	}
	if network == "unix" && !strings.HasPrefix(addr, "/") {
		return "", "", fmt.Errorf("dnstap socket %q: want an absolute path", socket)
	}
	return network, addr, nil
}

// Tap sends messages to one collector. Its methods are safe for
// concurrent use; Run writes to the collector until its context ends.
type Tap struct {
	cfg           Config
	network, addr string
	hdr           header
	log           *slog.Logger

	// q holds the frames waiting for the collector; notify wakes the
	// writer after a put.
	q      *ring
	notify chan struct{}

	sent, dropped, lost, reconnects atomic.Uint64
	connected                       atomic.Bool
	lastErr                         atomic.Pointer[string]
}

// New checks cfg and returns its tap; nothing is dialled before Run. The
// queue's buffer (QueueBytes) is allocated here, once.
func New(cfg Config) (*Tap, error) {
	network, addr, err := Endpoint(cfg.Socket)
	if err != nil {
		return nil, err
	}
	if cfg.QueueMessages == 0 {
		cfg.QueueMessages = DefaultQueueMessages
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.QueueMessages < 1 || cfg.QueueMessages > MaxQueueMessages {
		return nil, fmt.Errorf("dnstap %s: queue of %d messages: want 1 to %d", cfg.Socket, cfg.QueueMessages, MaxQueueMessages)
	}
	if cfg.QueueBytes < 4096 || cfg.QueueBytes > MaxQueueBytes {
		return nil, fmt.Errorf("dnstap %s: queue of %d bytes: want 4096 to %d", cfg.Socket, cfg.QueueBytes, MaxQueueBytes)
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.Backoff {
		cfg.MaxBackoff = max(10*time.Second, cfg.Backoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Tap{cfg: cfg, network: network, addr: addr,
		log: cfg.Logger.With("component", "dnstap", "socket", cfg.Socket),
		q:   newRing(cfg.QueueBytes, cfg.QueueMessages), notify: make(chan struct{}, 1),
		hdr: header{identity: []byte(cfg.Identity), version: []byte(cfg.Version), extra: []byte(cfg.Extra)}}, nil
}

// Socket is the collector's socket as configured.
func (t *Tap) Socket() string { return t.cfg.Socket }

// Full reports whether messages carry the DNS messages.
func (t *Tap) Full() bool { return t.cfg.Full }

// Send queues m for the collector, never waiting: when the queue is full
// (in messages or bytes) m is dropped and counted. m's byte slices are
// copied into the queue, encoded; nothing is allocated.
func (t *Tap) Send(m *Message) {
	n := 4 + sizeDnstap(&t.hdr, m)
	if !t.q.put(n, func(b []byte) []byte { return appendDnstap(b, &t.hdr, m) }) {
		t.dropped.Add(1)
		return
	}
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// Stats are a tap's figures. The JSON names are the /stats document's.
type Stats struct {
	Socket string `json:"socket"`
	// Connected: the collector is connected now.
	Connected bool `json:"connected"`
	// Sent counts messages written to the collector; Dropped those
	// dropped because the queue was full (a slow collector, or none);
	// Lost those queued or written when a connection failed.
	Sent    uint64 `json:"sent"`
	Dropped uint64 `json:"dropped"`
	Lost    uint64 `json:"lost"`
	// Reconnects counts connections made again after one failed.
	Reconnects uint64 `json:"reconnects"`
	// QueuedMessages and QueuedBytes wait for the collector now.
	QueuedMessages int    `json:"queued_messages"`
	QueuedBytes    int64  `json:"queued_bytes"`
	LastError      string `json:"last_error,omitempty"`
}

// Stats returns the tap's figures.
func (t *Tap) Stats() Stats {
	frames, bytes := t.q.len()
	st := Stats{Socket: t.cfg.Socket, Connected: t.connected.Load(), Sent: t.sent.Load(), Dropped: t.dropped.Load(),
		Lost: t.lost.Load(), Reconnects: t.reconnects.Load(), QueuedMessages: frames, QueuedBytes: int64(bytes)}
	if e := t.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

// Run connects to the collector and writes the queue to it until ctx is
// done, connecting again with a backoff after every failure; then it
// writes what is queued for at most a second and closes the connection.
func (t *Tap) Run(ctx context.Context) {
	backoff := t.cfg.Backoff
	for first := true; ; first = false {
		enc, conn, err := t.connect(ctx)
		if err == nil {
			if !first {
				t.reconnects.Add(1)
			}
			t.log.Info("dnstap collector connected")
			backoff = t.cfg.Backoff
			err = t.pump(ctx, enc, conn)
			t.connected.Store(false)
		}
		if ctx.Err() != nil {
			return
		}
		msg := err.Error()
		t.lastErr.Store(&msg)
		t.log.Warn("dnstap collector unreachable; messages queue up to the bound, then are dropped", "err", err, "retryIn", backoff.String())
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, t.cfg.MaxBackoff)
	}
}

// connect dials the collector and opens the bidirectional Frame Stream
// (READY, ACCEPT, START), as CoreDNS does.
func (t *Tap) connect(ctx context.Context) (*fs.Encoder, net.Conn, error) {
	d := &net.Dialer{Timeout: dialTimeout}
	var (
		conn net.Conn
		err  error
	)
	if t.network == "tls" {
		td := &tls.Dialer{NetDialer: d, Config: &tls.Config{InsecureSkipVerify: t.cfg.SkipVerify}} // #nosec G402 -- the operator's skipverify
		conn, err = td.DialContext(ctx, "tcp", t.addr)
	} else {
		conn, err = d.DialContext(ctx, t.network, t.addr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dialing %s: %w", t.cfg.Socket, err)
	}
	// The handshake reads the collector's ACCEPT: bounded by the
	// encoder's timeout, and cut short by ctx (the encoder sets its own
	// deadlines: the connection is closed instead).
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	enc, err := fs.NewEncoder(conn, &fs.EncoderOptions{ContentType: []byte(ContentType), Bidirectional: true, Timeout: writeTimeout})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("opening a frame stream to %s: %w", t.cfg.Socket, err)
	}
	t.connected.Store(true)
	return enc, conn, nil
}

// pump writes the queue to the connection until a write fails (that
// error) or ctx is done (nil, after the last writes). Each write is a
// stretch of whole frames straight from the queue (enc, the Frame Streams
// encoder, only opens and closes the stream: its Write allocates for
// every frame's length prefix).
func (t *Tap) pump(ctx context.Context, enc *fs.Encoder, conn net.Conn) error {
	defer conn.Close()
	for {
		select {
		case <-ctx.Done():
			t.finish(enc, conn)
			return nil
		default:
		}
		if err := t.writeOnce(conn, time.Now().Add(writeTimeout)); err != nil {
			return err
		}
		if frames, _ := t.q.len(); frames == 0 {
			select {
			case <-ctx.Done():
			case <-t.notify:
			}
		}
	}
}

// writeOnce writes the oldest stretch of the queue, if any, with the
// write deadline given, and counts it sent or lost.
func (t *Tap) writeOnce(conn net.Conn, deadline time.Time) error {
	b, count := t.q.take(maxWrite)
	if count == 0 {
		return nil
	}
	_ = conn.SetWriteDeadline(deadline)
	_, err := conn.Write(b)
	t.q.release(len(b), count)
	if err != nil {
		t.lost.Add(uint64(count))
		return fmt.Errorf("writing to %s: %w", t.cfg.Socket, err)
	}
	t.sent.Add(uint64(count))
	return nil
}

// finish writes what is queued, for at most stopFlush, and ends the
// stream (STOP, and the collector's FINISH awaited within the same
// bound). Whatever is still queued then stays unsent.
func (t *Tap) finish(enc *fs.Encoder, conn net.Conn) {
	deadline := time.Now().Add(stopFlush)
	for time.Now().Before(deadline) {
		if frames, _ := t.q.len(); frames == 0 {
			break
		}
		if t.writeOnce(conn, deadline) != nil {
			return
		}
	}
	// The encoder sets its own deadlines (writeTimeout) on every read
	// and write: the bound is kept by closing the connection under it.
	done := make(chan error, 1)
	go func() { done <- enc.Close() }()
	timer := time.NewTimer(time.Until(deadline) + 100*time.Millisecond)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			t.log.Debug("dnstap stream not closed cleanly", "err", err)
		}
	case <-timer.C:
		_ = conn.Close()
		<-done
	}
}
