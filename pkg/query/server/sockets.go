package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// Sockets gives a Server its listening sockets instead of binding them:
// a supervisor process (pkg/supervisor) holds them so that they, and the
// queries queued on them, outlive this process. Implementations must be
// safe for concurrent use; each call returns a new descriptor the server
// owns (and closes).
type Sockets interface {
	// UDP returns the i-th UDP socket of addr's SO_REUSEPORT group;
	// replace asks for a new socket in its place because its reader
	// failed on the one given before (the old one must leave the group).
	UDP(addr netip.AddrPort, i int, replace bool) (*os.File, error)
	// TCP returns addr's listening TCP socket.
	TCP(addr netip.AddrPort) (*os.File, error)
}

// udpReadBuffer is the receive buffer asked for on every UDP socket: a
// deep queue absorbs bursts while readers are busy, and the queries that
// arrive while a supervised process is replaced (pkg/supervisor).
const udpReadBuffer = 4 << 20

// BindUDP binds one UDP socket of a listen set on addr (SO_REUSEPORT, a
// deep receive buffer) and returns it as a file.
func BindUDP(addr netip.AddrPort) (*os.File, error) {
	uc, err := bindUDP(addr)
	if err != nil {
		return nil, err
	}
	defer uc.Close()
	f, err := uc.File()
	if err != nil {
		return nil, fmt.Errorf("UDP socket on %s as a file: %w", addr, err)
	}
	return f, nil
}

// BindTCP binds the listening TCP socket of addr (SO_REUSEPORT) and
// returns it as a file.
func BindTCP(addr netip.AddrPort) (*os.File, error) {
	l, err := bindTCP(addr)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	f, err := l.File()
	if err != nil {
		return nil, fmt.Errorf("TCP listener on %s as a file: %w", addr, err)
	}
	return f, nil
}

// bindTCP listens on addr in its SO_REUSEPORT group and clears the
// handover program a drained agent may have left on the group (Drain).
// The listener is plain TCP, not the Multipath TCP that Go's listeners
// are by default: DNS clients do not use MPTCP, and the kernel refuses
// SO_ATTACH_REUSEPORT_CBPF on an MPTCP socket (EOPNOTSUPP).
func bindTCP(addr netip.AddrPort) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: reusePort}
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", addr.String())
	if err != nil {
		return nil, err
	}
	tl := l.(*net.TCPListener)
	if err := clearHandOver(tl); err != nil {
		_ = tl.Close()
		return nil, err
	}
	return tl, nil
}

func bindUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: reusePort}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr.String())
	if err != nil {
		return nil, err
	}
	uc := pc.(*net.UDPConn)
	setReadBuffer(uc)
	return uc, nil
}

// setReadBuffer asks for udpReadBuffer: beyond net.core.rmem_max only
// with CAP_NET_ADMIN (SO_RCVBUFFORCE), which the agent has on a node;
// without it the kernel's bound applies.
func setReadBuffer(uc *net.UDPConn) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return
	}
	forced := false
	_ = rc.Control(func(fd uintptr) {
		forced = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, udpReadBuffer) == nil
	})
	if !forced {
		_ = uc.SetReadBuffer(udpReadBuffer)
	}
}

// listenUDP is the i-th UDP socket of addr: from Config.Sockets when set,
// else bound here.
func (s *Server) listenUDP(addr netip.AddrPort, i int, replace bool) (*net.UDPConn, error) {
	if s.cfg.Sockets == nil {
		return bindUDP(addr)
	}
	f, err := s.cfg.Sockets.UDP(addr, i, replace)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("UDP socket %d of %s from its holder: %w", i, addr, err)
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		_ = pc.Close()
		return nil, fmt.Errorf("UDP socket %d of %s from its holder is a %T", i, addr, pc)
	}
	return uc, nil
}

// listenTCP is addr's TCP listener: from Config.Sockets when set, else
// bound here.
func (s *Server) listenTCP(addr netip.AddrPort) (*net.TCPListener, error) {
	if s.cfg.Sockets == nil {
		return bindTCP(addr)
	}
	f, err := s.cfg.Sockets.TCP(addr)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("TCP listener of %s from its holder: %w", addr, err)
	}
	tl, ok := l.(*net.TCPListener)
	if !ok {
		_ = l.Close()
		return nil, errors.New("TCP listener from its holder is not TCP")
	}
	return tl, nil
}
