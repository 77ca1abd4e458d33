package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/query/cache"
)

func TestBytes(t *testing.T) {
	for in, want := range map[string]Bytes{
		"33554432": 32 << 20, "32Mi": 32 << 20, "32MiB": 32 << 20, "64Ki": 64 << 10, "1Gi": 1 << 30,
		"1G": 1e9, "500M": 500e6, "100k": 100e3, " 2Mi ": 2 << 20,
	} {
		var b Bytes
		if err := b.Set(in); err != nil || b != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "Mi", "-1", "1.5Mi", "32 Mi", "32Mb", "ten", "99999999999Gi"} {
		var b Bytes
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted: %d", in, b)
		}
	}
	if s := Bytes(32 << 20).String(); s != "32Mi" {
		t.Errorf("String() = %q", s)
	}
}

func TestCacheMaxBytesConfig(t *testing.T) {
	cfg, err := loadConfig([]string{"--listen", "127.0.0.1:5353"}, io.Discard)
	if err != nil || cfg.CacheMaxBytes != cache.DefaultMaxBytes {
		t.Fatalf("default: %d, %v; want %d", cfg.CacheMaxBytes, err, cache.DefaultMaxBytes)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	for content, want := range map[string]Bytes{"cache-max-bytes: 64Mi\n": 64 << 20, "cache-max-bytes: 1048576\n": 1 << 20} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig([]string{"--listen", "127.0.0.1:5353", "--config", file}, io.Discard)
		if err != nil || cfg.CacheMaxBytes != want {
			t.Fatalf("file %q: %d, %v; want %d", content, cfg.CacheMaxBytes, err, want)
		}
		if cc := cacheConfig(cfg, nil); cc.MaxBytes != int64(want) {
			t.Fatalf("cache config MaxBytes %d, want %d", cc.MaxBytes, want)
		}
	}
	cfg, err = loadConfig([]string{"--listen", "127.0.0.1:5353", "--config", file, "--cache-max-bytes", "128Mi"}, io.Discard)
	if err != nil || cfg.CacheMaxBytes != 128<<20 {
		t.Fatalf("flag over file: %d, %v", cfg.CacheMaxBytes, err)
	}
	for _, bad := range []string{"1Ki", "lots"} {
		_, err := loadConfig([]string{"--listen", "127.0.0.1:5353", "--cache-max-bytes", bad}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "cache-max-bytes") && !strings.Contains(err.Error(), bad) {
			t.Errorf("--cache-max-bytes %s: %v, want an error naming it", bad, err)
		}
	}
}
