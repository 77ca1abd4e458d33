package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
)

const fixtures = "../../internal/migrate/testdata"

func runMigrate(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	given := false
	for _, a := range args {
		given = given || strings.HasPrefix(a, "--cluster-domain") || strings.HasPrefix(a, "--kubelet-config")
	}
	if !given {
		args = append([]string{"--cluster-domain", "cluster.local"}, args...)
	}
	code = run(append([]string{"migrate"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestMigrateClusterDomain: a Corefile without a kubernetes directive
// (NodeLocal DNSCache's) gets its cluster domain from --cluster-domain or
// the kubelet's clusterDomain, written into the output, and never
// cluster.local by assumption: without either, exit 2 with a message
// naming both flags.
func TestMigrateClusterDomain(t *testing.T) {
	nl := strings.ReplaceAll(readFixture(t, "nodelocaldns.corefile"), "cluster.local:53", "k8s.example:53")
	corefile := writeFile(t, nl)
	code, out, errb := runMigrate(t, "--corefile", corefile, "--cluster-domain=")
	if code != 2 || out != "" || !strings.Contains(errb, "--cluster-domain") || !strings.Contains(errb, "--kubelet-config") {
		t.Errorf("no domain: exit %d, stdout %q, stderr %q; want exit 2 naming both flags", code, out, errb)
	}
	kubelet := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(kubelet, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDomain: k8s.example\nclusterDNS: [169.254.20.10]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--cluster-domain", "k8s.example"}, {"--kubelet-config", kubelet}, {"--kubelet-config", kubelet, "--cluster-domain", "k8s.example."}} {
		code, out, errb := runMigrate(t, append([]string{"--corefile", corefile}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errb)
		}
		if !strings.Contains(out, "\ncluster-domain:\n- k8s.example\n") || !strings.Contains(out, "cluster-zone: forward") || strings.Contains(out, "stub-domains") {
			t.Errorf("%q: want k8s.example as the forwarded cluster domain, no stub domains:\n%s", args, out)
		}
	}
	if code, _, errb := runMigrate(t, "--corefile", corefile, "--kubelet-config", kubelet, "--cluster-domain", "cluster.local"); code != 2 || !strings.Contains(errb, "disagree") {
		t.Errorf("disagreeing domains: exit %d, %q", code, errb)
	}
}

func TestMigrateCommand(t *testing.T) {
	t.Setenv("POD_IP", "169.254.20.10")
	for _, name := range []string{"kubeadm", "helm", "nodelocaldns", "wild-01-kubeadm-ipv4only", "wild-05-openshift-onprem"} {
		code, out, errs := runMigrate(t, "--corefile", filepath.Join(fixtures, name+".corefile"))
		if code != 0 || errs != "" || !strings.Contains(out, "local-ip:") {
			t.Errorf("%s: exit %d, stderr %q; want 0 and a configuration", name, code, errs)
		}
	}
	odd := filepath.Join(fixtures, "odd.corefile")
	code, out, errs := runMigrate(t, "--corefile", odd)
	if code != 3 || !strings.Contains(out, "stub-domains:") {
		t.Errorf("odd: exit %d; want 3 and a configuration", code)
	}
	for _, want := range []string{odd + ":72: whoami: not carried; it answered with the client's address and port",
		odd + ":9: import common: not followed", odd + ":2: snippet (common)", "not carried (listed above)"} {
		if !strings.Contains(errs, want) {
			t.Errorf("odd: stderr lacks %q:\n%s", want, errs)
		}
	}

	dir := t.TempDir()
	broken := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(broken, []byte(".:53 {\n    forward . 1.1.1.1 {\n        force_tcp\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runMigrate(t, "--corefile", broken); code != 2 || out != "" || !strings.Contains(errs, broken+": line 1: server block") {
		t.Errorf("unbalanced braces: exit %d, stdout %q, stderr %q; want 2 naming the line", code, out, errs)
	}
	if code, _, errs := runMigrate(t, "--corefile", filepath.Join(dir, "missing")); code != 2 || !strings.Contains(errs, "missing") {
		t.Errorf("missing file: exit %d, %q", code, errs)
	}
	// A Corefile is a ConfigMap key: over 1 MiB it is no Corefile, and it
	// is refused without being read whole.
	huge := filepath.Join(dir, "Corefile.huge")
	if err := os.WriteFile(huge, []byte(".:53 {\n"+strings.Repeat("# padding\n", 110000)+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runMigrate(t, "--corefile", huge); code != 2 || out != "" || !strings.Contains(errs, huge) || !strings.Contains(errs, "1 MiB") {
		t.Errorf("a 1.1 MB Corefile: exit %d, stdout %d bytes, stderr %q; want 2 naming the file and the bound", code, len(out), errs)
	}
	if code, _, errs := runMigrate(t); code != 2 || !strings.Contains(errs, "--corefile is required") {
		t.Errorf("no --corefile: exit %d, %q", code, errs)
	}
	if code, _, _ := runMigrate(t, "--corefile", broken, "extra"); code != 2 {
		t.Errorf("extra argument: exit %d", code)
	}
	if code, _, _ := runMigrate(t, "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}

	// The kube-dns ConfigMap: merged, and a bad one names its file.
	kd := filepath.Join(dir, "kube-dns")
	if err := os.Mkdir(kd, 0o755); err != nil {
		t.Fatal(err)
	}
	dnstest.MountConfigMap(t, kd, map[string]string{"stubDomains": `{"acme.local": ["1.2.3.4"]}`, "upstreamNameservers": `["8.8.8.8"]`})
	code, out, errs = runMigrate(t, "--corefile", filepath.Join(fixtures, "nodelocaldns.corefile"), "--kube-dns-config", kd)
	if code != 0 || !strings.Contains(out, "\n  acme.local:\n    failover: []\n    servers:\n    - 1.2.3.4\n") || !strings.Contains(out, "\nupstream:\n- 8.8.8.8\n") {
		t.Errorf("with the kube-dns ConfigMap: exit %d, stderr %q\n%s", code, errs, out)
	}
	dnstest.MountConfigMap(t, kd, map[string]string{"stubDomains": `{"acme.local": [`})
	if code, _, errs := runMigrate(t, "--corefile", filepath.Join(fixtures, "nodelocaldns.corefile"), "--kube-dns-config", kd); code != 2 || !strings.Contains(errs, filepath.Join(kd, "stubDomains")) {
		t.Errorf("bad kube-dns ConfigMap: exit %d, %q", code, errs)
	}
}

// TestMigrateOutputLoads: every configuration migrate writes passes the
// agent's own loader and `config validate` (the keys are the settings
// table's: the file is written from a typed configuration).
func TestMigrateOutputLoads(t *testing.T) {
	t.Setenv("POD_IP", "169.254.20.10")
	ca := dnstest.NewCA(t).File(t)
	corefiles, err := filepath.Glob(filepath.Join(fixtures, "*.corefile"))
	if err != nil || len(corefiles) == 0 {
		t.Fatal("no fixtures")
	}
	for _, cf := range corefiles {
		code, out, errs := runMigrate(t, "--corefile", cf)
		if code != 0 && code != 3 {
			t.Fatalf("%s: exit %d: %s", cf, code, errs)
		}
		// The fixture's CA path does not exist here.
		out = regexp.MustCompile(`(?m)^upstream-ca: .*$`).ReplaceAllString(out, "upstream-ca: "+ca)
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load([]string{"--config", p}, io.Discard); err != nil {
			t.Errorf("%s: the migrated configuration does not load: %v\n%s", filepath.Base(cf), err, out)
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"config", "validate", p}, &stdout, &stderr); code != 0 {
			t.Errorf("%s: config validate: exit %d: %s", filepath.Base(cf), code, stderr.String())
		}
	}
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMigrateNodeLocalDNSVariantsServe: the Corefiles of NodeLocal
// DNSCache's manifest as its iptables and IPVS instructions fill them, in
// two cluster domains, migrate to a configuration that `nodedns serve`
// starts with (its checks, then the agent built: nothing bound).
func TestMigrateNodeLocalDNSVariantsServe(t *testing.T) {
	for _, v := range []struct {
		fixture, clusterDNS, localIPs string
	}{
		{"nodelocaldns-runtime.corefile", "10.96.0.11", "- 169.254.20.10\n- 10.96.0.10\n"}, // iptables: kube-dns ClusterIP bound too
		{"nodelocaldns-ipvs.corefile", "", "- 169.254.20.10\n"},                            // IPVS: the link-local address only
	} {
		for _, domain := range []string{"cluster.local", "k8s.example"} {
			src := strings.ReplaceAll(readFixture(t, v.fixture), "cluster.local:53", domain+":53")
			corefile := writeFile(t, src)
			args := []string{"--corefile", corefile, "--cluster-domain", domain}
			if v.clusterDNS != "" {
				args = append(args, "--cluster-dns", v.clusterDNS)
			}
			code, out, errb := runMigrate(t, args...)
			if code != 0 {
				t.Fatalf("%s %s: exit %d: %s", v.fixture, domain, code, errb)
			}
			for _, want := range []string{"cluster-domain:\n- " + domain + "\n", "cluster-zone: forward\n", "local-ip:\n" + v.localIPs} {
				if !strings.Contains(out, want) {
					t.Errorf("%s %s: output lacks %q:\n%s", v.fixture, domain, want, out)
				}
			}
			if err := serveStartVerdict(t, writeFile(t, out)); err != nil {
				t.Errorf("%s %s: serve refuses the migrated configuration: %v\n%s", v.fixture, domain, err, out)
			}
		}
	}
}
