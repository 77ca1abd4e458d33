package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/upstream"
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
		{`upstream: ["https://192.0.2.1/dns-query"]`, `"https://192.0.2.1/dns-query": a path is not allowed`},
		{`upstream: ["192.0.2.1#name"]`, `"192.0.2.1#name"`},
		{"force-tcp: true\nprefer-udp: true", "pick one"},
		{"upstream-ca: /nonexistent/ca.pem", "/nonexistent/ca.pem"},
		{"stub-domains:\n  a.example:\n    serverz: [\"10.0.0.1\"]", "serverz"},
		{"stub-domains:\n  a.example:\n    servers: []", `stub domain "a.example": no servers`},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    policy: fastest", `policy "fastest"`},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    force-tcp: true\n    prefer-udp: true", "pick one"},
		{"stub-domains:\n  a.example: [\"tls://10.0.0.1#bad name\"]", `"bad name"`},
		{"upstream-failover: [NOERROR]", "NOERROR is an answer"},
		{"upstream-failover: [SERVFAIL, servfail]", "given twice"},
		{"upstream-failover: [BOGUS]", `"BOGUS" is not an rcode`},
		{"upstream-except: [a..b]", "upstream-except"},
		{"upstream-read-timeout: 10s", "upstream-read-timeout 10s: want 1ms to 5s"},
		{"upstream-max-fails: -1", "want 0 to 100"},
		{"upstream-health-check: 1ms", "want 10ms to 1h0m0s"},
		{"upstream-health-check-domain: a..b", "upstream-health-check-domain"},
		{"upstream-expire: 0s", "upstream-expire"},
		{"upstream-doh-method: PUT", "upstream-doh-method"},
		{"upstream-resolver: [dns.example]", "upstream-resolver"},
		{"upstream-next: {servers: [\"10.0.0.1\"]}", "when: want the rcodes"},
		{"upstream-next: {when: [BOGUS], servers: [\"10.0.0.1\"]}", `"BOGUS"`},
		{"upstream-next: {when: [NXDOMAIN], servers: [\"10.0.0.1\"], except: [a.example]}", "except is for the first servers"},
		{"upstream-next: {when: [NXDOMAIN], servers: [\"10.0.0.1#x\"]}", `"10.0.0.1#x"`},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    when: [NXDOMAIN]", "when is for a next only"},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    max-fails: 101", "max-fails 101"},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    next: {when: [NODATA], servers: [\"tls://10.0.0.2#bad name\"]}", `"bad name"`},
		{"stub-domains:\n  a.example:\n    servers: [\"10.0.0.1\"]\n    next: {when: [NODATA], servers: [\"10.0.0.2\"], policy: fastest}", `policy "fastest"`},
	} {
		_, err := loadFile(t, base+tc.content+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error with %q", tc.content, err, tc.want)
		}
	}
}

// TestForwardOptionKeys: the upstream-* keys and a stub domain's map form
// become the forwarder's group options; absent keys are CoreDNS's
// defaults, failover absent (nil) and empty apart.
func TestForwardOptionKeys(t *testing.T) {
	cfg, err := loadFile(t, `
listen: ["127.0.0.1:5300"]
upstream: ["tls://192.0.2.1#dns.example", "https://dns.google"]
upstream-failover: [servfail, REFUSED]
upstream-failfast: true
upstream-except: [corp.example]
upstream-read-timeout: 300ms
upstream-max-fails: 0
upstream-health-check: 1s
upstream-health-check-domain: Health.Example.org
upstream-health-check-no-rec: true
upstream-expire: 90s
upstream-doh-method: GET
upstream-resolver: ["192.0.2.53", "[fd00::53]:5353"]
upstream-next:
  when: [NXDOMAIN, nodata]
  servers: ["tls://9.9.9.9#dns.quad9.net"]
  next: {when: [SERVFAIL], servers: []}
stub-domains:
  a.example:
    servers: ["10.0.0.1", "10.0.0.2"]
    failover: []
    max-fails: 1
  b.example: ["10.0.0.3"]
`)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.DefaultGroupOptions()
	if fmt.Sprint(o.Failover) != "[2 5]" || !o.Failfast || fmt.Sprint(o.Except) != "[corp.example.]" || o.ReadTimeout != 300*time.Millisecond ||
		*o.Health != (upstream.Health{MaxFails: 0, Interval: time.Second, Domain: "Health.Example.org", NoRec: true}) ||
		o.Expire != 90*time.Second || o.DoHMethod != "GET" {
		t.Errorf("default group options %+v health %+v", o, o.Health)
	}
	n := o.Next
	if n == nil || fmt.Sprint(n.On) != "[3]" || !n.OnNoData || fmt.Sprint(n.Servers) != "[tls://9.9.9.9#dns.quad9.net]" ||
		n.Options.Next == nil || len(n.Options.Next.Servers) != 0 || fmt.Sprint(n.Options.Next.On) != "[2]" {
		t.Errorf("next %+v", n)
	}
	if n.Options.Failover != nil || n.Options.Health.MaxFails != 2 || n.Options.Health.Domain != "." {
		t.Errorf("a next's defaults: %+v %+v", n.Options, n.Options.Health)
	}
	a := cfg.Stubs["a.example"].GroupOptions("")
	if a.Failover == nil || len(a.Failover) != 0 || a.Health.MaxFails != 1 {
		t.Errorf("stub a: %+v", a)
	}
	if b := cfg.Stubs["b.example"].GroupOptions(""); b.Failover != nil || b.Health.MaxFails != 2 || b.Failfast {
		t.Errorf("stub b: %+v", b)
	}
	if got := cfg.NamedServers(cfg.ClusterZones()); fmt.Sprint(got) != "[https://dns.google]" {
		t.Errorf("named servers %v", got)
	}
	// The defaults: failover unset, nodedns's retry.
	def, err := Load([]string{"--listen", "127.0.0.1:5300"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := def.DefaultGroupOptions(); o.Failover != nil || o.ReadTimeout != 2*time.Second || o.Health.MaxFails != 2 ||
		o.Health.Interval != 500*time.Millisecond || o.Health.Domain != "." || o.Expire != 10*time.Second || o.DoHMethod != "POST" {
		t.Errorf("defaults %+v %+v", o, o.Health)
	}
	// The flag form: empty is none.
	none, err := Load([]string{"--listen", "127.0.0.1:5300", "--upstream-failover="}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := none.DefaultGroupOptions(); o.Failover == nil || len(o.Failover) != 0 {
		t.Errorf("--upstream-failover= gave %v, want empty", o.Failover)
	}
}
