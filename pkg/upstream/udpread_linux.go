//go:build linux

package upstream

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// readDatagram reads the next datagram of uc whole, whatever its size: it
// waits (under uc's deadline) until one is queued, learns its length
// without taking it (MSG_PEEK with MSG_TRUNC returns a UDP datagram's real
// length), then reads it into a buffer of that length. So no reply is cut
// to a guessed size, and an exchange holds no buffer while it waits: with
// up to MaxInflight exchanges waiting at once, a 64 KiB buffer each would
// be 64 MiB.
func readDatagram(uc *net.UDPConn) ([]byte, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	n := 0
	var perr error
	var one [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, perr = unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
		return !errors.Is(perr, unix.EAGAIN)
	})
	if err != nil {
		return nil, err // the deadline, or the socket closed
	}
	if perr != nil {
		// A queued error (ICMP port unreachable: nobody listens there),
		// as a read reports it.
		return nil, &net.OpError{Op: "read", Net: "udp", Source: uc.LocalAddr(), Addr: uc.RemoteAddr(), Err: fmt.Errorf("recvfrom: %w", perr)}
	}
	b := make([]byte, max(n, 1))
	n, err = uc.Read(b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
