package config

import (
	"testing"
)

func TestBytes(t *testing.T) {
	for in, want := range map[string]Bytes{
		"33554432": 32 << 20, "32Mi": 32 << 20, "32MiB": 32 << 20, "64Ki": 64 << 10, "1Gi": 1 << 30,
		"1G": 1e9, "500M": 500e6, "100k": 100e3, " 2Mi ": 2 << 20,
	} {
		var b Bytes
		if err := b.Set(in); err != nil || b != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "Mi", "-1", "1.5Mi", "32 Mi", "32Mb", "ten", "99999999999Gi"} {
		var b Bytes
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted: %d", in, b)
		}
	}
	if s := Bytes(32 << 20).String(); s != "32Mi" {
		t.Errorf("String() = %q", s)
	}
}
