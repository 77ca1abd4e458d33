//go:build integration

package integration

// Zero-downtime restart: a node's pods have no other DNS server, so the
// agent is replaced under load the way
// a DaemonSet with maxSurge 1 replaces it on a node — the new process
// starts beside the old one and shares its sockets (SO_REUSEPORT), the old
// one gets SIGTERM, turns /ready false, answers for --lameduck, drains its
// sockets and exits without tearing the interception down — while a client
// in a pod namespace sends a steady stream of queries to the local IPs.
// Every query must be answered within a stub resolver's timeout, none with
// SERVFAIL, including queries over TCP and queries whose upstream is slower
// than the drain. And a SIGKILLed agent started again must find its rules,
// leave exactly one copy of each, and answer again.
//
// Speed is reported, not asserted: the rate the client reached, the
// latency percentiles, how soon a restarted agent answered. The bounds that
// remain only say the test tested something, with a wide margin for a busy
// shared machine: a rate of at least a fifth of the one aimed at, answers
// within the 5 s a glibc or musl resolver waits (the slowest answers here
// take about 0.3 s, the slow upstream's), a restarted agent answering
// within 5 s (it takes tens of milliseconds).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const (
	// loadRate is what the pod's client aims at (queries per second).
	// The rate reached is reported; minRate, a fifth of it, is the least
	// that still makes the replacement one under load (a 5x margin for a
	// starved client on a shared 2-core machine).
	loadRate = 1500
	minRate  = loadRate / 5
	// queryTimeout is a client's whole patience for one query, no retry:
	// the 5 s glibc and musl wait by default (resolv.conf timeout:5),
	// over 10 times the ~0.3 s the slowest answers take here (the slow
	// upstream's names, p99); the latencies are reported.
	queryTimeout = 5 * time.Second
	// loadMax bounds one load run whatever happens.
	loadMax = 30 * time.Second
	// slowUpstream is how long the upstream takes for names starting
	// "slow": a distant or busy resolver, well within a client's timeout
	// but longer than the agent's drain.
	slowUpstream = 300 * time.Millisecond
	// rolloutLameduck is --lameduck of the agents under replacement.
	rolloutLameduck = time.Second
)

// rolloutAgent is one agent process with its own admin socket, so that
// readiness is read from this process and not from whichever agent the
// kernel picks.
type rolloutAgent struct {
	p      *proc
	socket string
}

// startRolloutAgent starts agent n in the node namespace: interception on
// both local IPs, no cluster zone (no kubeconfig: every name is forwarded
// or answered from the cache), admin on a per-agent unix socket only.
func (e *interceptEnv) startRolloutAgent(t *testing.T, dir string, n int) *rolloutAgent {
	t.Helper()
	sock := filepath.Join(dir, fmt.Sprintf("agent%d.sock", n))
	p := e.node.Start(t, fmt.Sprintf("agent %d", n), nodednsBin, "serve",
		"--local-ip", strings.Join(localIPs, ","),
		"--interface", linkName,
		"--sync-interval", syncEvery.String(),
		"--upstream", e.upstream.Addr,
		"--admin", "",
		"--admin-socket", sock,
		"--lameduck", rolloutLameduck.String(),
		"--loop-check=false",
		"--log-level", "info",
	)
	return &rolloutAgent{p: p, socket: sock}
}

// ready asks the agent's own /ready: nil on 200.
func (a *rolloutAgent) ready() error {
	if a.p.Exited() {
		return fmt.Errorf("%s exited: %v", a.p.Name, a.p.err)
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.socket)
		}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://nodedns/ready")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/ready: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// loadQuery is one query of the mix: where it goes, what it asks and the
// rcode the test upstream gives it.
type loadQuery struct {
	tcp    bool
	server string
	name   string
	qtype  uint16
	rcode  int
}

// queryMix is the i-th query of a run: mostly names the cache answers
// after their first miss, some unique names (every one a miss resolved
// upstream, in flight while the old agent drains), names of the cluster
// zone (the agent has no cluster here, so it forwards them like any other),
// unique names the upstream answers only after slowUpstream (still in
// flight when the old agent's drain ends),
// negative answers, AAAA, a share sent to the IPv6 local IP, and one in
// twenty over TCP (a connection per query, as after a truncated answer).
func queryMix(run, i int) loadQuery {
	v4 := net.JoinHostPort(localV4, "53")
	v6 := net.JoinHostPort(localV6, "53")
	k := i / 20
	switch i % 20 {
	case 9:
		return loadQuery{true, v4, fmt.Sprintf("c%d.example.test.", k%40), dns.TypeA, dns.RcodeSuccess}
	case 10, 11:
		return loadQuery{false, v4, fmt.Sprintf("u%d-%d.example.test.", run, i), dns.TypeA, dns.RcodeSuccess}
	case 12:
		return loadQuery{false, v4, fmt.Sprintf("slow-u%d-%d.example.test.", run, i), dns.TypeA, dns.RcodeSuccess}
	case 13, 14:
		return loadQuery{false, v4, fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", k%20, k%3), dns.TypeA, dns.RcodeSuccess}
	case 15:
		return loadQuery{false, v4, fmt.Sprintf("nx%d.example.test.", k%20), dns.TypeA, dns.RcodeNameError}
	case 16, 17:
		return loadQuery{false, v4, fmt.Sprintf("c%d.example.com.", k%40), dns.TypeAAAA, dns.RcodeSuccess}
	case 18, 19:
		return loadQuery{false, v6, fmt.Sprintf("c%d.example.test.", k%40), dns.TypeA, dns.RcodeSuccess}
	default:
		return loadQuery{false, v4, fmt.Sprintf("c%d.example.test.", k%40), dns.TypeA, dns.RcodeSuccess}
	}
}

// loadResult counts what happened to the queries of one run.
type loadResult struct {
	Sent, Answered, Lost, Refused, ServFail, WrongRcode, SendErr int64
	Elapsed                                                      time.Duration
	MaxLatency                                                   time.Duration
	// Latencies of the answered queries (kernel receive time), for the
	// reported percentiles.
	Latencies []time.Duration
	// Failures holds up to 20 examples: when (since the run's start)
	// and what. FailedAt is when every failed query was sent.
	Failures []string
	FailedAt []time.Duration
}

func (r loadResult) String() string {
	rate := 0.0
	if r.Elapsed > 0 {
		rate = float64(r.Sent) / r.Elapsed.Seconds()
	}
	return fmt.Sprintf("sent=%d answered=%d lost=%d refused=%d servfail=%d wrong_rcode=%d send_errors=%d rate=%.0f/s (aimed at %d/s) latency p50=%v p99=%v max=%v",
		r.Sent, r.Answered, r.Lost, r.Refused, r.ServFail, r.WrongRcode, r.SendErr, rate, loadRate,
		r.percentile(0.50).Round(time.Microsecond), r.percentile(0.99).Round(time.Microsecond), r.MaxLatency.Round(time.Microsecond))
}

// percentile is the latency under which a fraction q of the answers came.
func (r loadResult) percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), r.Latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[min(len(l)-1, int(float64(len(l))*q))]
}

// loadClient tallies one run.
type loadClient struct {
	pod   *netNS
	start time.Time

	sent, answered, lost, refused, servfail, wrong, sendErr atomic.Int64
	maxLat                                                  atomic.Int64

	mu        sync.Mutex
	failures  []string
	failedAt  []time.Duration
	latencies []time.Duration
	wg        sync.WaitGroup
}

func (c *loadClient) fail(counter *atomic.Int64, sentAt time.Time, format string, args ...any) {
	counter.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failedAt) < 100000 {
		c.failedAt = append(c.failedAt, sentAt.Sub(c.start))
	}
	if len(c.failures) < 20 {
		c.failures = append(c.failures, fmt.Sprintf("sent at +%v: ", sentAt.Sub(c.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
}

// runLoad sends queries from the pod namespace at loadRate until ctx is
// done (or loadMax passes), each from its own socket (a new source port,
// as glibc's stub resolver does, so queries spread over every socket of
// the agents' SO_REUSEPORT groups) with its own ID, gives each answer
// queryTimeout by the kernel's receive timestamp without retrying, and
// returns the tally once every query is answered or given up. run makes
// the unique names of one run differ from those of the others.
func runLoad(ctx context.Context, pod *netNS, run int, start time.Time) (loadResult, error) {
	c := &loadClient{pod: pod, start: start}
	period := time.Second / loadRate
	deadline := c.start.Add(loadMax)
	var sending time.Duration
	err := pod.Do(func() error {
		defer func() { sending = time.Since(c.start) }()
		// This goroutine's thread is in the pod namespace: every socket
		// is made here; the goroutines that wait for answers only read.
		for i := 0; ; i++ {
			at := c.start.Add(time.Duration(i) * period)
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return nil
			}
			c.send(i, queryMix(run, i))
		}
	})
	c.wg.Wait()
	res := loadResult{
		Sent: c.sent.Load(), Answered: c.answered.Load(), Lost: c.lost.Load(), Refused: c.refused.Load(),
		ServFail: c.servfail.Load(), WrongRcode: c.wrong.Load(), SendErr: c.sendErr.Load(),
		Elapsed: sending, MaxLatency: time.Duration(c.maxLat.Load()),
	}
	c.mu.Lock()
	res.Failures = append(res.Failures, c.failures...)
	res.FailedAt = append(res.FailedAt, c.failedAt...)
	res.Latencies = append(res.Latencies, c.latencies...)
	c.mu.Unlock()
	return res, err
}

// send sends query i and starts the goroutine that waits for its answer.
// A UDP query leaves from the sending thread; a TCP query connects on a
// thread of its own in the pod namespace, so that a slow handshake never
// holds up the queries after it.
func (c *loadClient) send(i int, q loadQuery) {
	id := uint16(i) // unique among the queries of the last 40 s at loadRate
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	m.Id = id
	m.RecursionDesired = true
	wire, err := m.Pack()
	if err != nil {
		c.fail(&c.sendErr, time.Now(), "packing %s: %v", q.name, err)
		return
	}
	what := fmt.Sprintf("%s %s to %s/udp (id %d)", q.name, dns.TypeToString[q.qtype], q.server, id)
	if !q.tcp {
		conn, err := net.Dial("udp", q.server)
		if err == nil {
			err = stampArrivals(conn)
		}
		if err != nil {
			c.fail(&c.sendErr, time.Now(), "%s: socket: %v", what, err)
			return
		}
		sentAt := time.Now()
		if _, err := conn.Write(wire); err != nil {
			conn.Close()
			c.fail(&c.sendErr, sentAt, "%s: sending: %v", what, err)
			return
		}
		c.sent.Add(1)
		c.wg.Add(1)
		go c.await(conn, q, id, sentAt, what)
		return
	}
	what = strings.Replace(what, "/udp", "/tcp", 1)
	sentAt := time.Now() // the query starts with the handshake
	c.sent.Add(1)
	c.wg.Add(1)
	go func() {
		var conn net.Conn
		var err error
		if derr := c.pod.Do(func() error {
			d := net.Dialer{Deadline: sentAt.Add(queryTimeout)}
			conn, err = d.Dial("tcp", q.server)
			return nil
		}); derr != nil {
			c.fail(&c.sendErr, sentAt, "%s: %v", what, derr)
			c.wg.Done()
			return
		}
		if err == nil {
			if err = stampArrivals(conn); err == nil {
				_ = conn.SetWriteDeadline(sentAt.Add(queryTimeout))
				_, err = conn.Write(append([]byte{byte(len(wire) >> 8), byte(len(wire))}, wire...))
			}
			if err != nil {
				conn.Close()
			}
		}
		if err != nil {
			c.failed(sentAt, what, err)
			c.wg.Done()
			return
		}
		c.await(conn, q, id, sentAt, what)
	}()
}

// failed counts a query that got no answer because of err.
func (c *loadClient) failed(sentAt time.Time, what string, err error) {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		c.fail(&c.lost, sentAt, "%s: no answer within %v", what, queryTimeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		c.fail(&c.refused, sentAt, "%s: refused (port unreachable or RST)", what)
	default:
		c.fail(&c.lost, sentAt, "%s: %v", what, err)
	}
}

// lateGrace is how long past its timeout a query's socket is still read:
// an answer that arrives in time, by the kernel's receive timestamp, counts
// as answered even when this process was too starved of CPU to read it
// within the timeout (other work on a shared machine must not pass for a
// lost query); one that arrives later counts as lost.
const lateGrace = 3 * time.Second

// await reads the answer to query id from conn and tallies it.
func (c *loadClient) await(conn net.Conn, q loadQuery, id uint16, sentAt time.Time, what string) {
	defer c.wg.Done()
	defer conn.Close()
	_ = conn.SetReadDeadline(sentAt.Add(queryTimeout + lateGrace))
	buf := make([]byte, 1500)
	for {
		n, arrived, err := readAnswer(conn, q.tcp, buf)
		if err != nil {
			c.failed(sentAt, what, err)
			return
		}
		r := new(dns.Msg)
		if r.Unpack(buf[:n]) != nil || r.Id != id || !r.Response || len(r.Question) != 1 ||
			!strings.EqualFold(r.Question[0].Name, q.name) || r.Question[0].Qtype != q.qtype {
			if q.tcp {
				c.fail(&c.lost, sentAt, "%s: a TCP answer that is not ours", what)
				return
			}
			continue // not our answer: keep waiting, as a stub resolver does
		}
		lat := arrived.Sub(sentAt)
		if lat > queryTimeout {
			c.fail(&c.lost, sentAt, "%s: answered after %v (kernel receive time), past the %v timeout", what, lat.Round(time.Millisecond), queryTimeout)
			return
		}
		for {
			old := c.maxLat.Load()
			if int64(lat) <= old || c.maxLat.CompareAndSwap(old, int64(lat)) {
				break
			}
		}
		c.answered.Add(1)
		c.mu.Lock()
		c.latencies = append(c.latencies, lat)
		c.mu.Unlock()
		switch {
		case r.Rcode == dns.RcodeServerFailure:
			c.fail(&c.servfail, sentAt, "%s: SERVFAIL", what)
		case r.Rcode != q.rcode:
			c.fail(&c.wrong, sentAt, "%s: %s, want %s", what, dns.RcodeToString[r.Rcode], dns.RcodeToString[q.rcode])
		case q.rcode == dns.RcodeSuccess && len(r.Answer) == 0:
			c.fail(&c.wrong, sentAt, "%s: NOERROR without an answer", what)
		}
		return
	}
}

// stampArrivals turns on kernel receive timestamps (SO_TIMESTAMPNS) on
// conn's socket.
func stampArrivals(conn net.Conn) error {
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// readAnswer reads one message — a datagram, or a length-prefixed message
// from a TCP stream — and returns its length and when the kernel received
// it (for TCP: its last byte, or now when the kernel gave no timestamp).
func readAnswer(conn net.Conn, tcp bool, buf []byte) (int, time.Time, error) {
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, time.Time{}, err
	}
	var arrived time.Time
	oob := make([]byte, 128)
	// recv reads into p once data is there (the runtime's poller waits,
	// under the connection's read deadline).
	recv := func(p []byte) (int, error) {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			var oobn int
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob, 0)
			if rerr == unix.EAGAIN {
				return false
			}
			if rerr == nil {
				if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
					for _, m := range msgs {
						if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
							// struct timespec: two 64-bit words here
							// (amd64, arm64).
							arrived = time.Unix(int64(binary.NativeEndian.Uint64(m.Data[0:8])), int64(binary.NativeEndian.Uint64(m.Data[8:16])))
						}
					}
				}
			}
			return true
		})
		if err != nil {
			return 0, err
		}
		if rerr != nil {
			return 0, os.NewSyscallError("recvmsg", rerr)
		}
		if n == 0 && len(p) > 0 && tcp {
			return 0, io.EOF
		}
		return n, nil
	}
	full := func(p []byte) error {
		for len(p) > 0 {
			n, err := recv(p)
			if err != nil {
				return err
			}
			p = p[n:]
		}
		return nil
	}
	if !tcp {
		n, err := recv(buf)
		if err == nil && arrived.IsZero() {
			err = errors.New("no receive timestamp")
		}
		return n, arrived, err
	}
	if err := full(buf[:2]); err != nil {
		return 0, time.Time{}, err
	}
	n := int(buf[0])<<8 | int(buf[1])
	if n > len(buf) {
		return 0, time.Time{}, fmt.Errorf("TCP answer of %d bytes", n)
	}
	if err := full(buf[:n]); err != nil {
		return 0, time.Time{}, err
	}
	if arrived.IsZero() {
		// TCP does not always carry one (it depends on how the segment
		// was queued): now is later than the arrival, so the test is
		// only stricter.
		arrived = time.Now()
	}
	return n, arrived, nil
}

// loadEvent is a step of a rollout, timed from the start of its load.
type loadEvent struct {
	at   time.Duration
	what string
}

// phases prints the timeline with the number of failed queries sent
// between each step and the next, so that a failure shows whether it
// belongs to the replacement or to something else (a starved machine).
func phases(events []loadEvent, failedAt []time.Duration) string {
	var b strings.Builder
	prev := time.Duration(0)
	for _, ev := range append(events, loadEvent{time.Duration(1<<62 - 1), ""}) {
		n := 0
		for _, f := range failedAt {
			if f >= prev && f < ev.at {
				n++
			}
		}
		if n > 0 {
			fmt.Fprintf(&b, "    %d failed queries sent in this interval\n", n)
		}
		if ev.what != "" {
			fmt.Fprintf(&b, "  +%v %s\n", ev.at.Round(time.Millisecond), ev.what)
		}
		prev = ev.at
	}
	return strings.TrimRight(b.String(), "\n")
}

// checkLoad fails the test unless every query of r was answered, none
// with SERVFAIL or an unexpected rcode, at minRate or more (the rate and
// the latencies are reported by the caller).
func checkLoad(t *testing.T, what string, r loadResult) {
	t.Helper()
	if r.Sent == 0 {
		t.Errorf("%s: no query sent", what)
		return
	}
	if rate := float64(r.Sent) / r.Elapsed.Seconds(); rate < minRate {
		t.Errorf("%s: the client reached %.0f queries/s, want at least %d (a fifth of the %d/s aimed at: the machine too starved for the test to mean anything)", what, rate, minRate, loadRate)
	}
	if r.Lost != 0 || r.Refused != 0 || r.ServFail != 0 || r.WrongRcode != 0 || r.SendErr != 0 || r.Answered != r.Sent {
		t.Errorf("%s: %s\nfirst failures:\n  %s", what, r, strings.Join(r.Failures, "\n  "))
	}
}

// ruleLines returns our rules in one table of the backend under test as
// `iptables -t TABLE -S` prints them.
func (e *interceptEnv) ruleLines(t *testing.T, table string, v6 bool) []string {
	t.Helper()
	ipt := "iptables-" + e.backend
	if v6 {
		ipt = "ip6tables-" + e.backend
	}
	var out []string
	for _, l := range strings.Split(e.node.MustRun(t, ipt, "-t", table, "-S"), "\n") {
		if strings.HasPrefix(l, "-A ") && strings.Contains(l, `"nodedns: `) {
			out = append(out, l)
		}
	}
	return out
}

// checkRuleCopies fails unless every rule of ours in the raw and filter
// tables appears exactly once and there are as many as the agent installs
// (wantRules; checkRulesOnce checks their exact form).
func (e *interceptEnv) checkRuleCopies(t *testing.T) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		for _, table := range []string{"raw", "filter"} {
			lines := e.ruleLines(t, table, v6)
			seen := map[string]int{}
			for _, l := range lines {
				seen[l]++
			}
			var dups []string
			for l, n := range seen {
				if n != 1 {
					dups = append(dups, fmt.Sprintf("%dx %s", n, l))
				}
			}
			sort.Strings(dups)
			if len(dups) > 0 {
				t.Errorf("ipv6=%v table %s: duplicate rules:\n  %s", v6, table, strings.Join(dups, "\n  "))
			}
			// Per local IP: raw 3 chains x 2 protocols, filter 2 x 2.
			want := 6
			if table == "filter" {
				want = 4
			}
			if len(lines) != want {
				t.Errorf("ipv6=%v table %s: %d rules of ours, want %d:\n  %s", v6, table, len(lines), want, strings.Join(lines, "\n  "))
			}
		}
	}
	if err := e.checkRulesOnce(); err != nil {
		t.Error(err)
	}
}

// TestRolloutZeroDowntime replaces the agent three times under a steady
// query load from the pod namespace.
func TestRolloutZeroDowntime(t *testing.T) {
	const rollouts = 3
	e := newInterceptEnv(t, "nft")
	zone := dnstest.Zone(30)
	e.upstream.SetHandler(func(w dns.ResponseWriter, r *dns.Msg) {
		if len(r.Question) == 1 && strings.HasPrefix(strings.ToLower(r.Question[0].Name), "slow") {
			time.Sleep(slowUpstream)
		}
		zone(w, r)
	})
	dir := t.TempDir()
	cur := e.startRolloutAgent(t, dir, 0)
	e.waitServing(t, cur.p)
	dnstest.Eventually(t, 10*time.Second, "agent 0 ready", cur.ready)

	var total loadResult
	for r := 1; r <= rollouts; r++ {
		ctx, stop := context.WithCancel(context.Background())
		type outcome struct {
			res loadResult
			err error
		}
		done := make(chan outcome, 1)
		start := time.Now()
		go func() {
			res, err := runLoad(ctx, e.pod, r, start)
			done <- outcome{res, err}
		}()
		var timeline []loadEvent
		mark := func(what string) { timeline = append(timeline, loadEvent{time.Since(start), what}) }
		var rolloutErr error
		func() {
			defer stop()
			time.Sleep(time.Second) // load against the old agent alone first
			next := e.startRolloutAgent(t, dir, r)
			mark("new agent started")
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := next.ready()
				if err == nil {
					break
				}
				if next.p.Exited() || time.Now().After(deadline) {
					rolloutErr = fmt.Errorf("agent %d not ready: %v", r, err)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			mark("new agent ready")
			_ = cur.p.Cmd.Process.Signal(syscall.SIGTERM)
			mark("SIGTERM to the old agent")
			// During lameduck the old agent says it is not ready (once it
			// has taken the signal in: any time within the lameduck).
			for sig := time.Now(); cur.ready() == nil; {
				if time.Since(sig) > rolloutLameduck {
					rolloutErr = fmt.Errorf("old agent still ready %v after SIGTERM (its lameduck)", rolloutLameduck)
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case <-cur.p.done:
			case <-time.After(rolloutLameduck + 10*time.Second):
				rolloutErr = errors.Join(rolloutErr, fmt.Errorf("old agent still running %v after SIGTERM", rolloutLameduck+10*time.Second))
				return
			}
			mark("old agent exited")
			if cur.p.err != nil {
				rolloutErr = errors.Join(rolloutErr, fmt.Errorf("old agent exited with %v", cur.p.err))
			}
			cur = next
			// The load goes on against the new agent alone.
			for time.Since(start) < 6*time.Second {
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(time.Second)
		}()
		out := <-done
		mark("load stopped and every query settled")
		t.Logf("rollout %d: %s\n%s", r, out.res, phases(timeline, out.res.FailedAt))
		if out.err != nil {
			t.Fatalf("rollout %d: load client: %v", r, out.err)
		}
		if rolloutErr != nil {
			t.Fatalf("rollout %d: %v", r, rolloutErr)
		}
		checkLoad(t, fmt.Sprintf("rollout %d", r), out.res)

		// The old agent saw the new one serving and left the link and
		// the rules in place, one copy each; the new one serves.
		if err := e.checkLink(t); err != nil {
			t.Errorf("rollout %d: after the old agent exited: %v", r, err)
		}
		e.checkRuleCopies(t)
		if err := cur.ready(); err != nil {
			t.Errorf("rollout %d: new agent: %v", r, err)
		}
		e.expectAnswers(t, e.pod)

		total.Sent += out.res.Sent
		total.Answered += out.res.Answered
		total.Lost += out.res.Lost
		total.Refused += out.res.Refused
		total.ServFail += out.res.ServFail
		total.WrongRcode += out.res.WrongRcode
		total.SendErr += out.res.SendErr
		total.Elapsed += out.res.Elapsed
		total.MaxLatency = max(total.MaxLatency, out.res.MaxLatency)
		total.Latencies = append(total.Latencies, out.res.Latencies...)
		if t.Failed() {
			break
		}
	}
	t.Logf("all rollouts: %s", total)
}

// TestRolloutSIGKILL kills the agent with SIGKILL (no teardown runs, the
// rules and the link stay) and starts it again: one copy of each rule, and
// answers again; how soon is reported (tens of milliseconds), and must be
// within 5 s.
func TestRolloutSIGKILL(t *testing.T) {
	e := newInterceptEnv(t, "nft")
	dir := t.TempDir()
	a := e.startRolloutAgent(t, dir, 0)
	e.waitServing(t, a.p)
	e.checkRuleCopies(t)

	for round := 1; round <= 3; round++ {
		a.p.Kill()
		if err := e.checkLink(t); err != nil {
			t.Fatalf("round %d: after SIGKILL: %v", round, err)
		}
		e.checkRuleCopies(t)

		a = e.startRolloutAgent(t, dir, round)
		started := time.Now()
		var first time.Duration
		for i := 0; ; i++ {
			if a.p.Exited() {
				t.Fatalf("round %d: agent exited: %v", round, a.p.err)
			}
			if i > 0 && time.Since(started) > 5*time.Second {
				t.Fatalf("round %d: no answer from the restarted agent within 5s", round)
			}
			if err := answerOnce(e.pod, net.JoinHostPort(localV4, "53"), fmt.Sprintf("k%d-%d.example.test.", round, i), 100*time.Millisecond); err == nil {
				first = time.Since(started)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("round %d: answering %v after the restart", round, first.Round(time.Millisecond))
		dnstest.Eventually(t, 10*time.Second, "restarted agent ready", a.ready)
		// Sync passes too: still one copy of each rule.
		waitPasses(t, a.p, a.socket, 2)
		e.checkRuleCopies(t)
		if err := e.checkLink(t); err != nil {
			t.Error(err)
		}
		e.expectAnswers(t, e.pod)
		if t.Failed() {
			break
		}
	}
}

// answerOnce sends one A query from ns to server and waits up to timeout
// for a NOERROR answer.
func answerOnce(ns *netNS, server, name string, timeout time.Duration) error {
	var conn net.Conn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.Dial("udp", server)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	wire, err := m.Pack()
	if err != nil {
		return err
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(wire); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		return err
	}
	if r.Id != m.Id || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return fmt.Errorf("answer: %s", r)
	}
	return nil
}
