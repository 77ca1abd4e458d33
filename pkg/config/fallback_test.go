package config

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestFallbackDNS(t *testing.T) {
	seventeen := make([]string, 17)
	for i := range seventeen {
		seventeen[i] = fmt.Sprintf("169.254.1.%d", i+1)
	}
	for _, c := range []struct {
		args  []string
		file  string
		want  []string // canonical entries; nil: the default
		unset bool
		err   string
	}{
		{unset: true},
		{args: []string{"--fallback-dns="}, want: []string{}},
		{file: "fallback-dns: []\n", want: []string{}},
		{args: []string{"--fallback-dns=169.254.211.2,169.254.211.3:1053,fd00::53,[fd00::54]:5353,kube-system/kube-dns,::ffff:169.254.211.9"},
			want: []string{"169.254.211.2:53", "169.254.211.3:1053", "[fd00::53]:53", "[fd00::54]:5353", "kube-system/kube-dns", "169.254.211.9:53"}},
		{file: "fallback-dns: [kube-system/kube-dns, 169.254.211.2]\n", want: []string{"kube-system/kube-dns", "169.254.211.2:53"}},
		{args: []string{"--fallback-dns=169.254.211.2,169.254.211.2:53"}, err: `--fallback-dns "169.254.211.2:53": given twice`},
		{args: []string{"--fallback-dns=127.0.0.1"}, err: `--fallback-dns "127.0.0.1": unspecified, loopback and multicast addresses cannot be DNAT targets`},
		{args: []string{"--fallback-dns=0.0.0.0:53"}, err: `cannot be DNAT targets`},
		{args: []string{"--fallback-dns=169.254.211.2:0"}, err: `port 0`},
		{args: []string{"--fallback-dns=fe80::1%eth0"}, err: `zone`},
		{args: []string{"--fallback-dns=kube-dns"}, err: `--fallback-dns "kube-dns": want an IP address, ip:port or namespace/name`},
		{args: []string{"--fallback-dns=Kube-System/kube-dns"}, err: `not a namespace name`},
		{args: []string{"--fallback-dns=kube-system/1dns"}, err: `not a Service name`},
		{args: []string{"--fallback-dns=kube-system/a/b"}, err: `not a Service name`},
		{args: []string{"--fallback-dns=" + strings.Join(seventeen, ",")}, err: `--fallback-dns: 17 entries: want at most 16`},
		{args: []string{"--fallback-dns=" + strings.Join(seventeen[:16], ",")}, want: func() []string {
			var w []string
			for _, s := range seventeen[:16] {
				w = append(w, s+":53")
			}
			return w
		}()},
		// A fallback to a local IP is a loop.
		{args: []string{"--local-ip=169.254.20.10", "--fallback-dns=169.254.20.10:53"}, err: `--fallback-dns 169.254.20.10:53 is a --local-ip`},
	} {
		name := strings.Join(c.args, " ") + c.file
		var (
			cfg Config
			err error
		)
		if c.file != "" {
			cfg, err = loadFile(t, "listen: [127.0.0.1:5300]\n"+c.file, c.args...)
		} else {
			cfg, err = Load(append([]string{"--listen=127.0.0.1:5300"}, c.args...), io.Discard)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v; want an error containing %q", name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		entries, unset := cfg.FallbackEntries()
		got := []string{}
		for _, e := range entries {
			got = append(got, e.String())
		}
		if unset != c.unset || (!c.unset && !slices.Equal(got, c.want)) {
			t.Errorf("%s: entries %q (unset %v), want %q (unset %v)", name, got, unset, c.want, c.unset)
		}
		if want := slices.Contains(c.want, "kube-system/kube-dns"); cfg.HasFallbackServices() != want {
			t.Errorf("%s: HasFallbackServices = %v", name, !want)
		}
	}
}
