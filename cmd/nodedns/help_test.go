package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestServeHelpReadsCleanly renders `nodedns serve --help` and rejects what
// only the code's authors would understand: a value name the flag package
// took from a backquoted word of the help (it prints "-kubeconfig-context
// kubeconfig FILE CONTEXT" for a help holding `kubeconfig FILE CONTEXT`),
// any backquote left, and the name of a Go function or type of this module
// ("checked with the stub domains (validateUpstreams)").
func TestServeHelpReadsCleanly(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("serve --help: exit %d: %s", code, errb.String())
	}
	help := out.String() + errb.String()
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)(?: (.*))?$`)
	valueNames := map[string]bool{"": true, "string": true, "value": true, "duration": true, "int": true, "uint": true, "float": true, "int64": true, "uint64": true}
	flags := 0
	for _, line := range strings.Split(help, "\n") {
		m := flagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		flags++
		if !valueNames[m[2]] {
			t.Errorf("-%s: value name %q comes from a backquoted word of its help", m[1], m[2])
		}
	}
	if flags < 50 {
		t.Fatalf("serve --help listed %d flags; want the whole table:\n%s", flags, help)
	}
	if strings.Contains(help, "`") {
		t.Errorf("serve --help holds a backquote")
	}
	idents := moduleIdentifiers(t)
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)?`)
	seen := map[string]bool{}
	for _, w := range word.FindAllString(help, -1) {
		if seen[w] {
			continue
		}
		seen[w] = true
		// A Go identifier mixes cases inside the word (validateUpstreams,
		// ListenAddrs) or is package-qualified (config.Load); plain words
		// that happen to name a function (Build, reload) are English.
		mixed := regexp.MustCompile(`[a-z][A-Z]`).MatchString(w) || strings.Contains(w, ".")
		if name := w[strings.LastIndex(w, ".")+1:]; mixed && idents[name] {
			t.Errorf("serve --help names the Go identifier %q", w)
		}
	}
}

// moduleIdentifiers is every function, method and type name declared in
// the module's Go files (tests excluded).
func moduleIdentifiers(t *testing.T) map[string]bool {
	t.Helper()
	root := filepath.Join("..", "..")
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				out[d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						out[ts.Name.Name] = true
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the module's Go files: %v", err)
	}
	if !out["validateUpstreams"] || !out["Build"] {
		t.Fatalf("the module's identifiers were not read (%d found)", len(out))
	}
	return out
}
