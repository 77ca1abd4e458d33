package migrate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// shape renders a parsed file compactly: blocks, directives with their
// lines and arguments, blocks of options indented.
func shape(f *File) string {
	var b strings.Builder
	var dirs func(ds []*Directive, indent string)
	dirs = func(ds []*Directive, indent string) {
		for _, d := range ds {
			fmt.Fprintf(&b, "%s%d:%s", indent, d.Line, d.Name)
			for _, a := range d.Args {
				fmt.Fprintf(&b, " [%s]", a.Text)
			}
			b.WriteByte('\n')
			dirs(d.Block, indent+"  ")
		}
	}
	for _, sb := range f.Blocks {
		var ks []string
		for _, k := range sb.Keys {
			ks = append(ks, k.Text)
		}
		fmt.Fprintf(&b, "block %d %s\n", sb.Line, strings.Join(ks, "|"))
		dirs(sb.Directives, "  ")
	}
	return b.String()
}

func TestParse(t *testing.T) {
	src := `# a comment
.:53 example.org, 
  example.net:5353 {
    forward . 5.6.7.8 tls://1.2.3.4#the rest of the line is a comment { force_tcp }
    errors { consolidate 5m ".* i/o timeout" }
    cache 30
    {
        success 100
    }
    hosts {
        10.0.0.1 "quoted name" "with \"escapes\" and
a newline"
        fallthrough
    }
    bind {$ADDR}:{%PORT%} x{$UNSET}y
}
cluster.local {
    kubernetes
}
`
	env := map[string]string{"ADDR": "127.0.0.1", "PORT": "53"}
	f, err := Parse([]byte(src), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	want := `block 2 .:53|example.org|example.net:5353
  4:forward [.] [5.6.7.8] [tls://1.2.3.4]
  5:errors
    5:consolidate [5m] [.* i/o timeout]
  6:cache [30]
    8:success [100]
  10:hosts
    11:10.0.0.1 [quoted name] [with "escapes" and
a newline]
    13:fallthrough
  15:bind [127.0.0.1:53] [xy]
block 17 cluster.local
  18:kubernetes
`
	if got := shape(f); got != want {
		t.Errorf("parsed:\n%s\nwant:\n%s", got, want)
	}
	if len(f.Skipped) != 1 || f.Skipped[0].Line != 15 || !strings.Contains(f.Skipped[0].Text, "UNSET") {
		t.Errorf("skipped: %+v; want the unset variable on line 15", f.Skipped)
	}
}

func TestParseSnippetsAndImports(t *testing.T) {
	src := `(common) {
    errors
    cache {
        success 10
    }
}
import /etc/coredns/custom/*.server
.:53 {
    import common
    forward . 8.8.8.8
}
`
	f, err := Parse([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := shape(f); got != "block 8 .:53\n  10:forward [.] [8.8.8.8]\n" {
		t.Errorf("parsed:\n%s", got)
	}
	var lines []int
	for _, n := range f.Skipped {
		lines = append(lines, n.Line)
	}
	if fmt.Sprint(lines) != "[1 7 9]" {
		t.Errorf("skipped at lines %v, want the snippet (1), the top-level import (7) and the block's (9): %+v", lines, f.Skipped)
	}
}

func TestParseWithoutBraces(t *testing.T) {
	f, err := Parse([]byte(".:53\nforward . 1.1.1.1\ncache\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := shape(f); got != "block 1 .:53\n  2:forward [.] [1.1.1.1]\n  3:cache\n" {
		t.Errorf("parsed:\n%s", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		line int
		want string
	}{
		{".:53 {\n  forward . 1.1.1.1\n", 1, "not closed"},
		{".:53 {\n  cache {\n    success 1\n", 2, "cache: { not closed"},
		{".:53 {\n  cache {\n    success 1\n}\n", 1, "server block \".:53\": { not closed"},
		{".:53 {\n}\n}\n", 3, "unexpected"},
		{"{\n}\n", 1, "unexpected"},
		{".:53 {\n  hosts \"10.0.0.1 a\n}\n", 2, "quoted string not closed"},
		{".:53 {\n  {\n  }\n}\n", 2, "a block must follow a directive"},
		{".:53 {\n}\nexample.org\nforward . 1.1.1.1\n", 3, "without { }"},
	} {
		_, err := Parse([]byte(tc.src), nil)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != tc.line || !strings.Contains(se.Msg, tc.want) {
			t.Errorf("%q: %v; want a syntax error at line %d with %q", tc.src, err, tc.line, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{".:53 {\n forward . 1.1.1.1 { force_tcp }\n}\n", "(x) {\n}\nimport x\n", "a \"b\nc\" {$X} {\n{\n}\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse([]byte(src), func(string) (string, bool) { return "v", true })
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		// Whatever parses maps without panicking.
		if _, err := Migrate([]byte(src), Options{Env: func(string) (string, bool) { return "v", true }, ClusterDomain: "cluster.local"}); err != nil {
			t.Fatalf("parsed but Migrate failed: %v", err)
		}
		_ = file
	})
}
