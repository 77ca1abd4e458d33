package migrate

import (
	"strings"
	"testing"
)

// TestDNS64AndK8sExternal: dns64 (every option, both prefix forms) and
// k8s_external (every option, zones from the arguments or the block) are
// carried, nothing dropped; what nodedns cannot do is dropped by name.
func TestDNS64AndK8sExternal(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want map[string]any
	}{
		{".:53 {\n  kubernetes cluster.local\n  dns64\n  forward . 169.254.0.1\n}\n",
			map[string]any{"dns64": map[string]any{}}},
		{".:53 {\n  kubernetes cluster.local\n  dns64 64:1337::/96\n  forward . 169.254.0.1\n}\n",
			map[string]any{"dns64": map[string]any{"prefix": "64:1337::/96"}}},
		{".:53 {\n  kubernetes cluster.local\n  dns64 {\n    prefix fd00:64::/64\n    translate_all\n    allow_ipv4\n  }\n  forward . 169.254.0.1\n}\n",
			map[string]any{"dns64": map[string]any{"prefix": "fd00:64::/64", "translate-all": true, "allow-ipv4": true}}},
		// CoreDNS 1.15 reads no block after a prefix on the line.
		{".:53 {\n  dns64 fd00:64::/64 {\n    translate_all\n    allow_ipv4\n  }\n  forward . 169.254.0.1\n}\n",
			map[string]any{"dns64": map[string]any{"prefix": "fd00:64::/64"}}},
		{".:53 {\n  kubernetes cluster.local\n  k8s_external example.org Example.NET. {\n    apex ns\n    ttl 30\n    headless\n    fallthrough example.net\n  }\n  forward . 169.254.0.1\n}\n",
			map[string]any{"k8s-external": map[string]any{"zones": []any{"example.org", "example.net"}, "apex": "ns", "ttl": float64(30),
				"headless": true, "fallthrough": []any{"example.net"}}}},
		// The other server blocks' names are not translated: CoreDNS
		// answers them from their own blocks, without dns64.
		{".:53 {\n  kubernetes cluster.local\n  dns64\n  forward . 169.254.0.1\n}\nother.test Example.NET. {\n  file /dev/null\n}\n",
			map[string]any{"dns64": map[string]any{"except": []any{"other.test", "example.net"}}}},
		{".:53 {\n  kubernetes cluster.local\n  forward . 169.254.0.1\n}\nexample.org {\n  k8s_external {\n    fallthrough\n  }\n}\n",
			map[string]any{"k8s-external": map[string]any{"zones": []any{"example.org"}, "fallthrough": []any{}}}},
	} {
		res, err := Migrate([]byte(tc.src), Options{Env: testEnv, ClusterDomain: "cluster.local"})
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		if len(res.Dropped) != 0 {
			t.Errorf("%q: dropped %s", tc.src, droppedText(res))
		}
		expect(t, keys(t, res), tc.want)
	}
	for _, tc := range []struct{ src, dropped string }{
		{".:53 {\n  dns64 64:ff9b::/95\n  forward . 169.254.0.1\n}\n", "length 95"},
		{".:53 {\n  dns64 {\n    bogus\n  }\n  forward . 169.254.0.1\n}\n", "dns64 option bogus"},
		{".:53 {\n  forward . 169.254.0.1\n}\nexample.org {\n  dns64\n  forward . 169.254.0.2\n}\n", "applies to every name"},
		{".:53 {\n  kubernetes cluster.local\n  k8s_external example.org {\n    ttl 4000\n  }\n}\n", "ttl 4000"},
	} {
		res, err := Migrate([]byte(tc.src), Options{Env: testEnv, ClusterDomain: "cluster.local"})
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		if d := droppedText(res); !strings.Contains(d, tc.dropped) {
			t.Errorf("%q: dropped %q, want a note with %q", tc.src, d, tc.dropped)
		}
	}
}
