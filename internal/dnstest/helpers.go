package dnstest

// Helpers the tests of many packages share: waiting for a condition,
// records and messages, free ports, a buffer safe to share, a ConfigMap
// volume on disk, a Run until the test ends.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Poll intervals of WaitFor and Eventually.
const (
	waitForPoll    = 5 * time.Millisecond
	eventuallyPoll = 50 * time.Millisecond
)

// WaitFor polls cond until it holds and fails the test (t.Fatalf, naming
// what) when it does not within timeout. cond is asked first at once and
// last at the deadline: the failure follows a false answer given at the
// end of the wait, never a sleep. Use it from the test's goroutine, for
// what happens in the background, not for the passing of time a test
// means to measure.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := poll(timeout, waitForPoll, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Eventually is WaitFor for a cond that says why it does not hold yet: it
// polls cond every 50 ms (it may cost a query or a request) until it
// returns nil, and fails the test with the last error cond returned when
// that does not happen within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll(timeout, eventuallyPoll, cond); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
	}
}

var errNotYet = errors.New("not yet")

// poll calls cond every interval until it returns nil or timeout passes,
// and returns its last error. The last call is made at the deadline.
func poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		time.Sleep(min(interval, left))
	}
}

// MustRR parses a record in presentation form. It panics when the record
// does not parse, a bug in the test: it takes no testing.TB so that it may
// stand in a package-level var and in a server's handler goroutine.
func MustRR(s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(fmt.Sprintf("dnstest.MustRR: %q: %v", s, err))
	}
	return rr
}

// MustRRf is MustRR of fmt.Sprintf(format, args...).
func MustRRf(format string, args ...any) dns.RR {
	return MustRR(fmt.Sprintf(format, args...))
}

// Exchange sends m to addr over network ("udp" or "tcp") and returns the
// reply, failing the test (t.Fatalf) when none comes within 3 s. UDP
// replies are read whole, up to 65535 octets, whatever m's EDNS0 size: the
// test sees what the server sent. It checks nothing of the reply.
func Exchange(t testing.TB, addr, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 3 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		name := "(no question)"
		if len(m.Question) > 0 {
			name = m.Question[0].Name
		}
		t.Fatalf("%s exchange %s: %v", network, name, err)
	}
	return r
}

// Query asks addr one question (name, qtype, class IN, no EDNS0) over
// network as a stub resolver does, waiting up to 2 s, and returns the
// reply, or an error when none came or the reply is not to the question
// asked (ID, question section). It fails no test: it may run on any
// goroutine and inside Eventually.
func Query(addr, network, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	cl := &dns.Client{Net: network, Timeout: 2 * time.Second}
	r, _, err := cl.Exchange(m, addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s over %s: %w", name, dns.TypeToString[qtype], network, err)
	}
	if r.Id != m.Id || len(r.Question) != 1 || r.Question[0].Name != name || r.Question[0].Qtype != qtype {
		return nil, fmt.Errorf("%s %s over %s: reply does not match the query: %v", name, dns.TypeToString[qtype], network, r.Question)
	}
	return r, nil
}

// ExchangeRawUDP sends the datagram b to addr and returns the first
// datagram that comes back within 300 ms, or nil when none does (for
// queries a server should drop).
func ExchangeRawUDP(t testing.TB, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// FreePort returns a port of 127.0.0.1 free for both UDP and TCP when it
// looked (a server under test binds both); nothing holds it after.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		pc.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no port of 127.0.0.1 free for both UDP and TCP")
	return 0
}

// FreeAddrPort is 127.0.0.1 and FreePort.
func FreeAddrPort(t testing.TB) netip.AddrPort {
	t.Helper()
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(FreePort(t)))
}

// BigConfig is the configuration head padded with comment lines of 100
// bytes to at least n bytes.
func BigConfig(head string, n int) string {
	var b strings.Builder
	b.WriteString(head)
	line := "# " + strings.Repeat("x", 98) + "\n"
	for b.Len() < n {
		b.WriteString(line)
	}
	return b.String()
}

// SyncBuffer is a bytes.Buffer that a writer (a logger, a process) and the
// test reading it may share. The zero value is ready.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// MountConfigMap lays files (key: content) out in dir as kubelet mounts a
// ConfigMap volume, and can be called again to update it: the data goes
// to a fresh directory, ..data is swapped to it by a rename, then each key
// not yet in dir is made a link through ..data (so that a link never
// points at a file not yet written). A key dropped from files keeps its
// link, which then dangles.
func MountConfigMap(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range files {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// RunUntilCleanup runs run on a goroutine with a context that is
// cancelled when the test ends; the cleanup then waits for run to return
// and reports an error it returns (t.Errorf, naming what).
func RunUntilCleanup(t testing.TB, what string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}
