//go:build linux

package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// Thread readers: each UDP socket gets a reader locked to its own OS thread
// that blocks in recvmmsg(2) on the socket itself, answers what it can on
// the spot and sends the batch of replies with one sendmmsg(2).
//
// Why: through the Go netpoller every packet at moderate load costs a park,
// an epoll wake-up and scheduler work on other threads; a thread that
// sleeps in the kernel is woken by the packet itself. That is where a Go
// server loses CPU per query against dnsmasq (bench/RESULTS.md has the
// figures). Under load, one system call returns up to threadBatch packets.
//
// Holding the P: a reader that blocks through syscall.Syscall leaves its P
// in the syscall state, and the runtime's monitor thread takes it back
// whenever the wait outlasts a tick, then polls every 20 µs again; at a
// few tens of thousands of packets a second that monitor, the hand-off
// and the re-acquire on wake-up were about a fifth of the agent's CPU and
// most of its p99. So when GOMAXPROCS leaves a P for the rest of the
// agent, a reader blocks in a raw system call and keeps its P: the runtime
// sees a running goroutine, takes nothing back and starts no thread for
// it. The sockets carry receive and send timeouts, so a signal interrupts
// the call (socket calls with a timeout are never restarted, signal(7)):
// the runtime's preemption signal (a stop-the-world, or a goroutine seen
// running for 10 ms) returns EINTR. The reader then makes its next wait the
// ordinary way, which gives the P up, until a datagram arrives: so a
// stop-the-world gets the P at once, and an idle reader costs nothing (it
// would otherwise be signalled every 10 ms). Without a spare P readers
// always block the ordinary way.

const (
	// threadBatch is how many datagrams one recvmmsg may return.
	threadBatch = 16
	// threadBufSize bounds a query read by a thread reader
	// (maxQuerySize): a larger datagram is cut and answered FORMERR.
	threadBufSize = maxQuerySize
	// threadWake is how often a blocked reader looks at the closing flag
	// (the default of Config.threadWake).
	threadWake = 200 * time.Millisecond
)

// errNoThreads: the socket cannot be read by a thread reader; the poller
// reader is used instead.
var errNoThreads = errors.New("server: thread reader unavailable")

// threadSocket takes uc's socket out of the Go netpoller for a thread
// reader: a duplicate descriptor, blocking, with receive and send timeouts
// (so a reader notices Shutdown, and a signal interrupts its calls); then
// uc is closed, which removes the socket from the poller and closes the
// original descriptor. The socket stays bound through the duplicate. On
// error uc is left as it was. wake is the timeout (threadWake).
func threadSocket(uc *net.UDPConn, wake time.Duration) (*udpSock, error) {
	local := uc.LocalAddr().(*net.UDPAddr).AddrPort()
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, errors.Join(errNoThreads, err)
	}
	fd, family := -1, 0
	var serr error
	if err := rc.Control(func(f uintptr) {
		if fd, serr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0); serr != nil {
			return
		}
		tv := unix.NsecToTimeval(int64(wake))
		if serr = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); serr != nil {
			return
		}
		if serr = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); serr != nil {
			return
		}
		if family, serr = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); serr != nil {
			return
		}
		// O_NONBLOCK belongs to the open file, which the duplicate shares:
		// uc is closed below and never used again.
		serr = unix.SetNonblock(fd, false)
	}); err != nil || serr != nil {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return nil, errors.Join(errNoThreads, err, serr)
	}
	if err := uc.Close(); err != nil {
		_ = unix.Close(fd)
		return nil, errors.Join(errNoThreads, fmt.Errorf("closing the poller's descriptor: %w", err))
	}
	return &udpSock{local: local, fd: fd, family: family}, nil
}

// startThreadReader starts u's reader on its own OS thread, holding a P
// when one can be spared, under keepReading, which restarts it
// (readers.go).
func (s *Server) startThreadReader(u *udpSock) {
	holdP := tryHoldP()
	if holdP {
		s.heldPs.Add(1)
	}
	s.threads.Add(1)
	s.readersLive.Add(1)
	go func() {
		defer s.threads.Done()
		if holdP {
			defer func() {
				heldPs.Add(-1)
				s.heldPs.Add(-1)
			}()
		}
		b := newThreadBatch()
		s.keepReading(u, func() error { return s.readThread(u, holdP, b) })
	}()
}

// fdSendTo sends b to addr from a socket of the family: an IPv6 socket
// takes an IPv4 client as its mapped address.
func fdSendTo(fd int, family int, b []byte, addr netip.AddrPort) error {
	if family == unix.AF_INET6 {
		return unix.Sendto(fd, b, 0, &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()})
	}
	return unix.Sendto(fd, b, 0, sockaddr(addr))
}

func fdClose(fd int) error { return unix.Close(fd) }

var asyncPreemptOff = strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=1")

// heldPs counts the thread readers of every Server in the process that
// block holding their P.
var heldPs atomic.Int32

// tryHoldP reserves a P for a reader when at least one stays for the rest
// of the process. Not with asynchronous preemption off: the runtime would
// then not signal a blocked reader, and a stop-the-world would wait for
// its next datagram or timeout.
func tryHoldP() bool {
	if asyncPreemptOff {
		return false
	}
	for {
		n := heldPs.Load()
		if int(n)+1 >= runtime.GOMAXPROCS(0) {
			return false
		}
		if heldPs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// syscall6 makes a system call for a reader: raw (keeping the P), or
// through the runtime's syscall entry.
func syscall6(raw bool, trap, a1, a2, a3, a4 uintptr) (uintptr, unix.Errno) {
	if raw {
		n, _, errno := unix.RawSyscall6(trap, a1, a2, a3, a4, 0, 0)
		return n, errno
	}
	n, _, errno := unix.Syscall6(trap, a1, a2, a3, a4, 0, 0)
	return n, errno
}

// threadBatchState is a reader's preallocated batch: buffers, addresses,
// headers and requests, reused for every batch so a query allocates nothing.
type threadBatchState struct {
	bufs  [threadBatch][threadBufSize]byte
	addrs [threadBatch]unix.RawSockaddrInet6
	iovs  [threadBatch]unix.Iovec
	msgs  [threadBatch]unix.Mmsghdr
	reqs  [threadBatch]Request
	outs  [threadBatch][]byte
	siovs [threadBatch]unix.Iovec
	smsgs [threadBatch]unix.Mmsghdr
}

// newThreadBatch returns a reader's batch state, wired up.
func newThreadBatch() *threadBatchState {
	b := new(threadBatchState)
	for i := range b.msgs {
		b.iovs[i] = unix.Iovec{Base: &b.bufs[i][0]}
		b.iovs[i].SetLen(threadBufSize)
		b.msgs[i].Hdr.Iov = &b.iovs[i]
		b.msgs[i].Hdr.Iovlen = 1
		b.outs[i] = make([]byte, 0, 4096)
	}
	return b
}

// readThread reads u until Shutdown (nil) or until the socket fails: the
// error is then a *readerError for keepReading (readers.go).
func (s *Server) readThread(u *udpSock, holdP bool, b *threadBatchState) error {
	fd := u.descriptor()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// raw: the next wait keeps the P (see the top of this file).
	raw := holdP
	for !s.closing.Load() {
		for i := range b.msgs {
			b.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.addrs[i]))
			b.msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
			b.msgs[i].Hdr.Flags = 0
		}
		n, errno := syscall6(raw, unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.msgs[0])),
			threadBatch, unix.MSG_WAITFORONE)
		if s.recvFault != nil && errno == 0 {
			if f := s.recvFault(); f != 0 {
				n, errno = 0, f
			}
		}
		if errno != 0 {
			if errno == unix.EAGAIN || errno == unix.EINTR {
				// Signalled or idle: wait the ordinary way (the P goes
				// back to the runtime) until traffic comes back.
				if raw {
					if errno == unix.EINTR {
						s.rawSignalled.Add(1)
					} else {
						s.rawTimedOut.Add(1)
					}
				}
				raw = false
				continue
			}
			if s.closing.Load() {
				return nil
			}
			return &readerError{err: fmt.Errorf("recvmmsg: %w", errno), broken: !transientErrno(errno), gone: errno == unix.EBADF}
		}
		if n == 0 {
			// Only a socket shut down for reading returns no datagram
			// from a blocking wait: it would spin here for ever.
			if s.closing.Load() {
				return nil
			}
			return &readerError{err: errors.New("recvmmsg: socket shut down for reading"), broken: true}
		}
		raw = holdP
		sends := 0
		now := time.Now()
		for i := 0; i < int(n); i++ {
			addr, ok := sockaddrToAddrPort(&b.addrs[i], b.msgs[i].Hdr.Namelen)
			if !ok {
				continue
			}
			r := &b.reqs[i]
			pkt := b.bufs[i][:b.msgs[i].Len]
			if b.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				// Cut short: answer from the header alone.
				pkt = pkt[:dnswire.HeaderLen]
			}
			r.Read("udp", u.listener, addr.Addr().Unmap(), now, pkt)
			r.ClientPort = addr.Port()
			out, v := s.h.Answer(b.outs[i][:0], r)
			switch v {
			case Reply:
				b.outs[i] = out
				b.siovs[sends] = unix.Iovec{Base: &out[0]}
				b.siovs[sends].SetLen(len(out))
				b.smsgs[sends].Hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.addrs[i])), Namelen: b.msgs[i].Hdr.Namelen,
					Iov: &b.siovs[sends], Iovlen: 1}
				sends++
			case Wait:
				s.goSlowUDP(u, r, addr, b.outs[i][:0])
			}
		}
		if sends > 0 {
			s.sendBatch(fd, b.smsgs[:sends], raw)
		}
	}
	return nil
}

// sendBatch sends every reply with sendmmsg, retrying the remainder after a
// partial send; errors are per datagram and not fatal (a client gone away).
func (s *Server) sendBatch(fd int, msgs []unix.Mmsghdr, raw bool) {
	for len(msgs) > 0 {
		n, errno := syscall6(raw, unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0)
		if errno == unix.EINTR {
			raw = false // as in readThread: give the P up for the retry
			continue
		}
		if errno != 0 {
			s.log.Debug("sendmmsg failed", "err", errno)
			// Skip the datagram that failed and send the rest.
			msgs = msgs[1:]
			continue
		}
		msgs = msgs[n:]
	}
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6, n uint32) (netip.AddrPort, bool) {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	case unix.AF_INET6:
		if n < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}, false
		}
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port), true
	}
	return netip.AddrPort{}, false
}
