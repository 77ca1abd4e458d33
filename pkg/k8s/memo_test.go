package k8s

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// parseDashIPv6Ref is the reading parseDashIPv6 must agree with: the
// address with its colons put back, through netip.
func parseDashIPv6Ref(label string) (netip.Addr, bool) {
	if len(label) < 2 || len(label) > 45 || strings.Count(label, "-") < 2 {
		return netip.Addr{}, false
	}
	for i := 0; i < len(label); i++ {
		if c := label[i]; c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return netip.Addr{}, false
		}
	}
	ip, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ":"))
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// TestParseDashIPv6 compares the allocation-free reader with netip on
// hand-picked and random labels.
func TestParseDashIPv6(t *testing.T) {
	labels := []string{"--", "--1", "1--", "fd00--1", "fd00-244--7", "1-2-3-4-5-6-7-8", "1-2-3-4-5-6-7-8-9",
		"1-2-3-4-5-6-7--8", "1-2-3-4-5-6-7", "1---2", "1--2--3", "-1--2", "1--2-", "12345--1", "--ffff-a0a-a0a",
		"0-0-0-0-0-0-0-0", "abcd-ef01-2345-6789-abcd-ef01-2345-6789", "g--1", "fd00--1-", "00000--1", "--0001"}
	alphabet := "0123456789abcdef-g"
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		n := 2 + r.IntN(20)
		b := make([]byte, n)
		for i := range b {
			if r.IntN(3) == 0 {
				b[i] = '-'
			} else {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
		}
		labels = append(labels, string(b))
	}
	for _, l := range labels {
		got, gok := parseDashIPv6(l)
		want, wok := parseDashIPv6Ref(l)
		if gok != wok || got != want {
			t.Fatalf("%q: got %v %v, want %v %v", l, got, gok, want, wok)
		}
	}
}

// TestAnswerMemo: a kept answer is returned for its generation (or any,
// for anyGen), a newer generation misses, and two names sharing slots
// both stay.
func TestAnswerMemo(t *testing.T) {
	m := newAnswerMemo()
	a, b := (&Index{}).answer(nil, nil), (&Index{}).answer(nil, nil)
	m.put("x.", 12, 7, a)
	if m.get("x.", 12, 7) != a || m.get("x.", 12, 8) != nil || m.get("x.", 1, 7) != nil || m.get("y.", 12, 7) != nil {
		t.Fatal("generation-bound answer")
	}
	m.put("p.", 1, anyGen, b)
	if m.get("p.", 1, 99) != b {
		t.Fatal("answer for any generation")
	}
	m.put("x.", 12, 8, b)
	if m.get("x.", 12, 8) != b || m.get("x.", 12, 7) != nil {
		t.Fatal("replaced answer")
	}
}
