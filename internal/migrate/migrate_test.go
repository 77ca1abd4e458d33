package migrate

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// testEnv is the environment the fixtures are migrated in.
func testEnv(k string) (string, bool) {
	v, ok := map[string]string{"POD_IP": "169.254.20.10"}[k]
	return v, ok
}

// fixtureKubeDNS is the kube-dns ConfigMap of the -kubedns golden files.
var fixtureKubeDNS = kubedns.Config{
	StubDomains: map[string][]string{
		"acme.local":   {"1.2.3.4", "1.2.3.5:5353"},
		"consul.local": {"dns.consul.svc.cluster.local"},
		"outside.test": {"ns.example.com"},
	},
	UpstreamNameservers: []string{"8.8.8.8", "8.8.4.4"},
}

func migrateFixture(t *testing.T, name string, kd *kubedns.Config) *Result {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", name+".corefile"))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local", Source: name + ".corefile"}
	if kd != nil {
		opts.KubeDNS, opts.KubeDNSDir = kd, "/etc/kube-dns"
	}
	res, err := Migrate(src, opts)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func droppedText(res *Result) string {
	var b strings.Builder
	for _, n := range res.Dropped {
		if n.File != "" {
			fmt.Fprintf(&b, "%s: %s\n", n.File, n.Text)
		} else {
			fmt.Fprintf(&b, "%d: %s\n", n.Line, n.Text)
		}
	}
	return b.String()
}

func golden(t *testing.T, file, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update after checking):\n--- got\n%s\n--- want\n%s", file, got, want)
	}
}

// TestGolden migrates every fixture and compares the YAML and the list of
// what was not carried with testdata/NAME.yaml and NAME.dropped.
func TestGolden(t *testing.T) {
	fixtures, err := filepath.Glob("testdata/*.corefile")
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("fixtures: %v %v", fixtures, err)
	}
	for _, f := range fixtures {
		name := strings.TrimSuffix(filepath.Base(f), ".corefile")
		t.Run(name, func(t *testing.T) {
			res := migrateFixture(t, name, nil)
			golden(t, name+".yaml", string(res.YAML))
			golden(t, name+".dropped", droppedText(res))
			var m map[string]any
			if err := yaml.Unmarshal(res.YAML, &m); err != nil {
				t.Fatalf("output is not YAML: %v", err)
			}
		})
	}
	t.Run("nodelocaldns-kubedns", func(t *testing.T) {
		res := migrateFixture(t, "nodelocaldns", &fixtureKubeDNS)
		golden(t, "nodelocaldns-kubedns.yaml", string(res.YAML))
		golden(t, "nodelocaldns-kubedns.dropped", droppedText(res))
	})
}

// keys parses the output into its keys.
func keys(t *testing.T, res *Result) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(res.YAML, &m); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, res.YAML)
	}
	return m
}

func expect(t *testing.T, m map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := m[k]
		if w == nil {
			if ok {
				t.Errorf("%s: %v, want it absent", k, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %#v, want %#v", k, got, w)
		}
	}
}

// TestCommonCorefiles: what the Corefiles operators run today become, key
// by key, and that nothing of them is lost.
func TestCommonCorefiles(t *testing.T) {
	list := func(s ...string) []any {
		out := make([]any, len(s))
		for i, x := range s {
			out[i] = x
		}
		return out
	}
	kubeadm := map[string]any{
		"local-ip": list("169.254.20.10"), "cluster-domain": list("cluster.local"), "pods": "insecure",
		"cluster-ttl": "30s", "fallthrough": list("in-addr.arpa", "ip6.arpa"), "autopath": false,
		"upstream": nil, "max-inflight": float64(1000), "max-ttl": "30s", "max-negative-ttl": "30s", "min-ttl": "5s",
		"prefetch": float64(0), "serve-stale": "0s", "loadbalance": "round_robin", "admin": "0.0.0.0:9153",
		"lameduck": "5s", "loop-check": true, "cluster-zone": nil,
	}
	for _, tc := range []struct {
		name string
		want map[string]any
	}{
		{"kubeadm", kubeadm},
		{"helm", kubeadm},
		{"nodelocaldns", map[string]any{
			"local-ip": list("169.254.20.10", "10.96.0.10"), "cluster-zone": "forward", "cluster-dns": "10.96.0.11",
			"cluster-dns-protocol": "tcp", "cluster-ttl": "5s", "upstream": nil, "max-ttl": "30s", "admin": "0.0.0.0:9253",
			"loop-check": true, "autopath": false, "cluster-domain": list("cluster.local"), "stub-domains": nil,
		}},
	} {
		res := migrateFixture(t, tc.name, nil)
		if len(res.Dropped) != 0 {
			t.Errorf("%s: not everything carried: %s", tc.name, droppedText(res))
		}
		m := keys(t, res)
		if tc.name == "helm" {
			delete(tc.want, "max-inflight")
			tc.want["max-inflight"] = nil
		}
		expect(t, m, tc.want)
	}
}

// TestKubeDNSMerge: node-cache puts the ConfigMap's upstreamNameservers in
// place of the node's resolvers and adds its stub domains.
func TestKubeDNSMerge(t *testing.T) {
	res := migrateFixture(t, "nodelocaldns", &fixtureKubeDNS)
	m := keys(t, res)
	if got := fmt.Sprint(m["upstream"]); got != "[8.8.8.8 8.8.4.4]" {
		t.Errorf("upstream %s, want the ConfigMap's", got)
	}
	stubs := res.Config.Stubs
	if fmt.Sprint(stubs["acme.local"].Servers) != "[1.2.3.4 1.2.3.5:5353]" {
		t.Errorf("stub domains %v", stubs)
	}
	// node-cache's Corefile forwards the cluster zone: nodedns then has no
	// Service index to resolve a server name from.
	if _, ok := stubs["consul.local"]; ok || !strings.Contains(droppedText(res), "consul.local: server dns.consul.svc.cluster.local is a name") {
		t.Errorf("a stub server named in forward mode: %v\n%s", stubs, droppedText(res))
	}
	if _, ok := stubs["outside.test"]; ok || !strings.Contains(droppedText(res), "/etc/kube-dns/stubDomains: stub domain outside.test: nameserver ns.example.com") {
		t.Errorf("a stub nameserver named outside the cluster zone: %v\n%s", stubs, droppedText(res))
	}

	// With the cluster zone answered locally, names resolve.
	src := []byte(".:53 {\n    kubernetes cluster.local\n    forward . /etc/resolv.conf\n}\n")
	r1, err := Migrate(src, Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local", KubeDNS: &fixtureKubeDNS, KubeDNSDir: "/etc/kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	stubs = r1.Config.Stubs
	if fmt.Sprint(stubs["consul.local"].Servers) != "[dns.consul.svc.cluster.local]" {
		t.Errorf("stub server named in the cluster zone: %v", stubs)
	}

	// A Corefile naming its upstreams keeps them.
	src = []byte(".:53 {\n    forward . 9.9.9.9\n}\nacme.local {\n    forward . 10.0.0.1\n}\n")
	r2, err := Migrate(src, Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local", KubeDNS: &fixtureKubeDNS, KubeDNSDir: "/etc/kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	stubs = r2.Config.Stubs
	if fmt.Sprint(r2.Config.Upstream) != "[9.9.9.9]" || fmt.Sprint(stubs["acme.local"].Servers) != "[10.0.0.1]" {
		t.Errorf("Corefile's own settings: upstream %v, acme.local %v", r2.Config.Upstream, stubs["acme.local"])
	}
	d := droppedText(r2)
	if !strings.Contains(d, "upstreamNameservers 8.8.8.8 8.8.4.4: not used") || !strings.Contains(d, "stub domain acme.local") {
		t.Errorf("what the ConfigMap could not add is not said:\n%s", d)
	}
}

// TestDirectiveNotes: every directive or option not carried is named with
// its line and what it would have done.
func TestDirectiveNotes(t *testing.T) {
	for _, tc := range []struct {
		src, want string
		line      int
	}{
		{".:53 {\n  template IN A example.org {\n    expr incidr(client_ip(), '10.0.0.0/8')\n  }\n}\n", "expressions", 3},
		{".:53 {\n  acl {\n    block foo type A\n  }\n}\n", "neither type nor net", 3},
		{".:53 {\n  frobnicate\n}\n", "unknown directive", 2},
		{".:53 {\n  forward . quic://1.1.1.1\n}\n", "DNS over QUIC", 2},
		{".:53 {\n  forward . 1.1.1.1 {\n    max_connect_attempts 3\n  }\n}\n", "at most twice per query", 3},
		{".:53 {\n  forward . 1.1.1.1 {\n    failover NOERROR\n  }\n}\n", "error rcode names", 3},
		{".:53 {\n  forward . 1.1.1.1 {\n    next 1.2.3.4\n  }\n}\n", "rcode names", 3},
		{".:53 {\n  forward . 1.1.1.1 {\n    next NXDOMAIN\n  }\n  forward . /etc/resolv.conf\n}\n", "the node's resolvers as the servers a reply goes on to", 5},
		{".:53 {\n  forward . /etc/other.conf\n}\n", "/etc/other.conf", 2},
		{".:53 {\n  cache 30 example.org\n}\n", "caching only example.org", 2},
		{".:53 {\n  cache {\n    serve_stale 1h verify 1s 1.5s\n  }\n}\n", "whole seconds", 3},
		{".:53 {\n  cache {\n    prefetch 2 1m 95%\n  }\n}\n", "10% to 90%", 3},
		{".:53 {\n  cache {\n    serve_stale_policy prefer_negative\n  }\n}\n", "prefer_positive", 3},
		{".:53 {\n  kubernetes cluster.local {\n    labels a=b\n  }\n}\n", "selector", 3},
		{".:53 {\n  rewrite ttl example.org 10\n}\n", "query names only", 2},
		{".:53 {\n  rewrite name regex (.*) {1}.x metadata\n}\n", "metadata", 2},
		{"example.org {\n  rewrite name regex (.*)\\.a {1}.b\n}\n", "every zone", 2},
		{".:53 {\n  autopath /etc/resolv.conf\n}\n", "autopath", 2},
		{".:53 {\n  log . {\n    class denial bogus\n  }\n}\n", "log class bogus", 3},
		{".:53 {\n  log . {\n    format {name}\n  }\n}\n", "format", 3},
		{".:53 {\n  bind eth0\n}\n", "interface names", 2},
		{".:53 {\n  hosts /etc/hosts {\n    bogus\n  }\n  hosts /etc/other\n}\n", "second hosts", 5},
		{".:53 {\n  loadbalance round_robin {\n    prefer 10.0.0.0/8\n  }\n}\n", "prefer", 3},
		{"grpc://.:443 {\n  forward . 1.1.1.1\n}\n", "GRPC", 1},
		{".:53 {\n}\nexample.org:1053 {\n  forward . 1.1.1.1\n}\n", "port 1053", 3},
		{".:53 {\n  cache 30\n}\nexample.org {\n  cache 60\n  forward . 1.1.1.1\n}\n", "already set max-ttl", 5},
		{".:53 {\n  dnssec\n}\n", "DNSSEC", 2},
		{".:53 {\n  kubernetes cluster.local {\n    multicluster clusterset.local\n  }\n}\n", "not a zone of the kubernetes directive", 3},
	} {
		res, err := Migrate([]byte(tc.src), Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local"})
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		found := false
		for _, n := range res.Dropped {
			if n.Line == tc.line && strings.Contains(n.Text, tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: no note at line %d with %q:\n%s", tc.src, tc.line, tc.want, droppedText(res))
		}
	}
}

// TestCarried: forms that carry fully.
func TestCarried(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want map[string]any
	}{
		{".:53 {\n  forward . tls://1.1.1.1 tls://1.0.0.1 {\n    tls_servername cloudflare-dns.com\n    health_check 0.5s\n  }\n}\n",
			map[string]any{"upstream": []any{"tls://1.1.1.1#cloudflare-dns.com", "tls://1.0.0.1#cloudflare-dns.com"}}},
		{".:53 {\n  forward . 10.0.0.1 {\n    force_tcp\n    prefer_udp\n  }\n}\n",
			map[string]any{"force-tcp": true, "prefer-udp": nil}},
		{".:53 {\n  forward . 10.0.0.1\n}\nsvc.example:53 {\n  forward . dns.tools.svc.cluster.local:5353\n}\n",
			map[string]any{"stub-domains": map[string]any{"svc.example": map[string]any{"servers": []any{"dns.tools.svc.cluster.local:5353"}, "failover": []any{}}}}},
		{".:53 {\n  forward example.org 10.0.0.1 10.0.0.2 {\n    policy round_robin\n  }\n}\n",
			map[string]any{"stub-domains": map[string]any{"example.org": map[string]any{"servers": []any{"10.0.0.1", "10.0.0.2"}, "policy": "round_robin", "failover": []any{}}}}},
		{"10.0.0.0/16 {\n  forward . 10.0.0.53\n}\n",
			map[string]any{"stub-domains": map[string]any{"0.10.in-addr.arpa": map[string]any{"servers": []any{"10.0.0.53"}, "failover": []any{}}}}},
		{".:53 {\n  cache 600 {\n    success 5000\n    denial 1000 60\n    prefetch 3 1m 10%\n    serve_stale\n  }\n}\n",
			map[string]any{"cache-size": float64(6000), "max-ttl": "10m0s", "max-negative-ttl": "1m0s", "prefetch": float64(3), "serve-stale": "1h0m0s"}},
		{".:53 {\n  cache 3600 {\n    keepttl\n    denial 100 60 10\n    servfail 0\n    prefetch 2 30s 25%\n    serve_stale 2h verify 300ms 30s 5s\n    serve_stale_policy prefer_positive\n    disable success example.net\n    disable denial\n  }\n}\n",
			map[string]any{"cache-keep-ttl": true, "min-negative-ttl": "10s", "servfail-ttl": "0s", "prefetch": float64(2), "prefetch-window": "30s",
				"prefetch-percent": float64(25), "serve-stale": "2h0m0s", "serve-stale-mode": "verify", "serve-stale-timeout": "300ms",
				"serve-stale-ttl": "30s", "serve-stale-recheck": "5s", "serve-stale-policy": "prefer_positive",
				"cache-disable-success": []any{"example.net"}, "cache-disable-denial": []any{"."}}},
		{".:53 {\n  forward . 10.0.0.1\n}\n",
			map[string]any{"serve-stale": "0s", "prefetch": float64(0), "servfail-ttl": "0s", "min-ttl": nil}},
		{".:53 {\n  cache {\n    serve_stale 10m\n  }\n}\n",
			map[string]any{"serve-stale": "10m0s", "serve-stale-mode": "immediate", "serve-stale-timeout": nil, "serve-stale-ttl": "0s", "serve-stale-recheck": "0s", "min-negative-ttl": "5s"}},
		{".:53 {\n  kubernetes cluster.local\n  cache {\n    disable success cluster.local\n  }\n}\nexample.org {\n  forward . 10.0.0.1\n  cache {\n    disable denial\n  }\n}\n",
			map[string]any{"cache-disable-success": nil, "cache-disable-denial": []any{"example.org"}}},
		{".:53 {\n  hosts /etc/custom.hosts example.org {\n    10.0.0.9 a.example.org\n    reload 10s\n  }\n}\n",
			map[string]any{"hosts": map[string]any{"file": "/etc/custom.hosts", "zones": []any{"example.org"}, "entries": []any{"10.0.0.9 a.example.org"}, "reload": "10s"}}},
		{".:53 {\n  rewrite stop {\n    name regex (.*)\\.a\\.example {1}.b.example\n    answer name (.*)\\.b\\.example {1}.a.example\n  }\n}\n",
			map[string]any{"rewrite": []any{map[string]any{"type": "regex", "from": "(.*)\\.a\\.example", "to": "{1}.b.example", "mode": "stop"}}}},
		{".:53 {\n  kubernetes cluster.local {\n    pods verified\n    noendpoints\n    namespace_labels env in (prod)\n    startup_timeout 10s\n    kubeconfig /etc/kubeconfig\n  }\n}\n",
			map[string]any{"pods": "verified", "no-endpoints": true, "namespace-labels": "env in (prod)", "cluster-sync-wait": "10s", "kubeconfig": "/etc/kubeconfig", "fallthrough": []any{}}},
		{".:53 {\n  kubernetes cluster.local {\n    kubeconfig /etc/coredns/kubeconfig prod-admin\n    pods insecure\n  }\n}\n",
			map[string]any{"kubeconfig": "/etc/coredns/kubeconfig", "kubeconfig-context": "prod-admin"}},
		// The multicluster zone is answered from ServiceImports, not a
		// second cluster domain.
		{".:53 {\n  kubernetes cluster.local clusterset.local in-addr.arpa ip6.arpa {\n    multicluster clusterset.local\n    pods insecure\n    fallthrough in-addr.arpa ip6.arpa\n  }\n}\n",
			map[string]any{"cluster-domain": []any{"cluster.local"}, "multicluster-domain": []any{"clusterset.local"}}},
		{"cluster.local clusterset.local {\n  kubernetes {\n    multicluster clusterset.local\n    pods insecure\n  }\n}\n",
			map[string]any{"cluster-domain": []any{"cluster.local"}, "multicluster-domain": []any{"clusterset.local"}}},
		{"cluster.local:53 {\n  errors\n  kubernetes {\n    pods verified\n  }\n  cache 30\n}\nin-addr.arpa:53 ip6.arpa:53 {\n  kubernetes\n}\n.:53 {\n  errors\n  forward . 9.9.9.9\n  cache 300\n}\n",
			map[string]any{"cluster-domain": []any{"cluster.local"}, "pods": "verified", "upstream": []any{"9.9.9.9"}, "max-ttl": "5m0s", "cluster-zone": nil, "stub-domains": nil}},
		{"in-addr.arpa ip6.arpa {\n  kubernetes\n}\ncluster.local {\n  kubernetes {\n    pods verified\n  }\n}\n",
			map[string]any{"cluster-domain": []any{"cluster.local"}, "pods": "verified"}},
		{".:53 {\n  template IN AAAA . {\n    rcode NOERROR\n  }\n  template IN A ocp.example.com {\n    match .*.apps.ocp.example.com\n    answer \"{{ .Name }} 60 in {{ .Type }} 192.0.2.100\"\n    fallthrough\n  }\n}\nblocked.example {\n  template ANY ANY {\n    rcode NXDOMAIN\n    authority \"blocked.example. 60 IN SOA ns.blocked.example. h.blocked.example. 1 60 60 60 60\"\n    ederror 15 \"Blocked by policy\"\n  }\n}\n",
			map[string]any{"templates": []any{
				map[string]any{"type": "AAAA", "rcode": "NOERROR"},
				map[string]any{"type": "A", "zones": []any{"ocp.example.com"}, "match": []any{".*.apps.ocp.example.com"}, "answer": []any{"{{ .Name }} 60 in {{ .Type }} 192.0.2.100"}, "fallthrough": []any{}},
				map[string]any{"class": "ANY", "type": "ANY", "zones": []any{"blocked.example"}, "rcode": "NXDOMAIN",
					"authority": []any{"blocked.example. 60 IN SOA ns.blocked.example. h.blocked.example. 1 60 60 60 60"}, "ede": map[string]any{"code": float64(15), "reason": "Blocked by policy"}}}}},
		{".:53 {\n  acl {\n    block type AXFR IXFR\n    allow net 10.0.0.0/8 fd00::/8\n    block\n  }\n  acl internal.example {\n    filter type MX net *\n  }\n  local {\n    localhost_prefix off\n  }\n  chaos v1 alice bob\n  minimal\n  header {\n    response set ra aa\n    query clear rd\n  }\n}\n",
			map[string]any{"acl": []any{
				map[string]any{"policies": []any{map[string]any{"action": "block", "types": []any{"AXFR", "IXFR"}}, map[string]any{"action": "allow", "nets": []any{"10.0.0.0/8", "fd00::/8"}}, map[string]any{"action": "block"}}},
				map[string]any{"zones": []any{"internal.example"}, "policies": []any{map[string]any{"action": "filter", "types": []any{"MX"}, "nets": []any{"*"}}}}},
				"local": true, "local-localhost-prefix": false, "chaos": true, "chaos-version": "v1", "chaos-authors": []any{"alice", "bob"},
				"minimal-responses": true, "header": map[string]any{"response": map[string]any{"set": []any{"ra", "aa"}}, "query": map[string]any{"clear": []any{"rd"}}}}},
		{".:53 {\n  bufsize 1232\n  any\n  cancel\n  errors {\n    consolidate 5m \".*\"\n  }\n  log\n}\n",
			map[string]any{"max-udp-size": float64(1232), "log-queries": float64(1)}},
	} {
		res, err := Migrate([]byte(tc.src), Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local"})
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		if len(res.Dropped) != 0 {
			t.Errorf("%q: dropped %s", tc.src, droppedText(res))
		}
		expect(t, keys(t, res), tc.want)
	}
}

// TestOutputReadsBack: the file migrate writes is its typed configuration:
// read back by the agent's loader (strictly, as `config validate` does) it
// is the same configuration, setting by setting, with the keys it set
// given and no others.
func TestOutputReadsBack(t *testing.T) {
	ca := dnstest.NewCA(t).File(t)
	fixtures, err := filepath.Glob("testdata/*.corefile")
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("fixtures: %v %v", fixtures, err)
	}
	for _, f := range fixtures {
		name := strings.TrimSuffix(filepath.Base(f), ".corefile")
		for _, kd := range []*kubedns.Config{nil, &fixtureKubeDNS} {
			res := migrateFixture(t, name, kd)
			want := res.Config
			out := string(res.YAML)
			if want.UpstreamCA != "" { // the fixture's path does not exist here
				out = strings.ReplaceAll(out, "upstream-ca: "+want.UpstreamCA+"\n", "upstream-ca: "+ca+"\n")
				want.UpstreamCA = ca
			}
			p := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			got, r, err := config.Parse([]string{"--config", p}, true, nil)
			if err == nil {
				err = r.Err()
			}
			if err != nil {
				t.Errorf("%s: the written file does not validate: %v\n%s", name, err, out)
				continue
			}
			for _, s := range config.Settings() {
				if s.Differs(&want, &got) {
					t.Errorf("%s: %s built as %#v, read back as %#v", name, s.Key(), s.Get(&want), s.Get(&got))
				}
				if got.IsGiven(s.Key()) != slices.Contains(res.Keys, s.Key()) {
					t.Errorf("%s: %s given %v in the file, set %v by the migration", name, s.Key(), got.IsGiven(s.Key()), slices.Contains(res.Keys, s.Key()))
				}
			}
		}
	}
}

// TestLogClasses: log's class options become log-queries-class.
func TestLogClasses(t *testing.T) {
	for src, want := range map[string]string{
		".:53 {\n  log {\n    class denial error\n  }\n}\n":              "denial,error",
		".:53 {\n  log . {\n    class denial\n    class error\n  }\n}\n": "denial,error",
		".:53 {\n  log {\n    class all\n  }\n}\n":                       "",
		".:53 {\n  log\n}\n": "",
	} {
		res, err := Migrate([]byte(src), Options{Env: testEnv, ClusterDomain: "cluster.local"})
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if len(res.Dropped) != 0 {
			t.Errorf("%q: not carried: %s", src, droppedText(res))
		}
		if got := res.Config.LogQueriesClass.String(); got != want || res.Config.LogQueries != 1 {
			t.Errorf("%q: log-queries-class %q, log-queries %v; want %q and 1", src, got, res.Config.LogQueries, want)
		}
	}
}

// TestClusterDomainNeverAssumed: without a kubernetes directive the
// cluster domain must be given; a node-local-dns Corefile for k8s.example
// then forwards k8s.example (no stub domains), and a given domain the
// kubernetes directive does not answer is a note.
func TestClusterDomainNeverAssumed(t *testing.T) {
	nl, err := os.ReadFile(filepath.Join("testdata", "nodelocaldns.corefile"))
	if err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(string(nl), "cluster.local:53", "k8s.example:53")
	if _, err := Migrate([]byte(src), Options{Env: testEnv}); !errors.Is(err, ErrNoClusterDomain) {
		t.Fatalf("no cluster domain given: err %v, want ErrNoClusterDomain", err)
	}
	res, err := Migrate([]byte(src), Options{Env: testEnv, ClusterDomain: "k8s.example.", ClusterDomainFrom: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Config.ClusterDomain.String(); got != "k8s.example" || res.Config.ClusterZone != "forward" || len(res.Config.Stubs) != 0 || len(res.Dropped) != 0 {
		t.Errorf("cluster-domain %q, cluster-zone %q, stub-domains %v, dropped %s", got, res.Config.ClusterZone, res.Config.Stubs, droppedText(res))
	}
	if strings.Contains(string(res.YAML), "neither answers nor forwards") {
		t.Errorf("the header says the cluster zone is neither answered nor forwarded:\n%s", res.YAML)
	}
	kube := ".:53 {\n  kubernetes cluster.local example.internal in-addr.arpa ip6.arpa\n  forward . 192.0.2.1\n}\n"
	res, err = Migrate([]byte(kube), Options{Env: testEnv, ClusterDomain: "example.internal"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Config.ClusterDomain.String(); got != "example.internal,cluster.local" {
		t.Errorf("given domain among the directive's zones: cluster-domain %q, want it first", got)
	}
	res, err = Migrate([]byte(kube), Options{Env: testEnv, ClusterDomain: "other.example", ClusterDomainFrom: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(droppedText(res), "other.example") {
		t.Errorf("a given domain the Corefile does not answer: no note: %s", droppedText(res))
	}
}
