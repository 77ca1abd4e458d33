package config

// --config files were read whole with no size bound, at start, by `config
// validate` and at every reload poll: a 100 MB file took the agent to 1 GB,
// and the memory stayed after the file was put back. A ConfigMap holds at
// most 1 MiB, so a larger file is never a configuration the DaemonSet could
// have mounted: it is refused with an error naming the file and the bound,
// without reading more than the bound and a byte. (The reload side is
// pkg/agent's TestAttackConfigFileSizeOnReload.)

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestAttackConfigFileSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(dnstest.BigConfig("listen: [\"127.0.0.1:5300\"]\n", 2<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"--config", p}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), p) || !(strings.Contains(err.Error(), "1 MiB") || strings.Contains(err.Error(), "1048576")) {
		t.Errorf("serve --config with a 2 MiB file: err %v; want an error naming %s and the bound (1 MiB)", err, p)
	}
	var out, errOut bytes.Buffer
	err = Command([]string{"validate", p}, &out, &errOut)
	if err == nil {
		t.Errorf("config validate of a 2 MiB file: accepted (%s); want it refused, naming the bound", strings.TrimSpace(out.String()))
	} else if !strings.Contains(errOut.String(), "1 MiB") {
		t.Errorf("config validate of a 2 MiB file: %q; want the bound named", errOut.String())
	}
}

// The bound holds for the bytes read, not only for the verdict: a file far
// over it (sparse here, so the test writes nothing) and a file whose size
// stat does not tell (/dev/zero, endless) cost no more than the bound.
func TestConfigFileReadBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, path := range []string{p, "/dev/zero"} {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		_, err := Load([]string{"--config", path}, io.Discard)
		runtime.ReadMemStats(&m1)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "1 MiB") {
			t.Errorf("--config %s: err %v; want an error naming the file and the bound", path, err)
		}
		if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 4<<20 {
			t.Errorf("--config %s: %.1f MiB allocated to refuse it; want at most the bound's worth", path, float64(alloc)/(1<<20))
		}
	}
}

// The bound itself: MaxFileBytes is read, a byte more is refused.
func TestReadFileAtTheBound(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		size int
		ok   bool
	}{{0, true}, {100, true}, {MaxFileBytes, true}, {MaxFileBytes + 1, false}} {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, bytes.Repeat([]byte("#"), c.size), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := ReadFile(p)
		switch {
		case c.ok && (err != nil || len(b) != c.size):
			t.Errorf("%d bytes: %d read, err %v; want it read whole", c.size, len(b), err)
		case !c.ok && !errors.Is(err, ErrTooLarge):
			t.Errorf("%d bytes: err %v; want ErrTooLarge", c.size, err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: err %v; want it named", err)
	}
}
