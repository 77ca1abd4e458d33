//go:build linux

package server

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/pkg/dnswire"
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

const (
	// threadBatch is how many datagrams one recvmmsg may return.
	threadBatch = 16
	// threadBufSize bounds a query read by a thread reader: real queries
	// are far smaller; a larger datagram is cut and answered FORMERR.
	threadBufSize = 4096
	// threadWake is how often a blocked reader looks at the closing flag.
	threadWake = 200 * time.Millisecond
)

// errNoThreads: the socket cannot be read by a thread reader; the poller
// reader is used instead.
var errNoThreads = errors.New("server: thread reader unavailable")

// startThreadReader turns uc's socket blocking (with a receive timeout so
// the reader notices Shutdown) and starts its reader.
func (s *Server) startThreadReader(uc *net.UDPConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return errors.Join(errNoThreads, err)
	}
	var fd int
	var serr error
	if err := rc.Control(func(f uintptr) {
		fd = int(f)
		tv := unix.NsecToTimeval(int64(threadWake))
		if serr = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); serr != nil {
			return
		}
		serr = unix.SetNonblock(fd, false)
	}); err != nil || serr != nil {
		return errors.Join(errNoThreads, err, serr)
	}
	s.threads.Add(1)
	go s.readThread(uc, fd)
	return nil
}

// threadBatchState is a reader's preallocated batch: buffers, addresses,
// headers and requests, reused for every batch so a query allocates nothing.
type threadBatchState struct {
	bufs  [threadBatch][threadBufSize]byte
	addrs [threadBatch]unix.RawSockaddrInet6
	iovs  [threadBatch]unix.Iovec
	msgs  [threadBatch]unix.Mmsghdr
	reqs  [threadBatch]request
	outs  [threadBatch][]byte
	siovs [threadBatch]unix.Iovec
	smsgs [threadBatch]unix.Mmsghdr
}

func (s *Server) readThread(uc *net.UDPConn, fd int) {
	defer s.threads.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := new(threadBatchState)
	for i := range b.msgs {
		b.iovs[i] = unix.Iovec{Base: &b.bufs[i][0]}
		b.iovs[i].SetLen(threadBufSize)
		b.msgs[i].Hdr.Iov = &b.iovs[i]
		b.msgs[i].Hdr.Iovlen = 1
		b.outs[i] = make([]byte, 0, 4096)
	}
	for !s.closing.Load() {
		for i := range b.msgs {
			b.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.addrs[i]))
			b.msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
			b.msgs[i].Hdr.Flags = 0
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.msgs[0])),
			threadBatch, unix.MSG_WAITFORONE, 0, 0)
		if errno != 0 {
			if errno == unix.EAGAIN || errno == unix.EINTR {
				continue
			}
			if !s.closing.Load() {
				s.log.Warn("recvmmsg failed; thread reader stops", "err", errno)
			}
			return
		}
		sends := 0
		now := time.Now()
		for i := 0; i < int(n); i++ {
			addr, ok := sockaddrToAddrPort(&b.addrs[i], b.msgs[i].Hdr.Namelen)
			if !ok {
				continue
			}
			r := &b.reqs[i]
			*r = request{proto: "udp", client: addr.Addr().Unmap(), start: now, raw: b.bufs[i][:b.msgs[i].Len]}
			if b.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				// Cut short: answer from the header alone.
				r.raw = r.raw[:dnswire.HeaderLen]
			}
			out, v := s.fast(b.outs[i][:0], r)
			switch v {
			case verdictReply:
				b.outs[i] = out
				b.siovs[sends] = unix.Iovec{Base: &out[0]}
				b.siovs[sends].SetLen(len(out))
				b.smsgs[sends].Hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.addrs[i])), Namelen: b.msgs[i].Hdr.Namelen,
					Iov: &b.siovs[sends], Iovlen: 1}
				sends++
			case verdictSlow:
				s.goSlowUDP(uc, r, addr, b.outs[i][:0])
			}
		}
		if sends > 0 {
			s.sendBatch(fd, b.smsgs[:sends])
		}
	}
}

// sendBatch sends every reply with sendmmsg, retrying the remainder after a
// partial send; errors are per datagram and not fatal (a client gone away).
func (s *Server) sendBatch(fd int, msgs []unix.Mmsghdr) {
	for len(msgs) > 0 {
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
		if errno == unix.EINTR {
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
