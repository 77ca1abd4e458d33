package config

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func loadFile(t *testing.T, content string, args ...string) (Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(append([]string{"--config", p}, args...), io.Discard)
}

func TestUpstreamKeys(t *testing.T) {
	ca := dnstest.NewCA(t).File(t)
	cfg, err := loadFile(t, `
listen: ["127.0.0.1:5300"]
upstream: ["tls://192.0.2.1#dns.example", "192.0.2.2:5353", "tcp://192.0.2.3"]
force-tcp: true
upstream-ca: `+ca+`
kube-dns-config: /etc/kube-dns
stub-domains:
  a.example: ["10.0.0.1"]
  b.example: "10.0.0.2, 10.0.0.3"
  c.example:
    servers: ["tcp://10.0.0.4"]
    prefer-udp: true
    policy: sequential
  d.example: ["dns.corp.svc.cluster.local:5353", "tls://dot.corp.svc.cluster.local"]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := StubsMap{
		"a.example": {Servers: List{"10.0.0.1"}},
		"b.example": {Servers: List{"10.0.0.2", "10.0.0.3"}},
		"c.example": {Servers: List{"tcp://10.0.0.4"}, PreferUDP: true, Policy: "sequential"},
		"d.example": {Servers: List{"dns.corp.svc.cluster.local:5353", "tls://dot.corp.svc.cluster.local"}},
	}
	if !reflect.DeepEqual(cfg.Stubs, want) {
		t.Errorf("stub-domains = %+v\nwant %+v", cfg.Stubs, want)
	}
	if !cfg.ForceTCP || cfg.PreferUDP || cfg.UpstreamCA != ca || cfg.KubeDNSConfig != "/etc/kube-dns" || len(cfg.Upstream) != 3 {
		t.Errorf("upstream keys: %+v", cfg)
	}
	// The flag form, with a scheme.
	cfg, err = Load([]string{"--listen", "127.0.0.1:5300", "--stub-domain", "x.example=tls://192.0.2.9#x.example,192.0.2.10", "--prefer-udp"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Stubs["x.example"].Servers; len(got) != 2 || got[0] != "tls://192.0.2.9#x.example" || !cfg.PreferUDP {
		t.Errorf("--stub-domain: %+v", cfg.Stubs)
	}

}

func TestUpstreamKeyErrors(t *testing.T) {
	base := "listen: [\"127.0.0.1:5300\"]\n"
	for _, tc := range []struct{ content, want string }{
		{`upstream: ["https://192.0.2.1"]`, `"https://192.0.2.1"`},
		{`upstream: ["192.0.2.1#name"]`, `"192.0.2.1#name"`},
		{`upstream: ["dns.google"]`, `"dns.google": a server given by name must be in the cluster zone`},
		{"force-tcp: true\nprefer-udp: true", "pick one"},
		{"upstream-ca: /nonexistent/ca.pem", "/nonexistent/ca.pem"},
		{"stub-domains:\n  a.example:\n    serverz: [\"10.0.0.1\"]", "serverz"},
		{"stub-domains:\n  a.example:\n    servers: []", `stub domain "a.example": no servers`},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    policy: fastest", `policy "fastest"`},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    force-tcp: true\n    prefer-udp: true", "pick one"},
		{"stub-domains:\n  a.example: [\"tls://10.0.0.1#bad name\"]", `"bad name"`},
		{"stub-domains:\n  a.example: [\"svc.other.zone\"]", "must be in the cluster zone"},
	} {
		_, err := loadFile(t, base+tc.content+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error with %q", tc.content, err, tc.want)
		}
	}
}
