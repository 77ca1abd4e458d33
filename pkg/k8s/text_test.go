package k8s

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParseAddr checks the in-place IPv4 parser against netip.ParseAddr,
// on both forms of text.
func TestParseAddr(t *testing.T) {
	for _, s := range []string{"10.244.1.5", "0.0.0.0", "255.255.255.255", "256.1.1.1", "1.2.3", "1.2.3.4.5", "01.2.3.4",
		"1.2.3.04", "1.2.3.0", "1..2.3", ".1.2.3", "1.2.3.", "", "fd00::1", "::ffff:10.1.2.3", "1.2.3.4%eth0", "1.2.3.a",
		"1.2.3.1000", "10.0.0.00", "9.9.9.9 "} {
		checkParseAddr(t, s)
	}
}

func checkParseAddr(t *testing.T, s string) {
	t.Helper()
	want, err := netip.ParseAddr(s)
	for form, parse := range map[string]func() (netip.Addr, bool){
		"string": func() (netip.Addr, bool) { return parseAddr(s) },
		"bytes":  func() (netip.Addr, bool) { return parseAddr([]byte(s)) },
	} {
		if got, ok := parse(); ok != (err == nil) || (ok && got != want) {
			t.Errorf("parseAddr(%q) on %s = %v, %v; ParseAddr gives %v, %v", s, form, got, ok, want, err)
		}
	}
}

func FuzzParseAddr(f *testing.F) {
	f.Add("10.244.1.5")
	f.Add("fd00::1")
	f.Fuzz(checkParseAddr)
}

// TestIsLabel checks the label rule, on both forms of text.
func TestIsLabel(t *testing.T) {
	for s, want := range map[string]bool{
		"": false, "a": true, "web-0": true, "-a": false, "a-": false, "A": false, "a.b": false, "a_b": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false, "0": true, "é": false,
	} {
		if isLabel(s) != want || isLabel([]byte(s)) != want {
			t.Errorf("isLabel(%q) = %v on a string, %v on bytes; want %v", s, isLabel(s), isLabel([]byte(s)), want)
		}
	}
}
