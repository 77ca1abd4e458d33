package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/config"
)

// `nodedns migrate --manifest` on NodeLocal DNSCache's manifest for
// Cilium's Local Redirect Policy gives a pod-mode configuration that serve
// loads with the pod's addresses, and refuses a manifest without a
// Corefile unless --corefile gives one.
func TestMigrateCiliumManifest(t *testing.T) {
	t.Setenv("KUBE_DNS_UPSTREAM_SERVICE_HOST", "10.96.0.11")
	man := filepath.Join(fixtures, "manifest", "nodelocaldns-cilium-lrp.yaml")
	code, out, errs := runMigrate(t, "--manifest", man)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q; want 0\n%s", code, errs, out)
	}
	flat := strings.Join(strings.Fields(strings.ReplaceAll(out, "# ", "")), " ")
	for _, want := range []string{"network-mode: pod", "local-ip: - 169.254.20.10 - 10.96.0.10", "cluster-dns: 10.96.0.11", "cluster-zone: forward",
		"DaemonSet node-local-dns runs node-cache with hostNetwork false, -setupinterface=false, -setupiptables=false"} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\nlisten:") {
		t.Errorf("pod mode output sets listen (bind 0.0.0.0 is the pod's addresses):\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_IPS", "169.254.64.7,fdd5:6e6f:6465::7")
	cfg, err := config.Load([]string{"--config=" + path}, io.Discard)
	if err != nil {
		t.Fatalf("the migrated configuration does not load: %v", err)
	}
	if !cfg.PodMode() || strings.Join(cfg.ListenAddrs(), " ") != "169.254.64.7:53 [fdd5:6e6f:6465::7]:53" {
		t.Errorf("pod mode %v, listen %v", cfg.PodMode(), cfg.ListenAddrs())
	}

	// __PILLAR__CLUSTER__DNS__ filled with the kube-dns ClusterIP itself
	// (a mistake the redirect turns into a loop): the output says what it
	// was told, and serve and validate refuse it, naming the value.
	t.Setenv("KUBE_DNS_UPSTREAM_SERVICE_HOST", "10.96.0.10")
	_, out, _ = runMigrate(t, "--manifest", man)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load([]string{"--config=" + path}, io.Discard); err == nil || !strings.Contains(err.Error(), `cluster-dns "10.96.0.10"`) {
		t.Errorf("cluster-dns of the redirected ClusterIP: %v", err)
	}

	// A manifest of the DaemonSet only.
	dsOnly := filepath.Join(t.TempDir(), "ds.yaml")
	b, err := os.ReadFile(man)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, d := range strings.Split(string(b), "\n---\n") {
		if strings.Contains(d, "kind: DaemonSet") {
			docs = append(docs, d)
		}
	}
	if err := os.WriteFile(dsOnly, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMigrate(t, "--manifest", dsOnly); code != 2 || !strings.Contains(errs, "has no ConfigMap with a Corefile: give --corefile") {
		t.Errorf("DaemonSet only: exit %d, %q", code, errs)
	}
	code, out, errs = runMigrate(t, "--manifest", dsOnly, "--corefile", filepath.Join(fixtures, "nodelocaldns.corefile"))
	if code != 3 || !strings.Contains(out, "network-mode: pod") || !strings.Contains(errs, "bind 169.254.20.10 10.96.0.10: in pod mode nodedns serves the pod's own addresses") {
		t.Errorf("DaemonSet with the host variant's Corefile: exit %d, stderr %q\n%s", code, errs, out)
	}
}
