package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// checkHang kills a serving process that has stopped answering: stopped
// (SIGSTOP, a tracer) for HangTimeout, or the same datagram at the head
// of a UDP socket's queue for HangTimeout (its reader no longer reads,
// though the process runs: a deadlock, a reader stuck). Both are read
// from outside the process (/proc, a peek at the queue): no heartbeat
// wakes an idle agent, and a process that hangs with no query waiting
// hurts nobody until one arrives. Queries queued on the sockets stay
// there for the next serving process.
func (s *supervisor) checkHang() {
	c := s.cur
	if c == nil || !c.serving || c.draining || c.hung != "" || s.stopping {
		clear(s.heads)
		return
	}
	now := s.cfg.now()
	switch {
	case !procStopped(c.pid):
		c.stoppedSince = time.Time{}
	case c.stoppedSince.IsZero():
		c.stoppedSince = now
	default:
		if d := now.Sub(c.stoppedSince); d >= s.cfg.HangTimeout {
			s.kill(c, fmt.Sprintf("stopped (SIGSTOP or a tracer) for %s", d.Round(time.Millisecond)))
			return
		}
	}
	for key, fd := range s.socks {
		if !strings.HasPrefix(key, opUDP+" ") {
			continue
		}
		k, ok := peekHead(fd)
		if !ok {
			delete(s.heads, key)
			continue
		}
		h, seen := s.heads[key]
		if !seen || h.key != k {
			s.heads[key] = head{key: k, since: now}
			continue
		}
		if d := now.Sub(h.since); d >= s.cfg.HangTimeout {
			s.kill(c, fmt.Sprintf("a query waited %s unread on socket %q", d.Round(time.Millisecond), key))
			return
		}
	}
}

// procStopped reports whether the process is in the stopped state (T:
// a stop signal, t: stopped by a tracer).
func procStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

func (s *supervisor) kill(c *child, why string) {
	c.hung = why
	s.log.Error("serving process hung: killing it and starting another on the same sockets", "pid", c.pid, "why", why)
	if err := unix.Kill(c.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		s.log.Error("killing the hung serving process", "pid", c.pid, "err", err)
	}
}

// peekHead names the datagram at the head of fd's queue (its source, size
// and first bytes, which hold the DNS ID) without taking it; false when
// the queue is empty. MSG_DONTWAIT: the serving process may have made the
// shared open file blocking.
func peekHead(fd int) (string, bool) {
	var buf [16]byte
	n, from, err := unix.Recvfrom(fd, buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	if err != nil {
		return "", false
	}
	var src string
	switch a := from.(type) {
	case *unix.SockaddrInet4:
		src = fmt.Sprintf("%v:%d", a.Addr, a.Port)
	case *unix.SockaddrInet6:
		src = fmt.Sprintf("%v:%d", a.Addr, a.Port)
	}
	return fmt.Sprintf("%s %d %x", src, n, buf[:min(n, len(buf))]), true
}
