//go:build linux

package server

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// handOverProg is a classic BPF program for a SO_REUSEPORT group
// (SO_ATTACH_REUSEPORT_CBPF): it returns the index of the socket that is
// to take a new connection, and this one always names index 1. The kernel
// numbers a group's listeners in the order they began to listen and, when
// one closes, moves the last into its place; an agent alone on its
// addresses is index 0, and the agent that starts beside it in a rolling
// update (or a supervisor's replacement binding anew) is index 1. An index
// beyond the group (the agent alone) makes the kernel pick by its hash, as
// without a program.
var handOverProg = []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 1}}

// handOver attaches handOverProg to l's group, so that new connections go
// to the other agent's listener while l still accepts those the kernel
// already gave it (its SYN and accept queues): with the default
// net.ipv4.tcp_migrate_req=0, closing l at once would reset them.
func handOver(l *net.TCPListener) error {
	return attachProg(l, "handing new connections over", handOverProg)
}

// clearHandOver undoes a handover a draining agent left on the group l
// joins (the program stays with the group when that agent is gone), so
// that the kernel shares new connections by its hash again and the next
// agent to join does not take them all before it is asked to. It
// attaches hashProg rather than detaching: SO_DETACH_REUSEPORT_BPF came
// with Linux 5.8 and fails (ENOENT) when no program is attached, the
// attach is as old as classic BPF on SO_REUSEPORT groups (4.5).
func clearHandOver(l *net.TCPListener) error {
	return attachProg(l, "clearing a handover program", hashProg)
}

// hashProg names no socket (an index no group has), so the kernel picks
// one by its hash of the connection, as with no program.
var hashProg = []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: ^uint32(0)}}

// attachProg attaches prog to the SO_REUSEPORT group of l.
func attachProg(l *net.TCPListener, what string, prog []unix.SockFilter) error {
	rc, err := l.SyscallConn()
	if err != nil {
		return fmt.Errorf("%s on %s: %w", what, l.Addr(), err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fprog)
	}); err != nil {
		return fmt.Errorf("%s on %s: %w", what, l.Addr(), err)
	}
	if serr != nil {
		return fmt.Errorf("%s on %s: %w", what, l.Addr(), serr)
	}
	return nil
}
