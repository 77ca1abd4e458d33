package peers

import (
	"testing"
)

func TestParseHexAddrPort(t *testing.T) {
	// Values as a little-endian kernel prints them.
	for in, want := range map[string]string{
		"0A14FEA9:0035": "169.254.20.10:53",
		"0100007F:1F90": "127.0.0.1:8080",
		"000000FD:00000000:00000000:10000000:0035": "", // malformed: colons inside
		"000000FD000000000000000010000000:0035":    "[fd00::10]:53",
		"0000000000000000FFFF00000A14FEA9:0035":    "169.254.20.10:53", // v4-mapped
	} {
		got, err := ParseHexAddrPort(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParseHexAddrPort(%q) = %v, want an error", in, got)
			}
			continue
		}
		if err != nil || got.String() != want {
			t.Errorf("ParseHexAddrPort(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}
