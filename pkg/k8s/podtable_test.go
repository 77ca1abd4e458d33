package k8s

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
)

// TestPodTable: the table answers as the map it was built from, for IPv4
// and IPv6 addresses present and absent, at every size.
func TestPodTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addr := func() netip.Addr {
		if r.IntN(2) == 0 {
			return netip.AddrFrom4([4]byte{10, 244, byte(r.IntN(4)), byte(r.IntN(256))})
		}
		var b [16]byte
		b[0], b[1], b[15] = 0xfd, byte(r.IntN(4)), byte(r.IntN(256))
		return netip.AddrFrom16(b)
	}
	for _, n := range []int{0, 1, 7, 8, 9, 110, 500} {
		m := map[netip.Addr]string{}
		for len(m) < n {
			m[addr()] = "ns-" + strconv.Itoa(r.IntN(20))
		}
		tb := newPodTable(m)
		for a, ns := range m {
			if got, ok := tb.get(a); !ok || got != ns {
				t.Fatalf("%d addresses: %s: %q %v, want %q", n, a, got, ok, ns)
			}
		}
		for range 1000 {
			a := addr()
			got, ok := tb.get(a)
			want, wantOK := m[a]
			if got != want || ok != wantOK {
				t.Fatalf("%d addresses: %s: %q %v, want %q %v", n, a, got, ok, want, wantOK)
			}
		}
	}
}
