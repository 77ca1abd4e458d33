package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

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
	for _, name := range []string{"kubeadm", "helm", "nodelocaldns"} {
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
	for _, want := range []string{odd + ":54: template IN A local.example: not carried; it synthesized answers from templates",
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
	kubeDNSMount(t, kd, map[string]string{"stubDomains": `{"acme.local": ["1.2.3.4"]}`, "upstreamNameservers": `["8.8.8.8"]`})
	code, out, errs = runMigrate(t, "--corefile", filepath.Join(fixtures, "nodelocaldns.corefile"), "--kube-dns-config", kd)
	if code != 0 || !strings.Contains(out, `"acme.local": ["1.2.3.4"]`) || !strings.Contains(out, `upstream: ["8.8.8.8"]`) {
		t.Errorf("with the kube-dns ConfigMap: exit %d, stderr %q\n%s", code, errs, out)
	}
	kubeDNSMount(t, kd, map[string]string{"stubDomains": `{"acme.local": [`})
	if code, _, errs := runMigrate(t, "--corefile", filepath.Join(fixtures, "nodelocaldns.corefile"), "--kube-dns-config", kd); code != 2 || !strings.Contains(errs, filepath.Join(kd, "stubDomains")) {
		t.Errorf("bad kube-dns ConfigMap: exit %d, %q", code, errs)
	}
}

// knownKeys are the keys of the configuration file: the settings table's
// and the optional header.
func knownKeys() map[string]bool {
	out := map[string]bool{"apiVersion": true, "kind": true}
	for _, s := range config.Settings() {
		out[s.Key()] = true
	}
	return out
}

// TestMigrateOutputLoads: every configuration migrate writes passes the
// agent's own loader and validation.
func TestMigrateOutputLoads(t *testing.T) {
	t.Setenv("POD_IP", "169.254.20.10")
	ca := dnstest.NewCA(t).File(t)
	corefiles, err := filepath.Glob(filepath.Join(fixtures, "*.corefile"))
	if err != nil || len(corefiles) == 0 {
		t.Fatal("no fixtures")
	}
	known := knownKeys()
	var stripped []string
	for _, cf := range corefiles {
		code, out, errs := runMigrate(t, "--corefile", cf)
		if code != 0 && code != 3 {
			t.Fatalf("%s: exit %d: %s", cf, code, errs)
		}
		var m map[string]json.RawMessage
		if err := yaml.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%s: output is not YAML: %v", cf, err)
		}
		for k := range m {
			if !known[k] {
				t.Errorf("%s: key %q is not a key of the loader", cf, k)
				stripped = append(stripped, k)
				delete(m, k)
			}
		}
		if _, ok := m["upstream-ca"]; ok {
			m["upstream-ca"], _ = json.Marshal(ca) // the fixture's path does not exist here
		}
		b, _ := json.Marshal(m)
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load([]string{"--config", p}, io.Discard); err != nil {
			t.Errorf("%s: the migrated configuration does not load: %v\n%s", filepath.Base(cf), err, out)
		}
	}
	sort.Strings(stripped)
	if len(stripped) > 0 {
		t.Logf("keys not yet known to the loader, checked at the YAML level only: %v", stripped)
	}
}

// kubeDNSMount writes files as a ConfigMap volume: the data in a fresh
// directory, ..data swapped to it, each key a link through ..data.
func kubeDNSMount(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}
