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
	code = run(append([]string{"migrate"}, args...), &out, &errb)
	return code, out.String(), errb.String()
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
