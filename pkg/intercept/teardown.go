package intercept

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

// ShouldTeardown is the one place that decides whether an exiting agent
// removes the interception (Teardown) or leaves it in place. With
// --teardown (the default), cmd/nodedns calls it on exit, after its own
// listeners are closed, and tears down only when it returns true; why is a
// sentence for the log. Call it on a thread in the agent's network
// namespace (any thread, in an agent that never switches namespaces).
//
// The answer is no when nothing was set up (SetupInterface and
// SetupIptables both false) or when another process still serves one of
// the local IPs on port 53: during a rolling restart the new agent binds
// the same addresses with SO_REUSEPORT before the old one exits, and
// removing the link and rules under it would cut off every pod on the node
// until its next sync.
//
// "Another process serves" is read from the kernel, not from a lock file,
// so it also sees an agent in another container or PID namespace: a UDP
// socket, or a listening TCP socket, bound to LOCALIP:53 in this network
// namespace (/proc/thread-self/net/{udp,udp6,tcp,tcp6}) whose inode is not
// one of this process's descriptors (/proc/self/fd). Sockets bound to the
// wildcard address are not counted: a resolver listening on 0.0.0.0:53 does
// not keep the interception meaningful.
//
// Limits: a socket a new agent has not bound yet is not seen, so a
// replacement that starts only after the old agent exits gets a fresh
// setup rather than an inherited one. If /proc cannot be read the answer
// is yes (the behaviour without this check), with the error in why.
func ShouldTeardown(cfg Config) (teardown bool, why string) {
	return shouldTeardown(cfg, "/proc/thread-self/net", "/proc/self/fd")
}

func shouldTeardown(cfg Config, procNet, selfFD string) (bool, string) {
	if !cfg.SetupInterface && !cfg.SetupIptables {
		return false, "this agent set up no link and no rules"
	}
	if len(cfg.LocalIPs) == 0 {
		return false, "no local IPs configured"
	}
	own, err := socketInodes(selfFD)
	if err != nil {
		return true, fmt.Sprintf("cannot tell whether another agent serves %s (%v); tearing down", describeIPs(cfg.LocalIPs), err)
	}
	want := make(map[netip.AddrPort]bool, len(cfg.LocalIPs))
	for _, ip := range cfg.LocalIPs {
		want[netip.AddrPortFrom(ip.Unmap(), dnsPort)] = true
	}
	for _, f := range []struct {
		file      string
		listenTCP bool
	}{{"udp", false}, {"udp6", false}, {"tcp", true}, {"tcp6", true}} {
		socks, err := readProcNet(filepath.Join(procNet, f.file), f.listenTCP)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(f.file, "6") {
				continue // IPv6 disabled
			}
			return true, fmt.Sprintf("cannot tell whether another agent serves %s (%v); tearing down", describeIPs(cfg.LocalIPs), err)
		}
		for _, s := range socks {
			if want[s.local] && !own[s.inode] {
				return false, fmt.Sprintf("another process still serves %s/%s (socket inode %d); leaving the interception to it", s.local, strings.TrimSuffix(f.file, "6"), s.inode)
			}
		}
	}
	return true, fmt.Sprintf("no other process serves %s on port %d", describeIPs(cfg.LocalIPs), dnsPort)
}

// socketInodes returns the inodes of the sockets among the descriptors in
// dir (/proc/self/fd).
func socketInodes(dir string) (map[uint64]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	out := make(map[uint64]bool)
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		if s, ok := strings.CutPrefix(target, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out[n] = true
			}
		}
	}
	return out, nil
}

type procSocket struct {
	local netip.AddrPort
	inode uint64
}

// readProcNet parses /proc/net/{udp,udp6,tcp,tcp6}. With listenOnly only
// sockets in TCP_LISTEN are returned. Sockets without an inode (TIME_WAIT)
// are skipped.
func readProcNet(path string, listenOnly bool) ([]procSocket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	socks, err := parseProcNet(f, listenOnly)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return socks, nil
}

const tcpListen = "0A"

func parseProcNet(r io.Reader, listenOnly bool) ([]procSocket, error) {
	var out []procSocket
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
		local, err := parseHexAddrPort(fields[1])
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
		out = append(out, procSocket{local: local, inode: inode})
	}
	return out, sc.Err()
}

// parseHexAddrPort decodes the kernel's "0A14FEA9:0035" form: the address
// as 32-bit words in host byte order, the port in hex.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
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
