package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
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
	cfg, err := loadConfig([]string{"--config", writeDropInFile(t, dir, "a.yaml", `hosts:
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
	hc := hostsConfig(cfg.Hosts)
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
		cfg, err := loadConfig([]string{"--config", writeDropInFile(t, dir, "b.yaml", body)}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		got := hostsConfig(cfg.Hosts).Fallthrough
		if (got == nil) != (want == nil) || len(got) != 0 {
			t.Errorf("%q: fallthrough %#v, want %#v", body, got, want)
		}
	}
	if cfg, err := loadConfig([]string{"--listen", "127.0.0.1:5353"}, io.Discard); err != nil || hostsConfig(cfg.Hosts).Enabled() {
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
		_, err := loadConfig([]string{"--config", writeDropInFile(t, dir, "c.yaml", c.body)}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.body, err, c.want)
		}
	}
}

// TestRewriteAndLoadBalanceKeys: the `rewrite:` list and `loadbalance`
// as keys and flag, and their errors.
func TestRewriteAndLoadBalanceKeys(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadConfig([]string{"--config", writeDropInFile(t, dir, "a.yaml", `rewrite:
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
	rw, err := newRewriter(cfg.Rewrite)
	if err != nil || rw.Len() != 3 {
		t.Fatalf("%v %v", rw, err)
	}
	if to, _, ok, _ := rw.Rewrite("www.old.example."); !ok || to != "www.new.example." {
		t.Fatalf("regex rule: %q %v", to, ok)
	}
	cfg, err = loadConfig([]string{"--listen", "127.0.0.1:5353", "--loadbalance", "round_robin"}, io.Discard)
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
		_, err := loadConfig([]string{"--config", writeDropInFile(t, dir, "b.yaml", body)}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
}

// TestDropInLiveReload: hosts, rewrite and loadbalance change with the
// config file, without a restart.
func TestDropInLiveReload(t *testing.T) {
	reloadPoll = 50 * time.Millisecond
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", r.Question[0].Name, ip))
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	base := fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\nlameduck: 0s\nupstream: [%s]\n", addr, up.Addr)
	writeConfigMap(t, dir, base+"hosts:\n  entries: [192.0.2.50 static.example]\n  fallthrough: []\n")
	args := []string{"--config", filepath.Join(dir, "config.yaml")}
	cfg, err := loadConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := build(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.args, a.level = args, new(slog.LevelVar)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	c := &dns.Client{Timeout: time.Second}
	ask := func(name string) string {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, rr := range r.Answer {
			out = append(out, rr.Header().Name+" "+rr.(*dns.A).A.String())
		}
		return dns.RcodeToString[r.Rcode] + " " + strings.Join(out, ",")
	}
	waitFor := func(name, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := ask(name)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q, want %q", name, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("static.example.", "NOERROR static.example. 192.0.2.50")
	waitFor("svc.legacy.", "NOERROR svc.legacy. 192.0.2.1,svc.legacy. 192.0.2.2")

	writeConfigMap(t, dir, base+`hosts:
  entries: [192.0.2.51 static.example, 192.0.2.60 target.internal]
  fallthrough: []
rewrite:
  - {type: suffix, from: .legacy, to: .internal}
loadbalance: round_robin
`)
	waitFor("static.example.", "NOERROR static.example. 192.0.2.51")
	waitFor("target.legacy.", "NOERROR target.legacy. 192.0.2.60")
	// Round robin: the upstream's two addresses take turns in first place.
	firsts := map[string]bool{}
	for i := 0; i < 4; i++ {
		firsts[strings.Fields(ask("pool.example."))[2]] = true
	}
	if len(firsts) != 2 {
		t.Fatalf("loadbalance after reload: first addresses %v", firsts)
	}
	// Off again.
	writeConfigMap(t, dir, base)
	waitFor("static.example.", "NOERROR static.example. 192.0.2.1,static.example. 192.0.2.2")
}
