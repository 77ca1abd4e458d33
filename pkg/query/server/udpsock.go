package server

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// udpSock is one bound UDP socket. A socket read through the Go netpoller
// is a *net.UDPConn. A socket read by a thread reader is a raw blocking
// descriptor taken out of the netpoller (udpthread_linux.go): left in it,
// every datagram in and out would also wake the poller's thread for
// nothing. A reader that fails gets a new socket bound to the same address
// (readers.go: swap), so both are replaceable.
type udpSock struct {
	local netip.AddrPort
	uc    atomic.Pointer[net.UDPConn] // poller sockets; nil for thread sockets
	fd    int                         // thread sockets (under mu); -1 for poller ones
	// family is the thread socket's address family (AF_INET6 sockets
	// address IPv4 clients by their mapped addresses).
	family int

	// mu orders writes from goroutines (slow answers) against close, so
	// that no answer goes out through a closed descriptor whose number
	// the process has reused.
	mu     sync.RWMutex
	closed bool

	// listener is the index in Config.Listen of the address it serves;
	// index its place among that address's sockets.
	listener, index int
}

func newPollerSock(uc *net.UDPConn) *udpSock {
	u := &udpSock{local: uc.LocalAddr().(*net.UDPAddr).AddrPort(), fd: -1}
	u.uc.Store(uc)
	return u
}

// thread reports whether the socket is read by a thread reader; it never
// changes for a socket.
func (u *udpSock) thread() bool { return u.uc.Load() == nil }

// descriptor is the thread socket's current descriptor.
func (u *udpSock) descriptor() int {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.fd
}

// writeTo sends one datagram; net.ErrClosed once the socket is closed.
func (u *udpSock) writeTo(b []byte, addr netip.AddrPort) error {
	if uc := u.uc.Load(); uc != nil {
		_, err := uc.WriteToUDPAddrPort(b, addr)
		return err
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	if u.closed || u.fd < 0 {
		return net.ErrClosed
	}
	return fdSendTo(u.fd, u.family, b, addr)
}

// close closes the socket once.
func (u *udpSock) close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil
	}
	u.closed = true
	if uc := u.uc.Load(); uc != nil {
		return uc.Close()
	}
	if u.fd < 0 { // detached
		return nil
	}
	return fdClose(u.fd)
}

// detach closes the socket for a reader whose socket failed, so that it
// leaves the SO_REUSEPORT group at once and the kernel stops handing it
// datagrams nobody reads; writes fail until attach. closeOld is false when
// the descriptor is already gone (its number may belong to another file by
// now).
func (u *udpSock) detach(closeOld bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	if uc := u.uc.Load(); uc != nil {
		if closeOld {
			_ = uc.Close()
		}
		return
	}
	if closeOld && u.fd >= 0 {
		_ = fdClose(u.fd)
	}
	u.fd = -1
}

// attach makes fresh (a new socket of the same kind, bound to the same
// address) this socket's after detach. False when u was closed meanwhile
// (fresh is closed then).
func (u *udpSock) attach(fresh *udpSock) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		_ = fresh.close()
		return false
	}
	if uc := fresh.uc.Load(); uc != nil {
		u.uc.Store(uc)
		return true
	}
	u.fd, u.family = fresh.fd, fresh.family
	return true
}

// udpSocket wraps a bound socket: taken out of the netpoller for a thread
// reader unless the poller was asked for (or the socket cannot be).
func (s *Server) udpSocket(uc *net.UDPConn) *udpSock {
	if s.cfg.UDPReaders != "poller" {
		u, err := threadSocket(uc, s.cfg.threadWake)
		if err == nil {
			return u
		}
		s.log.Warn("thread reader unavailable, using the poller", "err", err)
	}
	return newPollerSock(uc)
}

// connectSelf connects the socket to its own address (see Drain).
func (u *udpSock) connectSelf() error {
	uc := u.uc.Load()
	if uc == nil {
		u.mu.RLock()
		defer u.mu.RUnlock()
		if u.closed || u.fd < 0 {
			return net.ErrClosed
		}
		return unix.Connect(u.fd, sockaddr(u.local))
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sockaddr(u.local)) }); err != nil {
		return err
	}
	return cerr
}
