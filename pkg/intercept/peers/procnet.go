package peers

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Socket is one socket of the network namespace, as /proc/net lists it.
type Socket struct {
	Local netip.AddrPort
	Proto string // "udp" or "tcp"
	Inode uint64
}

// ReadSockets returns the UDP sockets and the listening TCP sockets of the
// network namespace whose /proc/net directory is procNet (the calling
// thread's: /proc/thread-self/net). Sockets without an inode (TIME_WAIT)
// are left out; a missing IPv6 file (IPv6 disabled) is no error.
func ReadSockets(procNet string) ([]Socket, error) {
	var out []Socket
	for _, f := range []struct {
		file, proto string
		listenOnly  bool
	}{{"udp", "udp", false}, {"udp6", "udp", false}, {"tcp", "tcp", true}, {"tcp6", "tcp", true}} {
		socks, err := readProcNet(filepath.Join(procNet, f.file), f.proto, f.listenOnly)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(f.file, "6") {
				continue // IPv6 disabled
			}
			return nil, err
		}
		out = append(out, socks...)
	}
	return out, nil
}

// OwnInodes returns the inodes of the sockets among the descriptors in dir
// (/proc/self/fd).
func OwnInodes(dir string) (map[uint64]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	out := make(map[uint64]bool)
	for _, e := range ents {
		if n, ok := socketInode(filepath.Join(dir, e.Name())); ok {
			out[n] = true
		}
	}
	return out, nil
}

// socketInode reads the inode of a socket descriptor link ("socket:[N]").
func socketInode(fdLink string) (uint64, bool) {
	target, err := os.Readlink(fdLink)
	if err != nil {
		return 0, false // closed since it was listed
	}
	s, ok := strings.CutPrefix(target, "socket:[")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	return n, err == nil
}

func readProcNet(path, proto string, listenOnly bool) ([]Socket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	socks, err := parseProcNet(f, proto, listenOnly)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return socks, nil
}

const tcpListen = "0A"

func parseProcNet(r io.Reader, proto string, listenOnly bool) ([]Socket, error) {
	var out []Socket
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		if listenOnly && fields[3] != tcpListen {
			continue
		}
		local, err := ParseHexAddrPort(fields[1])
		if err != nil {
			return nil, err
		}
		inode, err := strconv.ParseUint(fields[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q: %w", fields[9], err)
		}
		if inode == 0 {
			continue
		}
		out = append(out, Socket{Local: local, Proto: proto, Inode: inode})
	}
	return out, sc.Err()
}

// ParseHexAddrPort decodes the kernel's "0A14FEA9:0035" form: the address
// as 32-bit words in host byte order, the port in hex. IPv4-mapped
// addresses are unmapped.
func ParseHexAddrPort(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("socket address %q: no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("socket address %q: %w", s, err)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("socket address %q: bad address", s)
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	ip, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}
