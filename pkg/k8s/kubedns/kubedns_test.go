package kubedns_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
)

// mount lays files out as kubelet mounts a ConfigMap: the data in a
// timestamped directory, "..data" linking to it, and each key a link
// through "..data". Calling it again swaps the data atomically.
func mount(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	gen := fmt.Sprintf("..gen_%d", len(mustGlob(t, filepath.Join(dir, "..gen_*"))))
	if err := os.MkdirAll(filepath.Join(dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, gen, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kubedns.StubDomainsKey, kubedns.UpstreamNameserversKey, kubedns.FederationsKey, "other"} {
		link := filepath.Join(dir, k)
		if _, ok := files[k]; !ok {
			continue
		}
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			t.Fatal(err)
		}
	}
}

func mustGlob(t *testing.T, pat string) []string {
	m, err := filepath.Glob(pat)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	mount(t, dir, map[string]string{
		"stubDomains":         `{"acme.local": ["1.2.3.4"], "Corp.Example.": ["10.0.0.53:5353", "dns.corp.svc.cluster.local"]}`,
		"upstreamNameservers": `["8.8.8.8", "[2001:db8::53]:53"]`,
		"other":               `not json at all`,
	})
	c, err := kubedns.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := kubedns.Config{
		StubDomains:         map[string][]string{"acme.local": {"1.2.3.4"}, "corp.example": {"10.0.0.53:5353", "dns.corp.svc.cluster.local"}},
		UpstreamNameservers: []string{"8.8.8.8", "[2001:db8::53]:53"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Read = %+v\nwant %+v", c, want)
	}
	if got := c.Zones(); !reflect.DeepEqual(got, []string{"acme.local", "corp.example"}) {
		t.Errorf("Zones = %v", got)
	}

	// Absent directory, absent keys: nothing.
	if c, err := kubedns.Read(filepath.Join(dir, "missing")); err != nil || !c.Empty() {
		t.Errorf("missing directory: %+v %v", c, err)
	}
	empty := t.TempDir()
	mount(t, empty, map[string]string{"federations": "foo=bar.example"})
	if c, err := kubedns.Read(empty); err != nil || !c.Empty() || !c.Federations {
		t.Errorf("federations only: %+v %v", c, err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := kubedns.Read(file); err == nil {
		t.Error("a file read as a directory")
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct {
		file, content, want string
	}{
		{"stubDomains", `{"acme.local": ["1.2.3.4"]`, "JSON"},
		{"stubDomains", `["1.2.3.4"]`, "JSON object"},
		{"stubDomains", `{"acme.local": ["1.2.3.4"]} {}`, "after the JSON"},
		{"stubDomains", `{"bad_zone!": ["1.2.3.4"]}`, `"bad_zone!"`},
		{"stubDomains", `{"acme.local": []}`, "no nameservers"},
		{"stubDomains", `{"acme.local": ["1.2.3.4:0"]}`, `"1.2.3.4:0"`},
		{"stubDomains", `{"acme.local": ["tls://1.2.3.4"]}`, `"tls://1.2.3.4"`},
		{"stubDomains", `{"a.local": ["1.2.3.4"], "A.local.": ["1.2.3.5"]}`, "twice"},
		{"stubDomains", "", "JSON"},
		{"upstreamNameservers", `["1.1.1.1", "8.8.8.8", "9.9.9.9", "1.0.0.1"]`, "at most 3"},
		{"upstreamNameservers", `["dns.google"]`, `"dns.google"`},
		{"upstreamNameservers", `"8.8.8.8"`, "JSON list"},
		{"upstreamNameservers", "\xff\xfe", "UTF-8"},
	} {
		dir := t.TempDir()
		mount(t, dir, map[string]string{tc.file: tc.content})
		_, err := kubedns.Read(dir)
		var fe *kubedns.FileError
		if err == nil || !errors.As(err, &fe) || fe.File != filepath.Join(dir, tc.file) ||
			!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Join(dir, tc.file)) {
			t.Errorf("%s %q: %v; want an error naming the file and %q", tc.file, tc.content, err, tc.want)
		}
	}
}

// TestSourceLive: a kubelet update (symlink swap) is a change; the same
// content is not; bad content keeps the last good configuration.
func TestSourceLive(t *testing.T) {
	dir := t.TempDir()
	mount(t, dir, map[string]string{"stubDomains": `{"a.local": ["1.2.3.4"]}`})
	s := &kubedns.Source{Dir: dir}
	c, changed, err := s.Load()
	if err != nil || !changed || len(c.StubDomains) != 1 {
		t.Fatalf("first load: %+v %v %v", c, changed, err)
	}
	if _, changed, err := s.Load(); changed || err != nil {
		t.Fatalf("second load of the same content: changed %v, %v", changed, err)
	}
	mount(t, dir, map[string]string{"stubDomains": `{"a.local": ["1.2.3.4"], "b.local": ["1.2.3.5"]}`})
	c, changed, err = s.Load()
	if err != nil || !changed || len(c.StubDomains) != 2 {
		t.Fatalf("after the swap: %+v %v %v", c, changed, err)
	}
	mount(t, dir, map[string]string{"stubDomains": `{"a.local": [`})
	c, changed, err = s.Load()
	if err == nil || changed || len(c.StubDomains) != 2 || !strings.Contains(err.Error(), "stubDomains") {
		t.Fatalf("bad content: %+v %v %v; want the last good one and an error naming the file", c, changed, err)
	}
	if got := s.Current(); len(got.StubDomains) != 2 {
		t.Errorf("Current after a bad read: %+v", got)
	}
	// Different bytes, same meaning: reported as a change (the caller
	// compares configurations before acting), with an equal Config.
	before := s.Current()
	mount(t, dir, map[string]string{"stubDomains": `{"b.local": ["1.2.3.5"], "a.local": ["1.2.3.4"]}`})
	if c, changed, err := s.Load(); err != nil || !changed || !c.Equal(before) {
		t.Errorf("same meaning, new bytes: %+v changed %v err %v", c, changed, err)
	}
	// The ConfigMap removed: nothing configured.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	c, changed, err = s.Load()
	if err != nil || !changed || !c.Empty() {
		t.Errorf("removed directory: %+v %v %v", c, changed, err)
	}
}

func TestConfigEqual(t *testing.T) {
	a := kubedns.Config{StubDomains: map[string][]string{"a": {"1.2.3.4"}}, UpstreamNameservers: []string{"8.8.8.8"}}
	b := kubedns.Config{StubDomains: map[string][]string{"a": {"1.2.3.4"}}, UpstreamNameservers: []string{"8.8.8.8"}}
	if !a.Equal(b) {
		t.Error("equal configs differ")
	}
	b.StubDomains["a"] = []string{"1.2.3.5"}
	if a.Equal(b) {
		t.Error("different stub servers equal")
	}
}
