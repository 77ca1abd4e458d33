package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolvConfNoUsableUpstream: nothing usable is one line naming the
// file, and exit status 1.
func TestResolvConfNoUsableUpstream(t *testing.T) {
	for name, body := range map[string]string{
		"malformed only": "nameserver not-an-ip\nnameserver\n",
		"empty":          "# nothing\n",
		"only ourselves": "nameserver 127.0.0.1\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := writeResolvConf(t, body)
			var stdout, stderr bytes.Buffer
			code := run([]string{"serve", "--supervise=false", "--listen", "127.0.0.1:53", "--resolv-conf", path, "--admin", "", "--log-level", "error"}, &stdout, &stderr)
			msg := strings.TrimSpace(stderr.String())
			if code != 1 || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, path) || !strings.Contains(msg, "no usable nameserver") {
				t.Errorf("exit %d, stderr %q; want 1 and one line naming %s", code, msg, path)
			}
		})
	}
	var stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "missing.conf")
	if code := run([]string{"serve", "--supervise=false", "--listen", "127.0.0.1:53", "--resolv-conf", missing, "--admin", ""}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), missing) || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Errorf("missing file: exit %d, %q", code, stderr.String())
	}
}

func writeResolvConf(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
