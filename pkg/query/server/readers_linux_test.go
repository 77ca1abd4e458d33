//go:build linux

package server

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// startHooked is start with hook called before the readers run.
func startHooked(t *testing.T, cfg Config, hook func(s *Server)) (*Server, string) {
	t.Helper()
	return startWith(t, "127.0.0.1:0", cfg, hook)
}

// answeredWithin asks addr until an answer comes or d passes.
func answeredWithin(addr string, d time.Duration) error {
	c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		r, _, err := c.Exchange(q(fmt.Sprintf("r%d.example.", i), dns.TypeA), addr)
		if err == nil && len(r.Answer) == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s within %v: %v", addr, d, err)
		}
	}
}

// socketsOnPort counts the UDP sockets bound to port in this network
// namespace.
func socketsOnPort(t *testing.T, port uint16) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	suffix := fmt.Sprintf(":%04X", port)
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 2 && strings.HasSuffix(f[1], suffix) {
			n++
		}
	}
	return n
}

// socketInode is the inode of the socket behind fd.
func socketInode(t *testing.T, fd int) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || !strings.HasPrefix(l, "socket:") {
		t.Fatalf("fd %d: %q %v", fd, l, err)
	}
	return l
}

func waitStats(t *testing.T, s *Server, what string, ok func(Stats) bool) {
	t.Helper()
	dnstest.Eventually(t, 5*time.Second, what, func() error {
		if st := s.Stats(); !ok(st) {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// TestReaderRestartsOnNewSocket: a thread reader whose socket fails is
// restarted on a new socket bound to the same address; the failed one is
// closed (it leaves the SO_REUSEPORT group), and queries are answered
// again. It used to return for good, its socket left in the group.
func TestReaderRestartsOnNewSocket(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EINVAL, unix.ECONNREFUSED} {
		t.Run(errno.Error(), func(t *testing.T) {
			var fire atomic.Bool
			s, addr := startHooked(t, Config{Handler: &fakeResolver{}}, func(s *Server) {
				s.recvFault = func() unix.Errno {
					if fire.CompareAndSwap(true, false) {
						return errno
					}
					return 0
				}
			})
			if !s.udp[0].thread() {
				t.Fatal("not a thread reader")
			}
			ino := socketInode(t, s.udp[0].descriptor())
			if st := s.Stats(); st.UDPReadersLive != 1 || st.UDPReaderRestarts != 0 {
				t.Fatalf("stats at start: %+v", st)
			}
			fire.Store(true)
			if err := answeredWithin(addr, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			waitStats(t, s, "restarted", func(st Stats) bool { return st.UDPReaderRestarts == 1 && st.UDPReadersLive == 1 })
			replaced := socketInode(t, s.udp[0].descriptor()) != ino
			if want := !transientErrno(errno); replaced != want {
				t.Errorf("socket replaced: %v, want %v", replaced, want)
			}
			if n := socketsOnPort(t, s.Addrs()[0].Port()); n != 1 {
				t.Errorf("%d UDP sockets on the port, want 1 (the failed one closed)", n)
			}
			if err := s.ReadersHealthy(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestReaderSocketDestroyed: `ss -K` (SOCK_DESTROY) aborts the socket
// under a reader: recvmmsg fails with ECONNABORTED and the socket is
// unhashed. The reader used to stop, leaving the address without a
// reader; now a new socket serves it within the backoff.
func TestReaderSocketDestroyed(t *testing.T) {
	// A missing prerequisite fails the test, as in the integration suite: a
	// skip would let a run that tested nothing end "ok". scripts/test.sh
	// runs the unit tests as root with iproute2 installed.
	if os.Geteuid() != 0 {
		t.Fatal("prerequisite missing: root, for ss -K (scripts/test.sh runs the tests as root)")
	}
	ss, err := exec.LookPath("ss")
	if err != nil {
		t.Fatal("prerequisite missing: ss (iproute2; scripts/deps.sh installs it)")
	}
	for _, readers := range []string{"threads", "poller"} {
		t.Run(readers, func(t *testing.T) {
			s, addr := start(t, Config{Handler: &fakeResolver{}, UDPReaders: readers})
			if err := answeredWithin(addr, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			port := s.Addrs()[0].Port()
			out, err := exec.Command(ss, "-K", "-a", "-u", "src", "127.0.0.1", "sport", "=", fmt.Sprintf(":%d", port)).CombinedOutput()
			if err != nil || !strings.Contains(string(out), fmt.Sprintf(":%d", port)) {
				t.Fatalf("prerequisite missing? ss -K did not destroy the socket (kernel without CONFIG_INET_DIAG_DESTROY?): %v %s", err, out)
			}
			if err := answeredWithin(addr, 3*time.Second); err != nil {
				t.Fatalf("after ss -K: %v (stats %+v)", err, s.Stats())
			}
			if st := s.Stats(); st.UDPReaderRestarts != 1 || st.UDPReadersLive != 1 {
				t.Errorf("stats %+v, want 1 restart and 1 live reader", st)
			}
		})
	}
}

// TestReaderNotRestartable: while a failed reader's socket cannot be
// replaced, ReadersHealthy fails (after readerDeadAfter attempts) and the
// supervisor keeps trying; once it can, the reader serves again and the
// check passes.
func TestReaderNotRestartable(t *testing.T) {
	var fire, refuse atomic.Bool
	s, addr := startHooked(t, Config{Handler: &fakeResolver{}}, func(s *Server) {
		s.recvFault = func() unix.Errno {
			if fire.CompareAndSwap(true, false) {
				return unix.ENOTSOCK
			}
			return 0
		}
		s.bindUDP = func(u *udpSock) (*udpSock, error) {
			if refuse.Load() {
				return nil, errors.New("address not available")
			}
			return s.bindUDPLike(u)
		}
	})
	refuse.Store(true)
	fire.Store(true)
	_ = answeredWithin(addr, 200*time.Millisecond) // the query that trips the fault
	dnstest.Eventually(t, 5*time.Second, "ReadersHealthy to report the readers down", func() error {
		if s.ReadersHealthy() == nil {
			return fmt.Errorf("ReadersHealthy still nil; stats %+v", s.Stats())
		}
		return nil
	})
	if st := s.Stats(); st.UDPReadersLive != 0 {
		t.Errorf("live readers %d while down", st.UDPReadersLive)
	}
	refuse.Store(false)
	if err := answeredWithin(addr, 2*readerBackoffMax); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadersHealthy(); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}
