package server

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"
)

// udpSock is one bound UDP socket. A socket read through the Go netpoller
// is a *net.UDPConn. A socket read by a thread reader is a raw blocking
// descriptor taken out of the netpoller (udpthread_linux.go): left in it,
// every datagram in and out would also wake the poller's thread for
// nothing.
type udpSock struct {
	local netip.AddrPort
	uc    *net.UDPConn // poller sockets; nil for thread sockets
	fd    int          // thread sockets; -1 for poller ones
	// family is the thread socket's address family (AF_INET6 sockets
	// address IPv4 clients by their mapped addresses).
	family int

	// mu orders writes from goroutines (slow answers) against close, so
	// that no answer goes out through a closed descriptor whose number
	// the process has reused.
	mu     sync.RWMutex
	closed bool

	// listener is the index in Config.Listen of the address it serves.
	listener int
}

func (u *udpSock) thread() bool { return u.fd >= 0 }

// writeTo sends one datagram; net.ErrClosed once the socket is closed.
func (u *udpSock) writeTo(b []byte, addr netip.AddrPort) error {
	if u.uc != nil {
		_, err := u.uc.WriteToUDPAddrPort(b, addr)
		return err
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	if u.closed {
		return net.ErrClosed
	}
	return fdSendTo(u.fd, u.family, b, addr)
}

// close closes the socket once.
func (u *udpSock) close() error {
	if u.uc != nil {
		return u.uc.Close()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil
	}
	u.closed = true
	return fdClose(u.fd)
}

// udpSocket wraps a bound socket: taken out of the netpoller for a thread
// reader unless the poller was asked for (or the socket cannot be).
func (s *Server) udpSocket(uc *net.UDPConn) *udpSock {
	if s.cfg.UDPReaders != "poller" {
		u, err := threadSocket(uc)
		if err == nil {
			return u
		}
		s.log.Warn("thread reader unavailable, using the poller", "err", err)
	}
	return &udpSock{local: uc.LocalAddr().(*net.UDPAddr).AddrPort(), uc: uc, fd: -1}
}

// connectSelf connects the socket to its own address (see Drain).
func (u *udpSock) connectSelf() error {
	if u.uc == nil {
		u.mu.RLock()
		defer u.mu.RUnlock()
		if u.closed {
			return net.ErrClosed
		}
		return unix.Connect(u.fd, sockaddr(u.local))
	}
	rc, err := u.uc.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sockaddr(u.local)) }); err != nil {
		return err
	}
	return cerr
}
