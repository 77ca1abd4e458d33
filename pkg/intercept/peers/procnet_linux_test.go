//go:build linux

package peers

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
	own, err := OwnInodes("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	if !own[st.Ino] {
		t.Errorf("inode %d of our socket not among %v", st.Ino, own)
	}
	// And /proc/thread-self/net/udp lists it.
	socks, err := ReadSockets("/proc/thread-self/net")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range socks {
		if s.Inode == st.Ino && s.Proto == "udp" && s.Local.String() == c.LocalAddr().String() {
			found = true
		}
	}
	if !found {
		t.Errorf("socket %s (inode %d) not in /proc/thread-self/net/udp: %v", c.LocalAddr(), st.Ino, socks)
	}
}
