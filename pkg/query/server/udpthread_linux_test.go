//go:build linux

package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestThreadReaderHoldsP: with a P to spare, a reader blocks keeping its P,
// and that stalls nothing: the collector's stop-the-world (which has to
// signal the reader out of recvmmsg) and timers stay prompt while the
// reader sits idle in the kernel, and answers from goroutines go out
// through its socket. The P is given back at shutdown.
//
// What is asserted is counted, not timed: the readers' wake is made long
// (wake below), so a wait the runtime could not interrupt would end at
// its timeout and be counted as one (rawTimedOut), and a collection or a
// timer that waited for it would take the whole wake. Durations are
// reported as figures; they fail only at the wake itself, some hundred
// times what a collection of this test's heap takes on a busy machine.
func TestThreadReaderHoldsP(t *testing.T) {
	const wake = 2 * time.Second
	before := heldPs.Load()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(int(before) + 2))
	res := &fakeResolver{}
	s, addr := start(t, Config{Handler: res, threadWake: wake})
	if st := s.Stats(); st.UDPReaders != 1 || st.UDPReadersHoldingP != 1 {
		t.Fatalf("%d readers, %d holding a P; want 1 and 1", st.UDPReaders, st.UDPReadersHoldingP)
	}
	// The idle reader's first wait holds the P; the runtime sees a
	// goroutine running and signals it out within tens of milliseconds.
	dnstest.WaitFor(t, 5*time.Second, "the idle reader to be signalled or time out", func() bool { return s.rawSignalled.Load()+s.rawTimedOut.Load() > 0 })
	if n := s.rawTimedOut.Load(); n != 0 {
		t.Fatalf("the idle reader's wait holding its P ran to its %v timeout %d time(s): no signal interrupted it", wake, n)
	}
	var gcMax, sleepMax time.Duration
	for i := 0; i < 20; i++ {
		// A datagram puts the reader back into a wait holding its P
		// (it has answered when exchange returns).
		dnstest.Exchange(t, addr, "udp", q(fmt.Sprintf("gc%d.example.", i), dns.TypeA))
		t0 := time.Now()
		runtime.GC()
		d := time.Since(t0)
		gcMax = max(gcMax, d)
		if d >= wake {
			t.Fatalf("GC %d took %v with an idle reader holding its P: it waited for the reader's %v timeout", i, d, wake)
		}
		t0 = time.Now()
		time.Sleep(time.Millisecond)
		d = time.Since(t0)
		sleepMax = max(sleepMax, d)
		if d >= wake {
			t.Fatalf("a 1 ms sleep took %v with an idle reader holding its P (wake %v)", d, wake)
		}
		if n := s.rawTimedOut.Load(); n != 0 {
			t.Fatalf("after GC %d: a wait holding the P ran to its %v timeout %d time(s)", i, wake, n)
		}
	}
	t.Logf("FIGURE thread_reader_held_p gc_max=%v sleep_1ms_max=%v signalled_waits=%d (20 rounds)", gcMax, sleepMax, s.rawSignalled.Load())
	// A miss is answered by a goroutine through the reader's socket.
	calls := res.calls.Load()
	r := dnstest.Exchange(t, addr, "udp", q("miss.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || res.calls.Load() != calls+1 {
		t.Fatalf("answer %v after %d resolutions, want %d", r, res.calls.Load(), calls+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := heldPs.Load(); n != before {
		t.Fatalf("%d Ps held after shutdown, want %d", n, before)
	}
}

// TestThreadReaderFewPs: without a P to spare, readers block the ordinary
// way and still answer.
func TestThreadReaderFewPs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s, addr := start(t, Config{Handler: &fakeResolver{}})
	if st := s.Stats(); st.UDPReadersHoldingP != 0 {
		t.Fatalf("%d readers hold a P with GOMAXPROCS 1", st.UDPReadersHoldingP)
	}
	if r := dnstest.Exchange(t, addr, "udp", q("a.example.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("answer %v", r)
	}
}

// TestThreadSocketLeavesPoller: a thread reader's socket is not in the Go
// netpoller's epoll set (each datagram would wake the poller's thread), a
// poller reader's is.
func TestThreadSocketLeavesPoller(t *testing.T) {
	for _, readers := range []string{"threads", "poller"} {
		t.Run(readers, func(t *testing.T) {
			s, _ := start(t, Config{Handler: &fakeResolver{}, UDPReaders: readers})
			u := s.udp[0]
			fd := u.fd
			if readers == "poller" {
				rc, err := u.uc.Load().SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				_ = rc.Control(func(f uintptr) { fd = int(f) })
			}
			if fd < 0 {
				t.Fatalf("%s socket has no descriptor", readers)
			}
			polled := epollTargets(t)
			if got, want := polled[fd], readers == "poller"; got != want {
				t.Fatalf("%s socket (fd %d) in the poller's epoll set: %v, want %v", readers, fd, got, want)
			}
		})
	}
}

// epollTargets lists the descriptors registered in this process's epoll
// instances (/proc/self/fdinfo of each eventpoll descriptor).
func epollTargets(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	found := false
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		found = true
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "tfd:" {
				if n, err := strconv.Atoi(f[1]); err == nil {
					out[n] = true
				}
			}
		}
	}
	if !found {
		t.Fatal("no epoll descriptor in /proc/self/fd")
	}
	return out
}

// TestThreadSocketIPv6MappedClient: a thread socket bound to [::] answers
// an IPv4 client from a goroutine (sendto with the mapped address).
func TestThreadSocketIPv6MappedClient(t *testing.T) {
	s, _ := startOn(t, "[::]:0", Config{Handler: &fakeResolver{}})
	if !s.udp[0].thread() {
		t.Fatal("socket not read by a thread reader")
	}
	addr := "127.0.0.1:" + strconv.Itoa(int(s.Addrs()[0].Port()))
	for _, name := range []string{"miss.example.", "miss.example."} {
		if r := dnstest.Exchange(t, addr, "udp", q(name, dns.TypeA)); len(r.Answer) != 1 {
			t.Fatalf("answer %v", r)
		}
	}
}
