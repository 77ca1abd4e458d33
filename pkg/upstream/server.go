package upstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/observe/hist"
)

// maxIdleTCP bounds the idle TCP connections kept per server; idleTCP is how
// long one may sit unused before it is closed, unless the group says
// otherwise (GroupOptions.Expire). maxStray bounds the
// datagrams one UDP exchange reads that are not its reply: its socket is
// fresh, so nothing else should arrive on it, and a flood of forgeries
// (a spoofer racing the real reply) must not keep the exchange reading
// until its deadline.
const (
	maxIdleTCP = 4
	idleTCP    = 10 * time.Second
	maxStray   = 10
)

// Server is one upstream resolver with its health and figures.
type Server struct {
	Addr string
	cfg  *Config
	// health judges the server (health.go); fails counts the probes
	// failed since the last good one, probing is set while its probe loop
	// runs.
	health  Health
	fails   atomic.Uint32
	probing atomic.Bool
	// idleFor is how long a pooled connection may sit unused (CoreDNS's
	// expire).
	idleFor time.Duration

	requests atomic.Uint64
	failures atomic.Uint64
	lastErr  atomic.Value // string
	// probeFailures counts failed health probes, probeLoops the probe
	// loops started.
	probeFailures, probeLoops atomic.Uint64
	// latency holds the durations of exchanges that got a reply, by the
	// reply's rcode (index maxRcode+1: every rcode above maxRcode).
	latency [maxRcode + 2]hist.Durations

	mu   sync.Mutex
	idle []idleConn

	// stream, for TCP-only and TLS servers, carries every exchange
	// (pool.go); doh, for DNS-over-HTTPS servers (doh.go); both nil: UDP,
	// TCP after truncation.
	stream *streamPool
	doh    *dohClient
}

type idleConn struct {
	c     *dns.Conn
	since time.Time
}

func newServer(addr string, cfg *Config, h Health, idleFor time.Duration) *Server {
	return &Server{Addr: addr, cfg: cfg, health: h, idleFor: idleFor}
}

// maxRcode is the largest rcode whose replies are counted apart; larger
// ones (extended rcodes past BADCOOKIE, never seen in practice) share
// OtherRcode.
const maxRcode = 23

// OtherRcode keys the replies with an rcode above 23 in ServerStats.Latency.
const OtherRcode = -1

// ServerStats is a snapshot of one server's figures. pkg/observe/metrics
// reports them as they are: the JSON names are the /stats document's (read
// by `nodedns stats --json`), so fields are added, never renamed.
type ServerStats struct {
	Addr string `json:"addr"`
	Up   bool   `json:"up"`
	// Requests counts exchanges sent, Failures those that failed (no
	// usable reply, or SERVFAIL).
	Requests  uint64 `json:"requests"`
	Failures  uint64 `json:"failures"`
	LastError string `json:"last_error,omitempty"`
	// P50ms and P99ms estimate the median and 99th percentile duration of
	// exchanges that got a reply, from Latency's buckets.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// ProbeFailures counts health probes that failed (probes run after a
	// failed exchange until one gets a reply; health.go).
	ProbeFailures uint64 `json:"probe_failures"`
	// ProbeLoops counts the probe loops started: one after a failed
	// exchange while none runs, never with MaxFails 0. The start is
	// decided and counted before the exchange returns.
	ProbeLoops uint64 `json:"probe_loops"`
	// Latency are the durations of exchanges that got a reply, by the
	// reply's rcode (OtherRcode for those above 23); only rcodes seen.
	Latency map[int]hist.Snapshot `json:"-"`
}

// Stats returns a snapshot of the server's figures.
func (s *Server) Stats() ServerStats {
	st := ServerStats{Addr: s.Addr, Up: !s.Down(), Requests: s.requests.Load(), Failures: s.failures.Load(),
		ProbeFailures: s.probeFailures.Load(), ProbeLoops: s.probeLoops.Load(), Latency: map[int]hist.Snapshot{}}
	if e, ok := s.lastErr.Load().(string); ok {
		st.LastError = e
	}
	var all hist.Snapshot
	for i := range s.latency {
		snap := s.latency[i].Snapshot()
		if snap.Count() == 0 {
			continue
		}
		rc := i
		if i > maxRcode {
			rc = OtherRcode
		}
		st.Latency[rc] = snap
		all.Merge(snap)
	}
	st.P50ms = all.Quantile(0.50) * 1000
	st.P99ms = all.Quantile(0.99) * 1000
	return st
}

// observe records an exchange that got a reply with rcode after d.
func (s *Server) observe(rcode int, d time.Duration) {
	if rcode < 0 || rcode > maxRcode {
		rcode = maxRcode + 1
	}
	s.latency[rcode].Observe(d)
}

// fail records a failed attempt. Every one is logged at warn level: the
// agent's logger limits such lines per message (pkg/observe/errlog), so a dead
// upstream costs a burst and then a line a second, not one per query.
// Whether the server is down is the probes' business (health.go).
func (s *Server) fail(err error) {
	s.failures.Add(1)
	s.lastErr.Store(err.Error())
	s.cfg.Logger.Warn("upstream exchange failed", "component", "upstream", "server", s.Addr, "err", err)
}

// exchange sends q and returns the matching reply. The query goes out with a
// fresh random ID (the reply gets q's ID back); a truncated UDP reply is
// retried over TCP, and a reply truncated over TCP is an error
// (errTruncated).
func (s *Server) exchange(ctx context.Context, q *dns.Msg, timeout time.Duration) (*dns.Msg, error) {
	s.requests.Add(1)
	start := time.Now()
	r, err := s.exchangeOnce(ctx, q, timeout)
	if err == nil {
		s.observe(r.Rcode, time.Since(start))
	}
	return r, err
}

func (s *Server) exchangeOnce(ctx context.Context, q *dns.Msg, timeout time.Duration) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if s.doh != nil {
		r, err := s.doh.exchange(ctx, q)
		s.tap(true, q, start, r)
		return r, err
	}
	out := q.Copy()
	out.Id = dns.Id()
	if s.stream != nil {
		r, err := s.stream.exchange(ctx, out)
		s.tap(true, out, start, r)
		if err != nil {
			return nil, err
		}
		if r.Truncated {
			return nil, fmt.Errorf("%s: %w", s.Addr, errTruncated)
		}
		r.Id = q.Id
		return r, nil
	}
	r, err := s.udp(ctx, out)
	s.tap(false, out, start, r)
	if err != nil {
		return nil, err
	}
	if r.Truncated {
		start = time.Now()
		r, err = s.tcp(ctx, out)
		s.tap(true, out, start, r)
		if err != nil {
			return nil, fmt.Errorf("retrying %s over TCP after truncation: %w", s.Addr, err)
		}
		if r.Truncated {
			return nil, fmt.Errorf("retrying %s over TCP after truncation: %w", s.Addr, errTruncated)
		}
	}
	r.Id = q.Id
	return r, nil
}

// tap logs one attempt of an exchange (r nil: no reply) to the Tap.
func (s *Server) tap(tcp bool, q *dns.Msg, sent time.Time, r *dns.Msg) {
	if s.cfg.Tap == nil {
		return
	}
	// A DNS-over-HTTPS server's Addr is its URL: no address.
	ap, _ := netip.ParseAddrPort(s.Addr)
	s.cfg.Tap.Forwarded(tcp, ap, sent, q, time.Now(), r)
}

// udp sends m from a fresh socket (a fresh random source port per exchange)
// and waits for a datagram that matches; others are dropped. Replies are
// read whole whatever size was advertised (readDatagram): a server that
// answers larger than asked, without TC, is answered from, not timed out.
// A datagram that does not parse is not a reply either: the exchange waits
// on for the real one (a try that gets only such datagrams times out, a
// failure of the server's: it sent nothing usable in time).
func (s *Server) udp(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	return exchangeUDP(ctx, s.Addr, m)
}

// exchangeUDP is Server.udp's exchange with addr: every UDP question the
// package asks (the resolvers of upstream names too) is read so.
func exchangeUDP(ctx context.Context, addr string, m *dns.Msg) (*dns.Msg, error) {
	buf, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing query for %s: %w", addr, err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dialing %s over UDP: %w", addr, err)
	}
	defer nc.Close()
	uc := nc.(*net.UDPConn)
	if dl, ok := ctx.Deadline(); ok {
		if err := nc.SetDeadline(dl); err != nil {
			return nil, fmt.Errorf("setting deadline on %s: %w", addr, err)
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := uc.Write(buf); err != nil {
		return nil, fmt.Errorf("writing to %s: %w", addr, err)
	}
	for stray := 0; ; stray++ {
		if stray > maxStray {
			return nil, fmt.Errorf("reading from %s: %w", addr, errStray)
		}
		b, err := readDatagram(uc)
		if err != nil {
			return nil, fmt.Errorf("reading from %s: %w", addr, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(b); err != nil {
			// Garbage that does not parse: not a reply, keep waiting.
			continue
		}
		if err := Validate(m, r); err != nil {
			// Not ours (late, spoofed or broken): keep waiting for the
			// real reply until the deadline.
			continue
		}
		return r, nil
	}
}

// tcp sends m over a pooled connection (or a new one) and reads its reply. A
// connection that errs or returns a mismatched reply is closed, not pooled.
// A pooled connection may have been closed by the server while it sat idle
// (servers time idle clients out, often sooner than we do): when one fails
// before answering, the query is sent once more on a fresh connection
// instead of counting as a failure of the server.
func (s *Server) tcp(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	co, reused, err := s.getTCP(ctx, true)
	if err != nil {
		return nil, err
	}
	r, err := s.tcpOnce(ctx, co, m)
	if err == nil || !reused || ctx.Err() != nil || errors.Is(err, errMismatch) || isTimeout(err) {
		return r, err
	}
	if co, _, err = s.getTCP(ctx, false); err != nil {
		return nil, err
	}
	return s.tcpOnce(ctx, co, m)
}

var (
	errMismatch = errors.New("reply does not match the query")
	// errTruncated: a reply read over a stream (TCP, TLS) with TC set. TC
	// tells a UDP client to ask again over TCP; over TCP there is nothing
	// further to ask, so such a reply answers nothing. Passed on, it would
	// reach the client as NOERROR without records ("no such record"): it
	// is a failed attempt instead, though not one of the server's health
	// (it answered).
	errTruncated = errors.New("reply truncated over TCP")
	errStray     = fmt.Errorf("more than %d datagrams that are not the reply; socket abandoned", maxStray)
)

// healthError reports whether err says something about the server's
// health: timeouts and network errors do; a reply that does not match (a
// broken TCP peer, forged datagrams anyone can send) does not, or a
// spoofer could mark a healthy server down.
func healthError(err error) bool {
	return !errors.Is(err, errMismatch) && !errors.Is(err, errStray) && !errors.Is(err, errTruncated)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tcpOnce exchanges m on co; co is pooled again after a good reply and
// closed otherwise.
func (s *Server) tcpOnce(ctx context.Context, co *dns.Conn, m *dns.Msg) (*dns.Msg, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = co.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = co.SetDeadline(time.Unix(1, 0)) })
	if err := co.WriteMsg(m); err != nil {
		stop()
		co.Close()
		return nil, fmt.Errorf("writing to %s over TCP: %w", s.Addr, err)
	}
	r, err := co.ReadMsg()
	if err != nil {
		stop()
		co.Close()
		return nil, fmt.Errorf("reading from %s over TCP: %w", s.Addr, err)
	}
	if err := Validate(m, r); err != nil {
		stop()
		co.Close()
		return nil, fmt.Errorf("reply from %s over TCP: %w: %w", s.Addr, errMismatch, err)
	}
	// Pool the connection only once the deadline callback can no longer
	// run: it would otherwise fire on the next user's exchange.
	if stop() {
		s.putTCP(co)
	} else {
		co.Close()
	}
	return r, nil
}

// getTCP returns an idle pooled connection (reused true) when pooled is
// set and one is left, else a new one.
func (s *Server) getTCP(ctx context.Context, pooled bool) (co *dns.Conn, reused bool, err error) {
	s.mu.Lock()
	for pooled && len(s.idle) > 0 {
		ic := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if time.Since(ic.since) < s.idleFor {
			s.mu.Unlock()
			return ic.c, true, nil
		}
		ic.c.Close()
	}
	s.mu.Unlock()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return nil, false, fmt.Errorf("dialing %s over TCP: %w", s.Addr, err)
	}
	return &dns.Conn{Conn: nc}, false, nil
}

func (s *Server) putTCP(co *dns.Conn) {
	_ = co.SetDeadline(time.Time{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) >= maxIdleTCP {
		co.Close()
		return
	}
	s.idle = append(s.idle, idleConn{c: co, since: time.Now()})
}

func (s *Server) expireIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.idle[:0]
	for _, ic := range s.idle {
		if time.Since(ic.since) >= s.idleFor {
			ic.c.Close()
			continue
		}
		kept = append(kept, ic)
	}
	s.idle = kept
}

func (s *Server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ic := range s.idle {
		ic.c.Close()
	}
	s.idle = nil
}

// Validate checks that r is a reply to q: same ID, QR set, opcode QUERY and
// the same single question (name compared without case). Anything else is
// not an answer to what was asked and must be discarded. r must be a
// message read off the wire (dns.Msg.Unpack): records with empty RDATA
// are refused too (see emptyRdata), and only unpacking sets RDLENGTH.
func Validate(q, r *dns.Msg) error {
	switch {
	case r == nil:
		return errors.New("no reply")
	case r.Id != q.Id:
		return fmt.Errorf("reply ID %d, sent %d", r.Id, q.Id)
	case !r.Response:
		return errors.New("reply without QR bit")
	case r.Opcode != dns.OpcodeQuery:
		return fmt.Errorf("reply opcode %d", r.Opcode)
	case len(r.Question) != 1:
		// A FORMERR or REFUSED without a question section is still an
		// answer to us when the ID matched; RFC 1035 does not require the
		// echo on errors.
		if len(r.Question) == 0 && r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
			return nil
		}
		return fmt.Errorf("reply has %d questions", len(r.Question))
	}
	a, b := q.Question[0], r.Question[0]
	if a.Qtype != b.Qtype || a.Qclass != b.Qclass || !strings.EqualFold(a.Name, b.Name) {
		return fmt.Errorf("reply question %s/%d/%d, asked %s/%d/%d", b.Name, b.Qtype, b.Qclass, a.Name, a.Qtype, a.Qclass)
	}
	if err := emptyRdata(r); err != nil {
		return err
	}
	return repacks(r)
}

// repacks rejects a reply that miekg/dns packs into bytes it cannot unpack
// again. Its unpackers accept some records whose RDATA ends early (fields
// missing at the end of the message) and pack them back into bytes no
// client can parse; the server sends replies on in wire form, so such a
// record must not get past here. Found by FuzzValidate. A reply that does
// not pack at all is let through: the server answers SERVFAIL for it, and
// the cache keeps only replies whose wire form unpacks.
func repacks(r *dns.Msg) error {
	b, err := r.Pack()
	if err != nil {
		return nil
	}
	if err := new(dns.Msg).Unpack(b); err != nil {
		return fmt.Errorf("reply packs into bytes that do not unpack: %w", err)
	}
	return nil
}

// emptyRdata rejects a reply holding a record with empty RDATA (other than
// OPT or NULL, where it is legal). Such records exist only in dynamic
// updates (RFC 2136); miekg/dns unpacks them as zero-valued records but
// packs some of those back into bytes it cannot read (an SOA becomes its
// five numbers without the two names), so a reply carrying one would be
// cached and served as a message no client can parse. Found by
// FuzzValidate.
func emptyRdata(r *dns.Msg) error {
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rdlength == 0 && h.Rrtype != dns.TypeOPT && h.Rrtype != dns.TypeNULL {
				return fmt.Errorf("reply holds a %s record with empty RDATA", dns.TypeToString[h.Rrtype])
			}
		}
	}
	return nil
}

func randPerm(n int) []int { return rand.Perm(n) }
