package agent

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/config"
)

func writeResolvConf(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResolvConfMalformedNameserver: a nameserver line that is not an IP
// address is warned about (file and line named) and skipped; the agent
// starts with the others. It used to panic in netip.MustParseAddr.
func TestResolvConfMalformedNameserver(t *testing.T) {
	path := writeResolvConf(t, "nameserver dns.example.com\nnameserver 127.0.0.1:5353\nnameserver 192.0.2.53\nnameserver 127.0.0.1\nsearch corp.example\n")
	cfg, err := config.Load([]string{"--listen", "127.0.0.1:53", "--resolv-conf", path, "--admin", ""}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ups, err := upstreams(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	// 127.0.0.1:53 is our own listen address: dropped too.
	if !slices.Equal(ups, []string{"192.0.2.53:53"}) {
		t.Errorf("upstreams %q, want only 192.0.2.53:53", ups)
	}
	out := logs.String()
	for _, want := range []string{"line=1", "dns.example.com", "line=2", "127.0.0.1:5353", path} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Errorf("%d warnings, want 2:\n%s", n, out)
	}
	// The whole agent builds on it (the forwarder reads the same file).
	a, err := Build(cfg, Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(a.fwd.Load().Servers()); n != 1 {
		t.Errorf("%d upstream servers, want 1", n)
	}
	a.cache.Close()
	if got := searchDomains(cfg, "cluster.local."); !slices.Contains(got, "corp.example.") {
		t.Errorf("search domains %q lack corp.example.", got)
	}
}
