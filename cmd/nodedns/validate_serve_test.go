package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/agent"
	"github.com/nodedns/nodedns/pkg/config"
)

// serveStartVerdict is what `nodedns serve --config FILE` decides before it
// binds anything: the configuration as serve parses it, then the agent
// built from it (agent.Build changes nothing on the host; Run does). nil:
// serve would start.
func serveStartVerdict(t *testing.T, file string) error {
	t.Helper()
	cfg, res, err := config.Parse([]string{"--config", file}, false, nil)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return err
	}
	_, err = agent.Build(cfg, agent.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return err
}

// TestValidateAgreesWithServe: over a corpus of configuration files, `nodedns
// config validate` accepts exactly those `nodedns serve` starts with, and
// each line it prints names the file and, for the keys the file gave, the
// key rather than the flag. The corpus holds what issue 34 found
// validate accepting and serve refusing (the kube-dns ClusterIP in local-ip
// and upstream), checks over several keys, warnings, and plain good files.
// Files listen on loopback and name their upstreams, so the verdicts do
// not depend on the machine (no resolv.conf, kubeconfig or link read).
func TestValidateAgreesWithServe(t *testing.T) {
	base := "listen: [127.0.0.1:5399]\nupstream: [192.0.2.1]\ncluster-zone: local\n"
	corpus := []struct {
		name, body string
		// keys the error lines must name as keys (never as --flags).
		keys []string
	}{
		{"good", base, nil},
		{"good-local-ip", "local-ip: [169.254.20.10]\nlisten: [127.0.0.1:5399]\nupstream: [192.0.2.1]\n", nil},
		{"loop-upstream-is-local-ip", "local-ip: [169.254.20.10, 169.254.20.11]\nupstream: [169.254.20.11]\n", []string{"upstream", "local-ip"}},
		{"loop-upstream-is-listen", "listen: [127.0.0.1:5399]\nupstream: [127.0.0.1:5399]\n", []string{"upstream"}},
		{"loop-upstream-tcp-scheme", "local-ip: [169.254.20.10]\nupstream: [tcp://169.254.20.10:53]\n", []string{"upstream"}},
		{"not-a-loop-other-port", "local-ip: [169.254.20.10]\nupstream: [169.254.20.10:5353]\n", nil},
		{"lameduck-long", base + "lameduck: 40s\n", nil},
		{"autopath-quoted", base + "autopath: 'true'\n", []string{"autopath"}},
		{"cache-size-quoted", base + "cache-size: '100'\n", []string{"cache-size"}},
		{"min-above-max", base + "min-ttl: 10m\nmax-ttl: 5m\n", []string{"min-ttl", "max-ttl"}},
		{"pprof-without-socket", base + "pprof: true\n", []string{"pprof", "admin-socket"}},
		{"forward-without-cluster-dns", base + "cluster-zone: forward\n", nil},
		{"cluster-dns-is-own", "local-ip: [169.254.20.10]\ncluster-zone: forward\ncluster-dns: 169.254.20.10\nupstream: [192.0.2.1]\n", []string{"cluster-dns"}},
		{"fallback-is-local-ip", "local-ip: [169.254.20.10]\nupstream: [192.0.2.1]\nfallback-dns: [169.254.20.10]\n", []string{"fallback-dns", "local-ip"}},
		{"nothing-to-listen-on", "upstream: [192.0.2.1]\n", []string{"listen", "local-ip"}},
		{"bad-value", base + "cache-size: -1\n", []string{"cache-size"}},
	}
	dir := t.TempDir()
	for _, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			if c.name == "forward-without-cluster-dns" {
				body = strings.Replace(body, "cluster-zone: local\n", "", 1)
			}
			file := filepath.Join(dir, c.name+".yaml")
			if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run([]string{"config", "validate", file}, &out, &errb)
			serveErr := serveStartVerdict(t, file)
			if (code == 0) != (serveErr == nil) {
				t.Fatalf("validate exit %d (stderr %q), serve's start: %v", code, errb.String(), serveErr)
			}
			for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
				if line == "" {
					continue
				}
				if !strings.Contains(line, "config "+file+": ") {
					t.Errorf("line %q does not name the file", line)
				}
				for _, k := range c.keys {
					if strings.Contains(line, "--"+k) {
						t.Errorf("line %q names the file's key %s as a flag", line, k)
					}
					if !strings.Contains(line, k) {
						t.Errorf("line %q does not name the key %s", line, k)
					}
				}
			}
			if code != 0 && len(c.keys) == 0 && !strings.Contains(c.name, "forward") {
				t.Errorf("unexpected refusal: %s", errb.String())
			}
		})
	}
}

// TestValidateMessages: the lines issue 34 quoted read as they should.
func TestValidateMessages(t *testing.T) {
	for body, want := range map[string]string{
		"listen: [127.0.0.1:5399]\nautopath: 'true'\n":           `key "autopath": want true or false, got the string "true": write it without quotes`,
		"listen: [127.0.0.1:5399]\nlameduck: 40s\n":              `warning: config FILE: lameduck 40s: make sure the pod's terminationGracePeriodSeconds`,
		"local-ip: [169.254.20.10]\nupstream: [169.254.20.10]\n": `config FILE: upstream 169.254.20.10 is one of this agent's own addresses (local-ip 169.254.20.10, on port 53): that is a forwarding loop`,
	} {
		file := writeFile(t, body)
		var out, errb bytes.Buffer
		run([]string{"config", "validate", file}, &out, &errb)
		if want = strings.ReplaceAll(want, "FILE", file); !strings.Contains(errb.String(), want) {
			t.Errorf("%q: stderr %q, want %q", body, errb.String(), want)
		}
	}
}
