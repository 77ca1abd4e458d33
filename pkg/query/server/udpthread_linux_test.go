//go:build linux

package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestThreadReaderHoldsP: with a P to spare, a reader blocks keeping its P,
// and that stalls nothing: the collector's stop-the-world (which has to
// signal the reader out of recvmmsg) and timers stay prompt while the
// reader sits idle in the kernel, and answers from goroutines go out
// through its socket. The P is given back at shutdown.
func TestThreadReaderHoldsP(t *testing.T) {
	before := heldPs.Load()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(int(before) + 2))
	res := &fakeResolver{}
	s, addr := start(t, Config{Handler: res})
	if st := s.Stats(); st.UDPReaders != 1 || st.UDPReadersHoldingP != 1 {
		t.Fatalf("%d readers, %d holding a P; want 1 and 1", st.UDPReaders, st.UDPReadersHoldingP)
	}
	// The reader blocks from here on; without the signal the collector
	// would wait threadWake for it.
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		runtime.GC()
		if d := time.Since(t0); d > threadWake/2 {
			t.Fatalf("GC %d took %v with an idle reader holding its P (threadWake %v)", i, d, threadWake)
		}
		t0 = time.Now()
		time.Sleep(time.Millisecond)
		if d := time.Since(t0); d > 50*time.Millisecond {
			t.Fatalf("a 1 ms sleep took %v", d)
		}
	}
	// A miss is answered by a goroutine through the reader's socket.
	r := exchange(t, addr, "udp", q("miss.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || res.calls.Load() != 1 {
		t.Fatalf("answer %v after %d resolutions", r, res.calls.Load())
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
	if r := exchange(t, addr, "udp", q("a.example.", dns.TypeA)); len(r.Answer) != 1 {
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
		if r := exchange(t, addr, "udp", q(name, dns.TypeA)); len(r.Answer) != 1 {
			t.Fatalf("answer %v", r)
		}
	}
}
