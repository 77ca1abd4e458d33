package config

import (
	"io"
	"strings"
	"testing"
)

// --admin takes "[ip]:port" for IPv4 too, so that the DaemonSet's
// --admin=[$(HOST_IP)]:9253 works on IPv4 and IPv6 nodes alike.
func TestAdminBracketedIPv4(t *testing.T) {
	for in, want := range map[string]string{
		"[169.254.63.1]:9253": "169.254.63.1:9253",
		"[fd00::1]:9253":      "[fd00::1]:9253",
		"127.0.0.1:9253":      "127.0.0.1:9253",
	} {
		cfg, err := Load([]string{"--listen", "127.0.0.1:5353", "--admin", in}, io.Discard)
		if err != nil {
			t.Errorf("--admin %s: %v", in, err)
			continue
		}
		if cfg.Admin != want {
			t.Errorf("--admin %s became %q, want %q", in, cfg.Admin, want)
		}
	}
	for _, bad := range []string{"[169.254.63.1]", "[nope]:9253", "[169.254.63.1]:x"} {
		if _, err := Load([]string{"--listen", "127.0.0.1:5353", "--admin", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "--admin") {
			t.Errorf("--admin %s: error %v, want one naming --admin", bad, err)
		}
	}
}

func TestMetricsCompatFlag(t *testing.T) {
	cfg, err := Load([]string{"--listen", "127.0.0.1:5353"}, io.Discard)
	if err != nil || cfg.MetricsCompat != "coredns" {
		t.Fatalf("default: %q %v, want coredns", cfg.MetricsCompat, err)
	}
	cfg, err = Load([]string{"--listen", "127.0.0.1:5353", "--metrics-compat", "none"}, io.Discard)
	if err != nil || cfg.MetricsCompat != "none" {
		t.Fatalf("none: %q %v", cfg.MetricsCompat, err)
	}
	if _, err := Load([]string{"--listen", "127.0.0.1:5353", "--metrics-compat", "kube-dns"}, io.Discard); err == nil || !strings.Contains(err.Error(), `--metrics-compat "kube-dns"`) {
		t.Fatalf("bad value: %v", err)
	}
}
