//go:build linux

package intercept

import (
	"net"
	"syscall"
	"testing"
)

func TestSocketInodesSeesOwnSockets(t *testing.T) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	own, err := socketInodes("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	if !own[st.Ino] {
		t.Errorf("inode %d of our socket not among %v", st.Ino, own)
	}
	// And /proc/thread-self/net/udp lists it.
	socks, err := readProcNet("/proc/thread-self/net/udp", false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range socks {
		if s.inode == st.Ino && s.local.String() == c.LocalAddr().String() {
			found = true
		}
	}
	if !found {
		t.Errorf("socket %s (inode %d) not in /proc/thread-self/net/udp: %v", c.LocalAddr(), st.Ino, socks)
	}
}
