package config

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestClusterZoneOptions checks the cluster zone options (CoreDNS's
// kubernetes plugin options, for clusters that configured them there) as
// flags and as config keys, and what they become for pkg/k8s.
func TestClusterZoneOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("listen: [127.0.0.1:5353]\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	listen := []string{"--listen", "127.0.0.1:5353"}

	// Defaults: one zone, the reverse zones fall through, no filters.
	cfg, err := Load(listen, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.ClusterSettings()
	if !slices.Equal(kc.Zones, []string{"cluster.local"}) || !slices.Equal(kc.Fallthrough, []string{"in-addr.arpa", "ip6.arpa"}) ||
		kc.EndpointPodNames || kc.IgnoreEmptyService || kc.NoEndpoints || kc.Namespaces != nil || kc.NamespaceLabels != "" {
		t.Errorf("defaults: %+v", kc)
	}

	// Every option as a flag; --cluster-domain repeats.
	cfg, err = Load(append(listen, "--cluster-domain", "cluster.local", "--cluster-domain", "example.internal,corp.internal",
		"--endpoint-pod-names", "--ignore-empty-service", "--no-endpoints", "--namespaces", "ns1,ns2",
		"--fallthrough", "cluster.local,10.0.0.0/8"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	kc = cfg.ClusterSettings()
	if !slices.Equal(kc.Zones, []string{"cluster.local", "example.internal", "corp.internal"}) || !kc.EndpointPodNames ||
		!kc.IgnoreEmptyService || !kc.NoEndpoints || !slices.Equal(kc.Namespaces, []string{"ns1", "ns2"}) ||
		!slices.Equal(kc.Fallthrough, []string{"cluster.local", "10.0.0.0/8"}) {
		t.Errorf("flags: %+v", kc)
	}

	// `--fallthrough=` means none, not the default.
	cfg, err = Load(append(listen, "--fallthrough="), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if kc := cfg.ClusterSettings(); kc.Fallthrough == nil || len(kc.Fallthrough) != 0 {
		t.Errorf("--fallthrough= gives %#v, want an empty list", kc.Fallthrough)
	}

	// The same as keys of the file: cluster-domain a list or a string.
	file := write("a.yaml", `cluster-domain: [cluster.local, example.internal]
endpoint-pod-names: true
ignore-empty-service: true
no-endpoints: true
namespace-labels: "env in (prod, staging)"
fallthrough: []
`)
	cfg, err = Load([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	kc = cfg.ClusterSettings()
	if !slices.Equal(kc.Zones, []string{"cluster.local", "example.internal"}) || !kc.EndpointPodNames || !kc.IgnoreEmptyService ||
		!kc.NoEndpoints || kc.NamespaceLabels != "env in (prod, staging)" || kc.Fallthrough == nil || len(kc.Fallthrough) != 0 {
		t.Errorf("file: %+v", kc)
	}
	// A flag replaces the file's list rather than adding to it.
	cfg, err = Load([]string{"--config", file, "--cluster-domain", "k8s.internal"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.ClusterDomain, List{"k8s.internal"}) {
		t.Errorf("flag over file: cluster-domain %q", cfg.ClusterDomain)
	}
	file = write("b.yaml", "cluster-domain: example.internal\nnamespaces: [ns1]\nfallthrough: [in-addr.arpa, ip6.arpa, example.internal]\n")
	cfg, err = Load([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if kc := cfg.ClusterSettings(); !slices.Equal(kc.Zones, []string{"example.internal"}) || !slices.Equal(kc.Namespaces, []string{"ns1"}) ||
		len(kc.Fallthrough) != 3 {
		t.Errorf("file b: %+v", kc)
	}

	// Bad values fail with a message naming them.
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(listen, "--namespace-labels", "env in (prod"), `namespace-labels "env in (prod"`},
		{append(listen, "--namespaces", "ns1,Bad_NS"), `"Bad_NS"`},
		{append(listen, "--namespaces", "ns1", "--namespace-labels", "a=b"), "cannot both be set"},
		{append(listen, "--fallthrough", "example.com"), `fallthrough "example.com"`},
		{append(listen, "--fallthrough", "10.0.0.0/40"), `fallthrough "10.0.0.0/40"`},
		{append(listen, "--cluster-domain", "cluster.local", "--cluster-domain", "a..b"), `--cluster-domain "a..b": not a domain name`},
		{append(listen, "--cluster-domain", "cluster.local", "--cluster-domain", "cluster.local."), "given twice"},
		{append(listen, "--cluster-domain="), "--cluster-domain: want at least one domain"},
		{[]string{"--config", write("c.yaml", "no-endpoints: sometimes\n")}, `"no-endpoints"`},
		{[]string{"--config", write("d.yaml", "namespaces: {a: b}\n")}, `"namespaces"`},
	} {
		_, err := Load(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestClusterZoneOptionsRestartOnly: a reload that changes them says a
// restart is needed.
func TestClusterZoneOptionsRestartOnly(t *testing.T) {
	for _, key := range []string{"cluster-domain", "endpoint-pod-names", "ignore-empty-service", "no-endpoints", "namespaces", "namespace-labels", "fallthrough"} {
		if s := SettingByKey(key); s == nil || s.Live() {
			t.Errorf("%s: not a restart-only setting", key)
		}
	}
}
