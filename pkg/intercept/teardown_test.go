package intercept

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc writes /proc/net-style files and a fake fd directory.
func fakeProc(t *testing.T, files map[string]string, ownInodes ...uint64) (procNet, fdDir string) {
	t.Helper()
	dir := t.TempDir()
	procNet = filepath.Join(dir, "net")
	fdDir = filepath.Join(dir, "fd")
	for _, d := range []string{procNet, fdDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(procNet, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, ino := range ownInodes {
		if err := os.Symlink(fmt.Sprintf("socket:[%d]", ino), filepath.Join(fdDir, fmt.Sprint(i+3))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/dev/null", filepath.Join(fdDir, "0")); err != nil {
		t.Fatal(err)
	}
	return procNet, fdDir
}

const (
	udpHeader = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
	tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)

func udpLine(addr string, inode uint64) string {
	return fmt.Sprintf("  1: %s 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 %d 2 0000000000000000 0\n", addr, inode)
}

func tcpLine(addr, state string, inode uint64) string {
	return fmt.Sprintf("   0: %s 00000000:0000 %s 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n", addr, state, inode)
}

func TestShouldTeardown(t *testing.T) {
	cfg := Config{LocalIPs: []netip.Addr{ip4, ip6}, SetupInterface: true, SetupIptables: true}
	const (
		local4 = "0A14FEA9:0035"
		local6 = "200000FD000000000000000010000000:0035"
		other  = "0B14FEA9:0035" // 169.254.20.11:53
		wild   = "00000000:0035"
	)
	for _, tc := range []struct {
		name  string
		files map[string]string
		own   []uint64
		want  bool
		why   string
	}{
		{"only our sockets", map[string]string{
			"udp": udpHeader + udpLine(local4, 100), "tcp": tcpHeader + tcpLine(local4, "0A", 101),
			"udp6": udpHeader + udpLine(local6, 102), "tcp6": tcpHeader,
		}, []uint64{100, 101, 102}, true, "no other process"},
		{"new agent on the same UDP address", map[string]string{
			"udp": udpHeader + udpLine(local4, 100) + udpLine(local4, 200), "tcp": tcpHeader, "udp6": udpHeader, "tcp6": tcpHeader,
		}, []uint64{100}, false, "169.254.20.10:53/udp"},
		{"new agent listening on TCP over IPv6", map[string]string{
			"udp": udpHeader, "tcp": tcpHeader, "udp6": udpHeader, "tcp6": tcpHeader + tcpLine(local6, "0A", 300),
		}, nil, false, "[fd00:20::10]:53/tcp"},
		{"established TCP and wildcard and other IPs do not count", map[string]string{
			"udp":  udpHeader + udpLine(wild, 400) + udpLine(other, 401),
			"tcp":  tcpHeader + tcpLine(local4, "01", 402) + tcpLine(local4, "06", 0),
			"udp6": udpHeader, "tcp6": tcpHeader,
		}, nil, true, "no other process"},
		{"no IPv6 in the kernel", map[string]string{"udp": udpHeader, "tcp": tcpHeader}, nil, true, "no other process"},
		{"unreadable", map[string]string{"udp": "header\n  1: garbage 00000000:0000 07 0 0 0 0 0 x\n"}, nil, true, "cannot tell"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procNet, fd := fakeProc(t, tc.files, tc.own...)
			got, why := shouldTeardown(cfg, procNet, fd)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("shouldTeardown = %v, %q; want %v, containing %q", got, why, tc.want, tc.why)
			}
		})
	}

	procNet, fd := fakeProc(t, map[string]string{"udp": udpHeader + udpLine(local4, 9)})
	if ok, why := shouldTeardown(Config{LocalIPs: cfg.LocalIPs}, procNet, fd); ok {
		t.Errorf("nothing set up: teardown = true (%s)", why)
	}
}

// TestWaitNoAgentFree: with no process serving the addresses the wait
// ends at once.
func TestWaitNoAgentFree(t *testing.T) {
	ip := netip.MustParseAddr("169.254.251.254")
	if ok, why := ShouldTeardown(Config{LocalIPs: []netip.Addr{ip}, SetupInterface: true}); !ok {
		t.Skipf("%s is served here: %s", ip, why)
	}
	start := time.Now()
	if err := waitNoAgent(context.Background(), Config{LocalIPs: []netip.Addr{ip}}, 5*time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("waited %v with nothing serving", d)
	}
}
