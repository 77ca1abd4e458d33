package agent

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/config"
)

func TestCacheMaxBytesConfig(t *testing.T) {
	cfg, err := config.Load([]string{"--listen", "127.0.0.1:5353"}, io.Discard)
	if err != nil || cfg.CacheMaxBytes != cache.DefaultMaxBytes {
		t.Fatalf("default: %d, %v; want %d", cfg.CacheMaxBytes, err, cache.DefaultMaxBytes)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	for content, want := range map[string]config.Bytes{"cache-max-bytes: 64Mi\n": 64 << 20, "cache-max-bytes: 1048576\n": 1 << 20} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load([]string{"--listen", "127.0.0.1:5353", "--config", file}, io.Discard)
		if err != nil || cfg.CacheMaxBytes != want {
			t.Fatalf("file %q: %d, %v; want %d", content, cfg.CacheMaxBytes, err, want)
		}
		if cc := cacheConfig(cfg, nil); cc.MaxBytes != int64(want) {
			t.Fatalf("cache config MaxBytes %d, want %d", cc.MaxBytes, want)
		}
	}
	cfg, err = config.Load([]string{"--listen", "127.0.0.1:5353", "--config", file, "--cache-max-bytes", "128Mi"}, io.Discard)
	if err != nil || cfg.CacheMaxBytes != 128<<20 {
		t.Fatalf("flag over file: %d, %v", cfg.CacheMaxBytes, err)
	}
	for _, bad := range []string{"1Ki", "lots"} {
		_, err := config.Load([]string{"--listen", "127.0.0.1:5353", "--cache-max-bytes", bad}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "cache-max-bytes") && !strings.Contains(err.Error(), bad) {
			t.Errorf("--cache-max-bytes %s: %v, want an error naming it", bad, err)
		}
	}
}

// The zones the CoreDNS series count under: the cluster domains, the
// reverse zones and the stub domains, as node-cache's server blocks.
func TestMetricZones(t *testing.T) {
	cfg, err := config.Load([]string{"--listen", "127.0.0.1:5353", "--stub-domain", "corp.example=192.0.2.53", "--cluster-domain", "cluster.local"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(metricZones(cfg), " ")
	if got != "cluster.local corp.example in-addr.arpa. ip6.arpa." {
		t.Errorf("zones %q", got)
	}
}
