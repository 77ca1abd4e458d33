// Command dnsload sends a steady DNS load to one server and reports what
// an availability test needs: how many queries failed (no answer within
// the timeout, an rcode other than NOERROR, or no address in the answer)
// and the longest stretch without a good answer. The end-to-end tests (e2e/)
// run it in a client pod while they roll out, kill and stop the agent.
//
// It sends -qps queries a second (each of -types, A and AAAA by default,
// of each name of -names in turn) from -sockets sockets (source ports), each query waiting at most
// -timeout, for -for; then it waits out the last timeouts and prints one
// JSON line:
//
//	{"sent":N,"ok":N,"failed":N,"timeouts":N,"bad_rcode":N,"empty":N,
//	 "fail_pct":P,"longest_gap_ms":G,"gap_at_s":T,"p50_ms":..,"p99_ms":..,
//	 "per_second":[[ok,failed],...]}
//
// longest_gap_ms is the longest time between two good answers (or from
// the start to the first, or from the last to the end); per_second counts
// the queries sent in each second by their outcome. Bounded: at most
// 10,000 queries a second, 16 sockets, 1,000 names and an hour.
//
// Its sockets are connected UDP sockets held for the whole run. A socket
// the kernel aborts (ECONNABORTED: Cilium's socket load balancer destroys
// the sockets connected to a backend that goes away, a Local Redirect
// Policy's agent pod in a rollout, so that the client connects again and
// is sent to a live one) is connected again, as a client on Cilium must:
// the queries it held unanswered are lost, counted as timeouts, and
// "reconnects" in the JSON line counts the new sockets. Bounded: at most
// 1,000 reconnects per socket.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/tools/dnsload/report"
)

type outcome int

const (
	okAnswer outcome = iota
	timedOut
	badRcode
	emptyAnswer
)

type pending struct {
	sent time.Time
	sec  int
}

// maxReconnects bounds the sockets made again for one source socket.
const maxReconnects = 1000

type load struct {
	mu      sync.Mutex
	start   time.Time
	inq     []map[uint16]pending // per socket, by ID
	res     report.Result
	lat     []time.Duration
	goodAt  []time.Duration // times (since start) of good answers
	timeout time.Duration
	raddr   *net.UDPAddr
	// conns holds each source socket's current connection (replaced when
	// the kernel aborts it); stopping is set when the run ends, before the
	// receivers' read deadlines are.
	conns      []atomic.Pointer[net.UDPConn]
	reconnects []int // per socket; under mu
	stopping   atomic.Bool
}

// reconnect replaces socket i's connection old, which the kernel aborted,
// with a new one (unless another caller did already, or the run is
// ending, or the socket was connected again maxReconnects times). The
// old connection is closed: its receiver goes on with the new one.
func (l *load) reconnect(i int, old *net.UDPConn, cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[i].Load() != old || l.stopping.Load() || l.reconnects[i] >= maxReconnects {
		return
	}
	nc, err := net.DialUDP("udp", nil, l.raddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dnsload: socket %d aborted (%v), connecting again: %v\n", i, cause, err)
		return
	}
	l.reconnects[i]++
	l.res.Reconnects++
	l.conns[i].Store(nc)
	_ = old.Close()
}

// aborted says whether err is the kernel's abort of a connected socket:
// ECONNABORTED, or EDESTADDRREQ from a send on the socket it disconnected.
func aborted(err error) bool {
	return errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EDESTADDRREQ)
}

func main() {
	server := flag.String("server", "169.254.20.10:53", "DNS server (ip:port)")
	names := flag.String("names", "", "comma-separated names to ask (required)")
	qps := flag.Int("qps", 400, "queries a second, 1 to 10000")
	dur := flag.Duration("for", 30*time.Second, "how long to send, up to 1h")
	timeout := flag.Duration("timeout", 2*time.Second, "how long a query may wait for its answer")
	sockets := flag.Int("sockets", 4, "source sockets, 1 to 16")
	qtypes := flag.String("types", "A,AAAA", "comma-separated query types asked of each name in turn")
	flag.Parse()
	var types []uint16
	for _, t := range strings.Split(*qtypes, ",") {
		qt, ok := dns.StringToType[strings.ToUpper(t)]
		if !ok {
			fmt.Fprintf(os.Stderr, "dnsload: -types: unknown type %q\n", t)
			os.Exit(2)
		}
		types = append(types, qt)
	}
	if err := run(*server, *names, types, *qps, *dur, *timeout, *sockets); err != nil {
		fmt.Fprintln(os.Stderr, "dnsload:", err)
		os.Exit(1)
	}
}

func run(server, names string, types []uint16, qps int, dur, timeout time.Duration, sockets int) error {
	list := strings.Split(names, ",")
	switch {
	case names == "" || len(list) > 1000:
		return errors.New("-names: want 1 to 1000 names")
	case qps < 1 || qps > 10000:
		return fmt.Errorf("-qps %d: want 1 to 10000", qps)
	case dur <= 0 || dur > time.Hour:
		return fmt.Errorf("-for %s: want up to 1h", dur)
	case sockets < 1 || sockets > 16:
		return fmt.Errorf("-sockets %d: want 1 to 16", sockets)
	case timeout <= 0 || timeout > time.Minute:
		return fmt.Errorf("-timeout %s: want up to 1m", timeout)
	}
	raddr, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		return fmt.Errorf("-server %q: %w", server, err)
	}
	l := &load{timeout: timeout, raddr: raddr, res: report.Result{QPSAsked: qps, SecondsAsked: dur.Seconds()}}
	l.conns = make([]atomic.Pointer[net.UDPConn], sockets)
	l.reconnects = make([]int, sockets)
	for i := range l.conns {
		c, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			return err
		}
		l.conns[i].Store(c)
	}
	defer func() {
		for i := range l.conns {
			_ = l.conns[i].Load().Close()
		}
	}()
	l.start = time.Now()
	l.res.PerSecond = make([][2]int, int(dur/time.Second)+1)
	for range l.conns {
		l.inq = append(l.inq, map[uint16]pending{})
	}
	var wg sync.WaitGroup
	for i := range l.conns {
		wg.Add(1)
		go func() { defer wg.Done(); l.receive(i) }()
	}
	interval := time.Second / time.Duration(qps)
	next := l.start
	end := l.start.Add(dur)
	var id uint16
	for n := 0; ; n++ {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if d := next.Sub(now); d > 0 {
			time.Sleep(d)
		}
		next = next.Add(interval)
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(list[(n/len(types))%len(list)]), types[n%len(types)])
		id++
		m.Id = id
		b, err := m.Pack()
		if err != nil {
			return err
		}
		si := n % len(l.conns)
		l.mu.Lock()
		sent := time.Now()
		sec := int(sent.Sub(l.start) / time.Second)
		if sec >= len(l.res.PerSecond) {
			sec = len(l.res.PerSecond) - 1
		}
		l.inq[si][id] = pending{sent: sent, sec: sec}
		l.res.Sent++
		l.mu.Unlock()
		// A send that fails (a refused port: ECONNREFUSED) leaves the
		// query to time out: it got no answer.
		c := l.conns[si].Load()
		if _, err := c.Write(b); aborted(err) {
			l.reconnect(si, c, err)
		}
		if n%64 == 0 {
			l.expire(time.Now())
		}
	}
	time.Sleep(timeout)
	stop := time.Now()
	l.mu.Lock() // no reconnect from here on
	l.stopping.Store(true)
	for i := range l.conns {
		_ = l.conns[i].Load().SetReadDeadline(time.Unix(1, 0))
	}
	l.mu.Unlock()
	wg.Wait()
	l.expire(stop.Add(timeout))
	return json.NewEncoder(os.Stdout).Encode(l.finish(end))
}

// receive matches answers on socket i to their queries until its read
// deadline passes; it connects the socket again when the kernel aborts it.
func (l *load) receive(i int) {
	buf := make([]byte, 4096)
	for {
		c := l.conns[i].Load()
		n, err := c.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				if l.conns[i].Load() != c {
					continue // replaced (reconnect): read the new one
				}
				return
			}
			if aborted(err) {
				// The socket is disconnected now (a send fails until it
				// is replaced): connect a new one, as a client must.
				l.reconnect(i, c, err)
			}
			continue // ECONNREFUSED from an ICMP error: the query times out
		}
		at := time.Now()
		m := new(dns.Msg)
		if m.Unpack(buf[:n]) != nil {
			continue
		}
		l.mu.Lock()
		p, ok := l.inq[i][m.Id]
		if ok && at.Sub(p.sent) <= l.timeout {
			delete(l.inq[i], m.Id)
			switch {
			case m.Rcode != dns.RcodeSuccess:
				l.count(badRcode, p.sec)
			case !hasAddress(m):
				l.count(emptyAnswer, p.sec)
			default:
				l.count(okAnswer, p.sec)
				l.lat = append(l.lat, at.Sub(p.sent))
				l.goodAt = append(l.goodAt, at.Sub(l.start))
			}
		}
		l.mu.Unlock()
	}
}

func hasAddress(m *dns.Msg) bool {
	for _, rr := range m.Answer {
		switch rr.(type) {
		case *dns.A, *dns.AAAA:
			return true
		}
	}
	return false
}

// expire counts the queries older than the timeout at now as timed out.
func (l *load) expire(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range l.inq {
		for id, p := range q {
			if now.Sub(p.sent) > l.timeout {
				delete(q, id)
				l.count(timedOut, p.sec)
			}
		}
	}
}

func (l *load) count(o outcome, sec int) {
	switch o {
	case okAnswer:
		l.res.OK++
		l.res.PerSecond[sec][0]++
		return
	case timedOut:
		l.res.Timeouts++
	case badRcode:
		l.res.BadRcode++
	case emptyAnswer:
		l.res.Empty++
	}
	l.res.Failed++
	l.res.PerSecond[sec][1]++
}

func (l *load) finish(end time.Time) report.Result {
	r := l.res
	if r.Sent > 0 {
		r.FailPct = 100 * float64(r.Failed) / float64(r.Sent)
	}
	good := append([]time.Duration(nil), l.goodAt...)
	slices.Sort(good)
	prev := time.Duration(0)
	for _, g := range append(good, end.Sub(l.start)) {
		if gap := g - prev; gap.Seconds()*1000 > r.LongestGap {
			r.LongestGap, r.GapAt = float64(gap.Microseconds())/1000, prev.Seconds()
		}
		prev = g
	}
	slices.Sort(l.lat)
	if n := len(l.lat); n > 0 {
		r.P50 = float64(l.lat[n/2].Microseconds()) / 1000
		r.P99 = float64(l.lat[n*99/100].Microseconds()) / 1000
	}
	return r
}
