package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/config"
)

func TestConfigValidate(t *testing.T) {
	good := writeFile(t, "apiVersion: nodedns.io/v1alpha1\nkind: Config\nlocal-ip: [169.254.20.10]\ncache-size: 500\n")
	var out, errb bytes.Buffer
	if code := run([]string{"config", "validate", good}, &out, &errb); code != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "ok") {
		t.Errorf("good file: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}

	bad := writeFile(t, "kind: Config\nlocal-ip: [169.254.20.10]\ncache-size: -1\ncahce-size: 5\nlameduck: 5\n")
	out.Reset()
	errb.Reset()
	code := run([]string{"config", "validate", bad}, &out, &errb)
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if code != 1 || len(lines) != 3 || out.Len() != 0 {
		t.Fatalf("bad file: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and three lines", code, out.String(), errb.String())
	}
	for i, want := range []string{`"cahce-size"`, `"lameduck"`, `cache-size -1`} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], bad) {
			t.Errorf("line %d %q: want the file and %s", i, lines[i], want)
		}
	}

	// Serve flags after FILE count, as on the agent's command line.
	noListen := writeFile(t, "cache-size: 500\n")
	if code := run([]string{"config", "validate", noListen}, &out, &errb); code != 1 {
		t.Errorf("a file with nothing to listen on: exit %d", code)
	}
	if code := run([]string{"config", "validate", noListen, "--listen", "127.0.0.1:53"}, &out, &errb); code != 0 {
		t.Errorf("with --listen: exit %d", code)
	}
	for _, args := range [][]string{{"config"}, {"config", "validate"}, {"config", "frob"}, {"config", "validate", filepath.Join(t.TempDir(), "missing.yaml")}} {
		if code := run(args, &out, &errb); code == 0 {
			t.Errorf("%q: exit 0", args)
		}
	}
}

// TestConfigPrintRoundTrip: what `config print` writes is a file the
// agent reads back to the same configuration, that `config validate`
// accepts.
func TestConfigPrintRoundTrip(t *testing.T) {
	file := writeFile(t, "local-ip: 169.254.20.10\nupstream: [192.0.2.1, 192.0.2.2:5353]\nstub-domains: {corp.example: [192.0.2.53]}\n"+
		"max-ttl: 10m\ncluster-domain: [cluster.local, example.internal]\nfallthrough: []\nsearch: []\nlog-queries: 0.25\nnode-name: n1\n")
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:53"},
		{"--config", file, "--cache-size", "77", "--lameduck", "1s"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"config", "print"}, args...), &out, &errb); code != 0 {
			t.Fatalf("print %q: exit %d: %s", args, code, errb.String())
		}
		want, err := config.Load(args, nil)
		if err != nil {
			t.Fatal(err)
		}
		printed := filepath.Join(t.TempDir(), "printed.yaml")
		if err := os.WriteFile(printed, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := config.Load([]string{"--config", printed}, nil)
		if err != nil {
			t.Fatalf("printed config does not load: %v\n%s", err, out.String())
		}
		for _, s := range config.Settings() {
			if s.Differs(&want, &got) {
				t.Errorf("%q: %s printed as %#v, loaded back as %#v", args, s.Key(), s.Get(&want), s.Get(&got))
			}
			if !strings.Contains(out.String(), "\n"+s.Key()+":") && !strings.Contains(out.String(), "\n# "+s.Key()+":") {
				t.Errorf("%s missing from the output", s.Key())
			}
		}
		if got.IsGiven("search") != want.IsGiven("search") {
			t.Errorf("search given: %v, printed %v", want.IsGiven("search"), got.IsGiven("search"))
		}
		if code := run([]string{"config", "validate", printed}, &bytes.Buffer{}, &errb); code != 0 {
			t.Errorf("printed config does not validate: %s", errb.String())
		}
	}
}

// TestConfigPrintDefaults: `nodedns config print` alone prints the
// defaults (exit 0), noting on stderr that serve needs somewhere to
// listen. It used to fail with "nothing to listen on" and print nothing.
func TestConfigPrintDefaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"config", "print"}, &out, &errb); code != 0 {
		t.Fatalf("config print: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "nothing to listen on") || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("stderr: %q, want one note naming what serve lacks", errb.String())
	}
	printed := filepath.Join(t.TempDir(), "printed.yaml")
	if err := os.WriteFile(printed, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got, res, err := config.Parse([]string{"--config", printed}, true, nil)
	if err != nil || len(res.Problems) != 0 || len(res.Warnings) != 0 {
		t.Fatalf("printed defaults do not load back: %v %q %q\n%s", err, res.Problems, res.Warnings, out.String())
	}
	def := config.Default()
	for _, s := range config.Settings() {
		if s.Differs(&def, &got) {
			t.Errorf("%s: default %#v, printed and loaded back as %#v", s.Key(), s.Get(&def), s.Get(&got))
		}
	}
	for _, want := range []string{"apiVersion: nodedns.io/v1alpha1\n", "kind: Config\n", "\ncache-max-bytes: 32Mi\n", "\nlameduck: 5s\n", "# [live] ", "# [restart] "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// A bad value is still an error, with nothing printed.
	out.Reset()
	errb.Reset()
	if code := run([]string{"config", "print", "--policy", "fastest"}, &out, &errb); code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), `"fastest"`) {
		t.Errorf("bad value: exit %d, stdout %d bytes, stderr %q", code, out.Len(), errb.String())
	}
}

// TestConfigValidateFileShape: a file that is not a map of settings, or
// not YAML, is one line naming the file and what is wrong.
func TestConfigValidateFileShape(t *testing.T) {
	for content, want := range map[string]string{
		"- local-ip\n- upstream\n":                           "want a map of settings (key: value), got a list",
		"just a string\n":                                    "want a map of settings (key: value), got a string",
		"local-ip: [169.254.20.10\n":                         "line 1: did not find expected ',' or ']'",
		"local-ip: [169.254.20.10]\nlocal-ip: [192.0.2.1]\n": `line 2: key "local-ip" already set in map`,
	} {
		file := writeFile(t, content)
		var out, errb bytes.Buffer
		code := run([]string{"config", "validate", file}, &out, &errb)
		line := strings.TrimSpace(errb.String())
		if code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, file+": "+want) || strings.Contains(line, "JSON") {
			t.Errorf("%q: exit %d, stderr %q; want one line with %q", content, code, errb.String(), want)
		}
	}
}
