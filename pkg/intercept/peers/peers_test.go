package peers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

const udpHeader = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"

func udpLine(addr string, inode uint64) string {
	return fmt.Sprintf("  1: %s 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 %d 2 0000000000000000 0\n", addr, inode)
}

// fakeProc lays out a proc directory: net/{udp,tcp}, self/fd with our
// sockets, and one process (pid 4242, comm "coredns") holding others.
func fakeProc(t *testing.T, udp string, own []uint64, theirs []uint64) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"thread-self/net", "self/fd", "4242/fd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("thread-self/net/udp", udpHeader+udp)
	write("thread-self/net/tcp", udpHeader)
	write("4242/comm", "coredns\n")
	for i, ino := range own {
		if err := os.Symlink(fmt.Sprintf("socket:[%d]", ino), filepath.Join(dir, "self/fd", fmt.Sprint(i+3))); err != nil {
			t.Fatal(err)
		}
	}
	for i, ino := range theirs {
		if err := os.Symlink(fmt.Sprintf("socket:[%d]", ino), filepath.Join(dir, "4242/fd", fmt.Sprint(i+3))); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheck(t *testing.T) {
	local := netip.MustParseAddrPort("169.254.20.10:53")
	const (
		hex4  = "0A14FEA9:0035" // 169.254.20.10:53
		other = "0B14FEA9:0035" // 169.254.20.11:53
		wild  = "00000000:0035"
	)
	nodedns := func(context.Context, netip.AddrPort, string) (bool, string, error) { return true, "NOERROR HINFO", nil }
	for _, tc := range []struct {
		name     string
		udp      string
		own      []uint64
		theirs   []uint64
		probe    func(context.Context, netip.AddrPort, string) (bool, string, error)
		want     Kind // "": nothing reported
		programs string
		evidence string
	}{
		{name: "only ours", udp: udpLine(hex4, 1) + udpLine(wild, 2) + udpLine(other, 3), own: []uint64{1}, probe: nodedns},
		{name: "another agent", udp: udpLine(hex4, 1) + udpLine(hex4, 7), own: []uint64{1}, probe: nodedns,
			want: Agent, evidence: "probes answered as nodedns does"},
		{name: "a foreign server, its process visible", udp: udpLine(hex4, 1) + udpLine(hex4, 7) + udpLine(hex4, 8), own: []uint64{1}, theirs: []uint64{7, 8},
			probe: func() func(context.Context, netip.AddrPort, string) (bool, string, error) {
				var n atomic.Int32
				return func(context.Context, netip.AddrPort, string) (bool, string, error) {
					if n.Add(1)%3 == 0 { // one socket in three
						return false, "SERVFAIL", nil
					}
					return true, "NOERROR HINFO", nil
				}
			}(),
			want: Foreign, programs: "coredns[4242]", evidence: "answered SERVFAIL"},
		{name: "silent sockets", udp: udpLine(hex4, 1) + udpLine(hex4, 7), own: []uint64{1},
			probe: func(context.Context, netip.AddrPort, string) (bool, string, error) {
				return false, "", errors.New("i/o timeout")
			},
			want: Unidentified, evidence: "unanswered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := fakeProc(t, tc.udp, tc.own, tc.theirs)
			var probes atomic.Int32
			probe := func(ctx context.Context, a netip.AddrPort, proto string) (bool, string, error) {
				probes.Add(1)
				if a != local || proto != "udp" {
					t.Errorf("probe of %s/%s", a, proto)
				}
				return tc.probe(ctx, a, proto)
			}
			rep, err := Check(context.Background(), Config{Addrs: []netip.AddrPort{local}, Proc: proc, Probe: probe})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(rep.Servers) != 0 || probes.Load() != 0 {
					t.Errorf("report %+v after %d probes; want nothing, no probe", rep, probes.Load())
				}
				return
			}
			if len(rep.Servers) != 1 {
				t.Fatalf("report %+v", rep)
			}
			s := rep.Servers[0]
			if s.Kind != tc.want || strings.Join(s.Programs, ",") != tc.programs || !strings.Contains(s.Evidence, tc.evidence) || s.Addr != local {
				t.Errorf("server %+v, want kind %s, programs %q, evidence %q", s, tc.want, tc.programs, tc.evidence)
			}
			if int(probes.Load()) < probesFor(len(tc.own)+len(tc.theirs)) {
				t.Errorf("%d probes", probes.Load())
			}
			if tc.want == Foreign && len(rep.Foreign()) != 1 || tc.want != Foreign && len(rep.Foreign()) != 0 {
				t.Errorf("Foreign() = %v", rep.Foreign())
			}
		})
	}
}

func TestProbesFor(t *testing.T) {
	// Every socket of a group of up to 16 probed with probability 1-1e-4.
	for s := 1; s <= 16; s++ {
		p := 1.0
		for range probesFor(s) {
			p *= 1 - 1/float64(s)
		}
		if p > 1e-4 {
			t.Errorf("%d sockets, %d probes: a socket missed with probability %g", s, probesFor(s), p)
		}
	}
}
