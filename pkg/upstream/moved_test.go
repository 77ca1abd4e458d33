package upstream_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/nodedns/nodedns/pkg/upstream"
)

// TestMoved: which names a new forwarder sends elsewhere, or otherwise,
// than the old one: those are the answers a cache must drop.
func TestMoved(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(cfg upstream.Config) *upstream.Forwarder {
		t.Helper()
		cfg.Logger = quiet
		f, err := upstream.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := func() upstream.Config {
		return upstream.Config{Servers: []string{"127.0.0.1:53"},
			Stubs:       map[string][]string{"corp.example.": {"127.0.0.2:53"}, "lab.corp.example.": {"127.0.0.3:53"}},
			StubOptions: map[string]upstream.GroupOptions{"corp.example.": {Except: []string{"skip.corp.example."}}}}
	}
	names := []string{"www.example.com.", "a.corp.example.", "a.lab.corp.example.", "a.skip.corp.example."}
	for _, tc := range []struct {
		what   string
		change func(c *upstream.Config)
		moved  []bool // per name
	}{
		{"nothing", func(*upstream.Config) {}, []bool{false, false, false, false}},
		{"the bounds on work in flight", func(c *upstream.Config) { c.MaxInflight = 7 }, []bool{false, false, false, false}},
		{"the default servers", func(c *upstream.Config) { c.Servers = []string{"127.0.0.9:53"} },
			[]bool{true, false, false, true}},
		{"a stub domain's servers", func(c *upstream.Config) { c.Stubs["lab.corp.example."] = []string{"127.0.0.9:53"} },
			[]bool{false, false, true, false}},
		{"a stub domain's options", func(c *upstream.Config) {
			c.StubOptions["corp.example."] = upstream.GroupOptions{Except: []string{"skip.corp.example."}, ForceTCP: true}
		}, []bool{false, true, false, false}},
		{"an except removed", func(c *upstream.Config) { delete(c.StubOptions, "corp.example.") },
			[]bool{false, true, false, true}},
		{"a stub domain added", func(c *upstream.Config) { c.Stubs["example.com."] = []string{"127.0.0.2:53"} },
			[]bool{true, false, false, false}},
		{"a stub domain removed", func(c *upstream.Config) { delete(c.Stubs, "lab.corp.example.") },
			[]bool{false, false, true, false}},
		{"a shared setting", func(c *upstream.Config) { c.Policy = upstream.Sequential }, []bool{true, true, true, true}},
	} {
		cfg := base()
		tc.change(&cfg)
		moved := upstream.Moved(mk(base()), mk(cfg))
		for i, n := range names {
			if got := moved(n); got != tc.moved[i] {
				t.Errorf("%s: %s moved %v, want %v", tc.what, n, got, tc.moved[i])
			}
		}
	}
	all := upstream.Moved(nil, mk(base()))
	for _, n := range names {
		if !all(n) {
			t.Errorf("no old forwarder: %s not moved", n)
		}
	}
}
