package hosts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttackHostsNamesBounded: the hosts file was bounded in bytes only;
// 16 MiB of short lines is some 1.7 million names, ~300 bytes each once
// indexed (measured), past the container's memory. Past maxNames names
// (address-name pairs) a file, or the configured entries, are refused with
// an error naming the file and the bound; at the bound they are taken. A
// name repeated on many lines counts each time (each is an address kept).
func TestAttackHostsNamesBounded(t *testing.T) {
	dir := t.TempDir()
	lines := func(n, perLine int) string {
		var b strings.Builder
		for i := 0; i < n; i += perLine {
			fmt.Fprintf(&b, "10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
			for j := 0; j < perLine && i+j < n; j++ {
				fmt.Fprintf(&b, " h%d", i+j)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	at := write("at", lines(maxNames, 1))
	if _, err := New(Config{File: at, Fallthrough: []string{}}); err != nil {
		t.Fatalf("%d names: %v", maxNames, err)
	}
	for _, tc := range []struct{ what, body string }{
		{"one name a line", lines(maxNames+1, 1)},
		{"many names a line", lines(maxNames+1, 1000)},
		{"one name on every line", strings.Repeat("192.0.2.1 same.example\n", maxNames+1)},
	} {
		p := write("over", tc.body)
		_, err := New(Config{File: p, Fallthrough: []string{}})
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), fmt.Sprint(maxNames)) {
			t.Errorf("%s, %d names: %v; want an error naming the file and the bound", tc.what, maxNames+1, err)
		}
		if err := Check(Config{File: p, Fallthrough: []string{}}); err == nil {
			t.Errorf("%s: Check took it", tc.what)
		}
	}
	entries := strings.Split(strings.TrimSpace(lines(maxNames+1, 1000)), "\n")
	if _, err := New(Config{Entries: entries, Fallthrough: []string{}}); err == nil || !strings.Contains(err.Error(), fmt.Sprint(maxNames)) {
		t.Errorf("entries of %d names: %v; want an error naming the bound", maxNames+1, err)
	}
}
