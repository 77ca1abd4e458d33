package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestLoadConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("listen: [127.0.0.1:5353]\ncache-size: 500\nmax-ttl: 10m\nupstream: 192.0.2.1,192.0.2.2\nstub-domains:\n  corp.example: [192.0.2.53]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file, "--cache-size", "700"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CacheSize != 700 {
		t.Errorf("flag did not override file: cache-size %d", cfg.CacheSize)
	}
	if time.Duration(cfg.MaxTTL) != 10*time.Minute || len(cfg.Upstream) != 2 || cfg.Stubs["corp.example"].Servers[0] != "192.0.2.53" {
		t.Errorf("file values not applied: %+v", cfg)
	}
	if cfg.ClusterDomain.String() != "cluster.local" || !cfg.Autopath {
		t.Errorf("defaults lost: %+v", cfg)
	}
}

func TestLoadConfigErrorsNameTheValue(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: [127.0.0.1:5353]\ncahce-size: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	num := filepath.Join(dir, "num.yaml")
	if err := os.WriteFile(num, []byte("listen: [127.0.0.1:5353]\nsync-interval: 30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "nope"}, `--listen "nope"`},
		{[]string{"--listen", "127.0.0.1:53", "--cache-size", "0"}, "--cache-size 0"},
		{[]string{"--listen", "127.0.0.1:53", "--pods", "all"}, `--pods "all"`},
		{[]string{"--listen", "127.0.0.1:53", "--sync-interval", "30"}, `"30" is not a Go duration`},
		{[]string{"--listen", "127.0.0.1:53", "--local-ip", "169.254.20.300"}, `--local-ip "169.254.20.300"`},
		{[]string{"--listen", "127.0.0.1:53", "--cluster-ttl", "2h"}, "--cluster-ttl 2h0m0s"},
		{[]string{}, "nothing to listen on"},
		{[]string{"--config", bad}, "cahce-size"},
		{[]string{"--config", num}, "sync-interval"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
	}
	for _, c := range cases {
		_, err := loadConfig(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadConfig(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestDaemonSetConfigLoads keeps the ConfigMap in deploy/daemonset.yaml and
// the serve flags in step: the file must load as it is shipped.
func TestDaemonSetConfigLoads(t *testing.T) {
	b, err := os.ReadFile("../../deploy/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("manifest document: %v", err)
		}
		if obj.Kind != "ConfigMap" {
			continue
		}
		found = true
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, []byte(obj.Data["config.yaml"]), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig([]string{"--config", file}, io.Discard)
		if err != nil {
			t.Fatalf("shipped config does not load: %v", err)
		}
		if len(cfg.LocalIP) != 1 || cfg.LocalIP[0] != "169.254.20.10" || cfg.AdminSocket == "" {
			t.Fatalf("shipped config: %+v", cfg)
		}
	}
	if !found {
		t.Fatal("no ConfigMap in deploy/daemonset.yaml")
	}
}

func TestRunVersionAndUnknown(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "nodedns ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
	errb.Reset()
	if code := run([]string{"serve", "--cache-size", "-1", "--listen", "127.0.0.1:1"}, &out, &errb); code != 1 ||
		strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
		t.Fatalf("bad flag: exit %d, message %q (want one line)", code, errb.String())
	}
}

// TestSchedulerProcs: by default one P per UDP thread reader (sockets x
// listen addresses) plus one; --gomaxprocs and $GOMAXPROCS win.
func TestSchedulerProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	cases := []struct {
		args []string
		env  string
		want int
	}{
		{[]string{"--local-ip", "169.254.20.10"}, "", 2},
		{[]string{"--local-ip", "169.254.20.10,10.96.0.10"}, "", 3},
		{[]string{"--local-ip", "169.254.20.10,10.96.0.10", "--udp-sockets", "2"}, "", 5},
		{[]string{"--listen", "127.0.0.1:5353", "--udp-readers", "poller"}, "", 1},
		{[]string{"--local-ip", "169.254.20.10", "--gomaxprocs", "4"}, "", 4},
		{[]string{"--local-ip", "169.254.20.10"}, "3", 0},
	}
	for _, c := range cases {
		if c.env != "" {
			t.Setenv("GOMAXPROCS", c.env)
		} else {
			os.Unsetenv("GOMAXPROCS")
		}
		cfg, err := loadConfig(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if got := cfg.schedulerProcs(); got != c.want {
			t.Errorf("%q with GOMAXPROCS=%q: %d Ps, want %d", c.args, c.env, got, c.want)
		}
	}
}
