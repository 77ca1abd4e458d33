package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadWritten loads b as a --config file.
func loadWritten(t *testing.T, b []byte) Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "written.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, res, err := Parse([]string{"--config", p}, true, nil)
	if err != nil || len(res.Problems) > 0 || len(res.Warnings) > 0 {
		t.Fatalf("written file does not load: %v %q %q\n%s", err, res.Problems, res.Warnings, b)
	}
	return cfg
}

// TestWriteDropInKeys: hosts and rewrite are written with only the fields
// set, and read back to the same configuration. A hosts key without
// fallthrough used to be written "fallthrough: null", which reads back as
// every zone.
func TestWriteDropInKeys(t *testing.T) {
	file := writeFile(t, `listen: [127.0.0.1:5353]
hosts:
  entries: ["192.0.2.10 web.example.org"]
  ttl: 60s
rewrite:
  - {from: a.example, to: b.example}
  - {type: regex, from: '^(.+)\.old\.example\.$', to: '{1}.new.example', mode: continue}
`)
	cfg, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(&cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nhosts:\n  entries:\n  - 192.0.2.10 web.example.org\n  ttl: 1m0s\n\n", "- from: a.example\n  to: b.example\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	back := loadWritten(t, out)
	for _, s := range settings {
		if s.Differs(&cfg, &back) {
			t.Errorf("%s written as %#v, read back as %#v", s.key, s.Get(&cfg), s.Get(&back))
		}
	}
	if back.Hosts.Fallthrough.Set {
		t.Errorf("hosts fallthrough read back as set: %+v", back.Hosts.Fallthrough)
	}
}

// TestWriteLayout: only the chosen keys, with their comments; a map's
// entries one by one with theirs, as the whole map would be written.
func TestWriteLayout(t *testing.T) {
	cfg := Default()
	cfg.Listen = List{"127.0.0.1:5353"}
	cfg.Stubs = StubsMap{"b.example": {Servers: List{"192.0.2.2"}}, "a.example": {Servers: List{"192.0.2.1"}, ForceTCP: true, Policy: "sequential"}}
	only := func(s *Setting) bool { return s == SettingOf(&cfg, &cfg.Listen) || s == SettingOf(&cfg, &cfg.Stubs) }
	whole, err := Write(&cfg, Layout{Only: only})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := Write(&cfg, Layout{Only: only, EntryComment: func(*Setting, string) []string { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if string(whole) != string(entries) {
		t.Errorf("entry by entry:\n%s\nwhole:\n%s", entries, whole)
	}
	out, err := Write(&cfg, Layout{Header: []string{"head"}, Only: only,
		Comment:      func(s *Setting) []string { return []string{"about " + s.key} },
		EntryComment: func(_ *Setting, k string) []string { return []string{"zone " + k} }})
	if err != nil {
		t.Fatal(err)
	}
	want := `# head
apiVersion: nodedns.io/v1alpha1
kind: Config

# about listen
listen:
- 127.0.0.1:5353

# about stub-domains
stub-domains:
  # zone a.example
  a.example:
    force-tcp: true
    policy: sequential
    servers:
    - 192.0.2.1
  # zone b.example
  b.example:
    servers:
    - 192.0.2.2
`
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	back := loadWritten(t, out)
	if back.Stubs["a.example"].Policy != "sequential" || len(back.Stubs) != 2 {
		t.Errorf("read back: %+v", back.Stubs)
	}
}

func TestSettingOf(t *testing.T) {
	var c Config
	if s := SettingOf(&c, &c.MaxTTL); s == nil || s.Key() != "max-ttl" {
		t.Errorf("SettingOf(&c.MaxTTL) = %v", s)
	}
	var other Config
	if s := SettingOf(&c, &other.MaxTTL); s != nil {
		t.Errorf("a field of another Config: %v", s.Key())
	}
}
