// Package docs holds the project's documentation. Its only Go is this test,
// which keeps what the documents, scripts, manifests and comments say of
// the tree true to it: every path they name exists, and the package table
// of architecture.md lists every package there is and nothing else.
package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoPath is a path in this repository as prose writes it: a top-level
// directory of the tree, then path elements. One that continues a longer
// path (an import path, a URL, a path under another directory) is not
// matched: the character before it must not be one a path holds.
var repoPath = regexp.MustCompile(`(?:^|[^\w./-])((?:pkg|internal|cmd|integration|scripts|deploy|docs|bench)/[\w.-]+(?:/[\w.-]+)*)`)

// notOurs are paths that look like the tree's but name something else.
var notOurs = map[string]string{
	"cmd/test2json":     "Go's own command",
	"pkg/apis/v1alpha1": "the multicluster API's module path",
	"pkg/testdata/fuzz": "scripts/fuzz.sh's pattern, $pkg/testdata/fuzz",
}

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatalf("finding the repository root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", dir, err)
	}
	return dir
}

// texts lists the files whose words name paths: source, scripts,
// documents and manifests. bench/RESULTS.md is a record of past runs and
// keeps the words those runs used; it is checked too, so that a command
// it gives can be run again on this tree.
func texts(t *testing.T, top string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".yaml", ".yml", ".tpl", ".c", ".txt", ".json":
			out = append(out, path)
		case "":
			if d.Name() == "Dockerfile" || d.Name() == "run" {
				out = append(out, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing the tree: %v", err)
	}
	return out
}

// TestNamedPathsExist: every path of the tree that a file names exists, so
// that no document, script, chart or comment sends a reader to a package
// or file that moved.
func TestNamedPathsExist(t *testing.T) {
	top := root(t)
	for _, file := range texts(t, top) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		line := 0
		for sc.Scan() {
			line++
			for _, m := range repoPath.FindAllStringSubmatch(sc.Text(), -1) {
				p := strings.TrimRight(m[1], ".-")
				if _, ok := notOurs[p]; ok || strings.Contains(p, "...") {
					continue
				}
				// A Go name after a package's path (pkg/k8s.Config) is
				// the package's.
				if i := strings.LastIndexByte(p, '.'); i > strings.LastIndexByte(p, '/') && i+1 < len(p) && p[i+1] >= 'A' && p[i+1] <= 'Z' {
					p = p[:i]
				}
				if _, err := os.Stat(filepath.Join(top, p)); err != nil {
					rel, _ := filepath.Rel(top, file)
					t.Errorf("%s:%d names %s, which is not in the tree", rel, line, p)
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
		f.Close()
	}
}

// TestPackageTable: architecture.md's package table lists each Go package
// under cmd/, pkg/ and internal/ (a directory with a non-test .go file), and
// names no other; it is the one table of the packages (the README links it).
func TestPackageTable(t *testing.T) {
	top := root(t)
	doc, err := os.ReadFile(filepath.Join(top, "docs", "architecture.md"))
	if err != nil {
		t.Fatalf("reading architecture.md: %v", err)
	}
	row := regexp.MustCompile("(?m)^\\| `((?:cmd|pkg|internal)/[^`]*)` \\|")
	var listed []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		listed = append(listed, strings.TrimSuffix(m[1], "/..."))
	}
	if len(listed) == 0 {
		t.Fatal("architecture.md has no package table (rows of the form | `pkg/...` | role |)")
	}
	var pkgs []string
	for _, dir := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(top, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(top, filepath.Dir(path))
			if !slices.Contains(pkgs, rel) {
				pkgs = append(pkgs, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("listing %s: %v", dir, err)
		}
	}
	// A row may stand for a group of packages under it ("internal/tools"):
	// a package is listed when a row names it or a directory above it.
	covered := func(p string) bool {
		for _, l := range listed {
			if p == l || strings.HasPrefix(p, l+"/") {
				return true
			}
		}
		return false
	}
	for _, p := range pkgs {
		if !covered(p) {
			t.Errorf("package %s is not in architecture.md's package table", p)
		}
	}
	for _, l := range listed {
		if !slices.ContainsFunc(pkgs, func(p string) bool { return p == l || strings.HasPrefix(p, l+"/") }) {
			t.Errorf("architecture.md's package table lists %s, which holds no package", l)
		}
	}
	readme, err := os.ReadFile(filepath.Join(top, "README.md"))
	if err != nil {
		t.Fatalf("reading README.md: %v", err)
	}
	if n := len(row.FindAllString(string(readme), -1)); n > 0 {
		t.Errorf("README.md has %d rows of a package table; it links docs/architecture.md's instead", n)
	}
	if !strings.Contains(string(readme), "docs/architecture.md") {
		t.Error("README.md does not link docs/architecture.md")
	}
}
