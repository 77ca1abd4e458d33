package config

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeDropInFile writes a config with a listen address plus body and returns
// its path.
func writeDropInFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("listen: [127.0.0.1:5353]\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostsKey: the `hosts:` key as agreed (entries, file, ttl,
// no-reverse, zones, fallthrough), and what it becomes for pkg/query/hosts.
func TestHostsKey(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load([]string{"--config", writeDropInFile(t, dir, "a.yaml", `hosts:
  entries:
    - 192.0.2.10 web.example.org www.example.org
    - "2001:db8::10 web.example.org"
  file: /nonexistent/hosts
  ttl: 60s
  no-reverse: true
  zones: [example.org]
  fallthrough: [example.org]
  reload: 0s
`)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	hc := cfg.HostsSettings()
	if len(hc.Entries) != 2 || hc.File != "/nonexistent/hosts" || hc.TTL != time.Minute || !hc.NoReverse ||
		!slices.Equal(hc.Zones, []string{"example.org"}) || !slices.Equal(hc.Fallthrough, []string{"example.org"}) || hc.Reload >= 0 {
		t.Fatalf("hosts: %+v", hc)
	}
	// fallthrough absent: none (nil); empty list or no value: every zone.
	for body, want := range map[string][]string{
		"hosts:\n  entries: [192.0.2.1 a.example]\n":                    nil,
		"hosts:\n  entries: [192.0.2.1 a.example]\n  fallthrough: []\n": {},
		"hosts:\n  entries: [192.0.2.1 a.example]\n  fallthrough:\n":    {},
	} {
		cfg, err := Load([]string{"--config", writeDropInFile(t, dir, "b.yaml", body)}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		got := cfg.HostsSettings().Fallthrough
		if (got == nil) != (want == nil) || len(got) != 0 {
			t.Errorf("%q: fallthrough %#v, want %#v", body, got, want)
		}
	}
	if cfg, err := Load([]string{"--listen", "127.0.0.1:5353"}, io.Discard); err != nil || cfg.HostsSettings().Enabled() {
		t.Fatalf("default: hosts %+v %v", cfg.Hosts, err)
	}
}

// TestDropInErrorsNameTheValue: a bad value in the drop-in keys stops the
// agent with a message naming it (the hosts file's line by number).
func TestDropInErrorsNameTheValue(t *testing.T) {
	dir := t.TempDir()
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte("127.0.0.1 localhost\n192.0.2.1 ok.example\n192.0.2.x bad.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		body string
		want string
	}{
		{"hosts:\n  entries: [\"192.0.2.1 a.example\", \"nope b.example\"]\n", `hosts entry 2 ("nope b.example"): "nope" is not an IP address`},
		{"hosts:\n  file: " + hostsFile + "\n", "hosts file " + hostsFile + ` line 3: "192.0.2.x" is not an IP address`},
		{"hosts:\n  entries: [192.0.2.1 a.example]\n  ttl: 3600\n", `duration 3600: want a string`},
		{"hosts:\n  entries: [192.0.2.1 a.example]\n  tll: 1s\n", `tll`},
	}
	for _, c := range cases {
		_, err := Load([]string{"--config", writeDropInFile(t, dir, "c.yaml", c.body)}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.body, err, c.want)
		}
	}
}

// TestRewriteAndLoadBalanceKeys: the `rewrite:` list and `loadbalance`
// as keys and flag, and their errors.
func TestRewriteAndLoadBalanceKeys(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load([]string{"--config", writeDropInFile(t, dir, "a.yaml", `rewrite:
  - {type: exact, from: api.legacy, to: api.default.svc.cluster.local}
  - {type: regex, from: '^(.+)\.old\.example\.$', to: '{1}.new.example', mode: continue}
  - {type: suffix, from: .corp, to: .corp.example.com}
loadbalance: round_robin
`)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rewrite) != 3 || cfg.Rewrite[1].Mode != "continue" || cfg.LoadBalance != "round_robin" {
		t.Fatalf("%+v %q", cfg.Rewrite, cfg.LoadBalance)
	}
	rw, err := cfg.Rewriter()
	if err != nil || rw.Len() != 3 {
		t.Fatalf("%v %v", rw, err)
	}
	if to, _, ok, _ := rw.Rewrite("www.old.example."); !ok || to != "www.new.example." {
		t.Fatalf("regex rule: %q %v", to, ok)
	}
	cfg, err = Load([]string{"--listen", "127.0.0.1:5353", "--loadbalance", "round_robin"}, io.Discard)
	if err != nil || cfg.LoadBalance != "round_robin" {
		t.Fatalf("flag: %q %v", cfg.LoadBalance, err)
	}
	for body, want := range map[string]string{
		"rewrite:\n  - {type: regex, from: '(', to: x}\n":                          `rewrite rule 1: regex "(": error parsing regexp`,
		"rewrite:\n  - {from: a.example, to: b.example, mode: later}\n":            `rewrite rule 1: mode "later": want stop or continue`,
		"rewrite:\n  - {type: glob, from: a, to: b}\n":                             `rewrite rule 1: type "glob"`,
		"rewrite:\n  - {type: regex, from: '^(a)\\.$', to: '{1}{2}'}\n":            `uses {2} but regex`,
		"rewrite:\n  - {type: exact, from: a.example, to: b.example, answer: x}\n": `answer`,
		"loadbalance: random\n": `loadbalance "random": want round_robin`,
	} {
		_, err := Load([]string{"--config", writeDropInFile(t, dir, "b.yaml", body)}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
}
