package config

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
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
	cfg, err := Load([]string{"--config", file, "--cache-size", "700"}, io.Discard)
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
		{[]string{"--config", num}, "sync-interval"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
	}
	for _, c := range cases {
		_, err := Load(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", c.args, err, c.want)
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
		cfg, res, err := Parse([]string{"--config", file}, true, nil)
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			t.Fatalf("shipped config does not pass `nodedns config validate`: %v", err)
		}
		if len(cfg.LocalIP) != 1 || cfg.LocalIP[0] != "169.254.20.10" || cfg.AdminSocket == "" {
			t.Fatalf("shipped config: %+v", cfg)
		}
		// Keys shown commented out, for an operator to enable, exist.
		for _, m := range regexp.MustCompile(`(?m)^# ([a-z][a-z-]*):( |$)`).FindAllStringSubmatch(obj.Data["config.yaml"], -1) {
			if SettingByKey(m[1]) == nil {
				t.Errorf("the shipped config shows an unknown key commented out: %q", m[0])
			}
		}
	}
	if !found {
		t.Fatal("no ConfigMap in deploy/daemonset.yaml")
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
		cfg, err := Load(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if got := cfg.SchedulerProcs(); got != c.want {
			t.Errorf("%q with GOMAXPROCS=%q: %d Ps, want %d", c.args, c.env, got, c.want)
		}
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnknownKey: an unknown key is a warning naming it (and the nearest
// known key) when the agent loads the file, so a rollback to a version
// that lacks a newer key does not crash-loop; `config validate` makes it
// an error. It used to be an error at start.
func TestUnknownKey(t *testing.T) {
	file := writeFile(t, "listen: [127.0.0.1:5353]\ncahce-size: 5\nfancy-new-setting: {a: 1}\n")
	var warn strings.Builder
	cfg, err := Load([]string{"--config", file}, &warn)
	if err != nil {
		t.Fatalf("unknown keys stop the agent: %v", err)
	}
	if cfg.CacheSize != 10000 {
		t.Errorf("cache-size %d", cfg.CacheSize)
	}
	w := warn.String()
	if !strings.Contains(w, `unknown key "cahce-size" (did you mean "cache-size"?)`) || !strings.Contains(w, `unknown key "fancy-new-setting"`) ||
		strings.Count(w, "\n") != 2 {
		t.Errorf("warnings:\n%s", w)
	}
	_, res, err := Parse([]string{"--config", file}, true, nil)
	if err != nil || len(res.Problems) != 2 || !strings.Contains(res.Problems[0], "cahce-size") {
		t.Errorf("strict: %v %q", err, res.Problems)
	}
}

// TestConfigHeaders: apiVersion and kind are optional; when present they
// must name this schema. Another version of the same group is read with a
// warning (a rollback), or refused by `config validate`.
func TestConfigHeaders(t *testing.T) {
	for _, c := range []struct {
		head         string
		warn, strict string // "" : none; else a substring of the warning / strict problem
		problem      string
	}{
		{head: "apiVersion: nodedns.io/v1alpha1\nkind: Config\n"},
		{head: "kind: Config\n"},
		{head: "apiVersion: nodedns.io/v1beta1\nkind: Config\n", warn: `apiVersion "nodedns.io/v1beta1"`, strict: `apiVersion "nodedns.io/v1beta1"`},
		{head: "apiVersion: v1\nkind: Config\n", problem: `apiVersion "v1"`},
		{head: "apiVersion: nodedns.io/v1alpha1\nkind: ConfigMap\n", problem: `kind "ConfigMap"`},
		{head: "apiVersion: 1\n", problem: "apiVersion 1"},
	} {
		file := writeFile(t, c.head+"listen: [127.0.0.1:5353]\n")
		var warn strings.Builder
		_, err := Load([]string{"--config", file}, &warn)
		switch {
		case c.problem != "":
			if err == nil || !strings.Contains(err.Error(), c.problem) {
				t.Errorf("%q: err %v, want %q", c.head, err, c.problem)
			}
			continue
		case err != nil:
			t.Errorf("%q: %v", c.head, err)
		case c.warn == "" && warn.Len() > 0 || c.warn != "" && !strings.Contains(warn.String(), c.warn):
			t.Errorf("%q: warnings %q, want %q", c.head, warn.String(), c.warn)
		}
		_, res, _ := Parse([]string{"--config", file}, true, nil)
		if got := strings.Join(res.Problems, "; "); c.strict == "" && got != "" || !strings.Contains(got, c.strict) {
			t.Errorf("%q strict: %q, want %q", c.head, got, c.strict)
		}
	}
}

// TestEveryProblemReported: each bad key of a file is reported, by name,
// not only the first.
func TestEveryProblemReported(t *testing.T) {
	file := writeFile(t, "listen: [127.0.0.1:5353, nope]\ncache-size: zero\nmax-ttl: 30\npods: all\nupstream: [\"https://192.0.2.1/q\"]\nmin-ttl: 2h\nlog-queries: 2\nlocal-ip: [127.0.0.1]\ninterface: much-too-long-name\nlameduck: 10m\n")
	_, res, err := Parse([]string{"--config", file}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cache-size"`, `"max-ttl"`, `listen "nope"`, `pods "all"`, `upstream "https://192.0.2.1/q"`, `min-ttl 2h0m0s: want 0s to 1h0m0s`, `lameduck 10m0s: want 0s to 5m0s`,
		`log-queries 2`, `local-ip "127.0.0.1"`, `interface "much-too-long-name"`} {
		found := false
		for _, p := range res.Problems {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no problem mentions %s:\n%s", want, strings.Join(res.Problems, "\n"))
		}
	}
	for _, p := range res.Problems {
		if strings.Contains(p, "\n") {
			t.Errorf("problem on several lines: %q", p)
		}
	}
	if !strings.Contains(strings.Join(res.Problems, "\n"), "want an integer") {
		t.Errorf("type error not explained: %q", res.Problems)
	}
	if len(res.Problems) != 10 {
		t.Errorf("%d problems, want 10 (one each):\n%s", len(res.Problems), strings.Join(res.Problems, "\n"))
	}
}

// TestSettingsTable keeps the table the one declaration of each setting:
// every exported Config field has exactly one entry, keys and flags are
// unique, defaults parse and help is there. (That the agent has an
// applier for every apply class is pkg/agent's TestEveryApplyClassApplied.)
func TestSettingsTable(t *testing.T) {
	var c Config
	fields := map[uintptr]string{}
	rt := reflect.TypeOf(c)
	base := reflect.ValueOf(&c).Pointer()
	for i := range rt.NumField() {
		if f := rt.Field(i); f.IsExported() {
			fields[base+f.Offset] = f.Name
		}
	}
	keys, flags, covered := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, s := range settings {
		if keys[s.key] || s.key == "" || s.key == "apiVersion" || s.key == "kind" {
			t.Errorf("key %q empty, reserved or declared twice", s.key)
		}
		keys[s.key] = true
		if f := s.flagName(); f != "" {
			if flags[f] || f == "config" {
				t.Errorf("flag %q declared twice", f)
			}
			flags[f] = true
		}
		if s.help == "" {
			t.Errorf("%s: no help", s.key)
		}
		name, ok := fields[reflect.ValueOf(s.field(&c)).Pointer()]
		if !ok || covered[name] {
			t.Errorf("%s: not a Config field, or a field declared twice (%s)", s.key, name)
		}
		covered[name] = true
		if s.flagName() != "" || s.def != "" || s.env != "" {
			_ = s.value(&c) // panics on a type without a flag.Value
		}
	}
	for _, name := range fields {
		if !covered[name] {
			t.Errorf("Config.%s has no entry in the settings table", name)
		}
	}
	_ = Default() // panics on a default that does not parse
}

// TestConfigDocFlagTable keeps the flag table of docs/configuration.md in
// step with the settings table.
func TestConfigDocFlagTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, s := range settings {
		f := s.flagName()
		if f == "" {
			f = s.key // a file-only key is listed by its key
		}
		if !strings.Contains(doc, "`--"+f+"`") && !strings.Contains(doc, "`"+f+"`") {
			t.Errorf("docs/configuration.md has no row for --%s", f)
		}
	}
}
