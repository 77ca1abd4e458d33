package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
