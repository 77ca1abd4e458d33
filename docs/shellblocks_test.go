package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// runnableDocs are the documents whose marked shell blocks
// scripts/docs-e2e.sh runs on the local cluster.
var runnableDocs = []string{"install.md", "troubleshooting.md"}

// shellBlock is a fenced block marked to be run: ```sh node (on the node,
// as root) or ```sh kubectl (against the cluster).
type shellBlock struct {
	file string // relative to the repository root
	line int    // the fence's line
	kind string // node or kubectl
	text string
}

func (b shellBlock) String() string { return fmt.Sprintf("%s:%d %s", b.file, b.line, b.kind) }

// blockKinds are the marks a sh fence may carry; anything else after "sh"
// is a typo that would silently keep a block from being run.
var blockKinds = []string{"node", "kubectl"}

var fence = regexp.MustCompile("^```(\\S*)(?:[ \\t]+(.*?))?[ \\t]*$")

// shellBlocks returns the marked blocks of the document at path (relative
// to this directory), and an error for a sh fence with an unknown mark or
// a block left open.
func shellBlocks(path string) ([]shellBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []shellBlock
	var cur *shellBlock
	open := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		m := fence.FindStringSubmatch(l)
		switch {
		case open && m != nil && m[1] == "" && m[2] == "":
			open = false
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
		case open:
			if cur != nil {
				cur.text += l + "\n"
			}
		case m != nil:
			open = true
			if m[1] == "sh" && m[2] != "" {
				if !slices.Contains(blockKinds, m[2]) {
					return nil, fmt.Errorf("%s:%d: sh fence marked %q: want one of %v", path, n, m[2], blockKinds)
				}
				cur = &shellBlock{file: filepath.ToSlash(filepath.Join("docs", path)), line: n, kind: m[2]}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open {
		return nil, fmt.Errorf("%s: a fenced block is not closed", path)
	}
	return out, nil
}

// TestShellBlocks: the blocks of install.md and troubleshooting.md marked
// to run on a node or against the cluster parse as bash, each document has
// both kinds, and scripts/docs-e2e.sh (which runs them on the local
// cluster) finds exactly these blocks.
func TestShellBlocks(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to check the docs' shell blocks: %v", err)
	}
	var all []string
	for _, doc := range runnableDocs {
		blocks, err := shellBlocks(doc)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, b := range blocks {
			kinds[b.kind]++
			all = append(all, b.String())
			f := filepath.Join(t.TempDir(), "block.sh")
			if err := os.WriteFile(f, []byte(b.text), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
				t.Errorf("%s: bash -n: %v\n%s\n%s", b, err, out, b.text)
			}
			if strings.TrimSpace(b.text) == "" {
				t.Errorf("%s: empty block", b)
			}
		}
		for _, k := range blockKinds {
			if kinds[k] == 0 {
				t.Errorf("%s: no block marked ```sh %s", doc, k)
			}
		}
	}
	cmd := exec.Command(bash, "scripts/docs-e2e.sh", "--list")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/docs-e2e.sh --list: %v", err)
	}
	got := strings.Fields(strings.ReplaceAll(string(out), " ", "_"))
	want := make([]string, len(all))
	for i, s := range all {
		want[i] = strings.ReplaceAll(s, " ", "_")
	}
	if !slices.Equal(got, want) {
		t.Errorf("scripts/docs-e2e.sh --list finds %q, this test %q", got, want)
	}
}
