// Command testsum reads the event stream of `go test -json` and decides
// whether a test run passed: no test or package failed, no test was left
// unfinished, at least one test ran, and every skipped test is on an
// allow-list. A skip is how a test says it did not test: a missing program,
// no root, a port taken. Left unchecked, a run where every integration test
// skipped ends "ok" like one where they all ran, so a skip fails the run
// unless it is allowed by name, with the reason it is allowed.
//
//	go test -json ./... | testsum [-label NAME] [-json FILE] [-log FILE] [-show REGEXP] [-v] [-allow PKG:TEST=WHY]...
//	testsum [-allow PKG:TEST=WHY]... FILE...
//
// With no FILE it reads the stream from stdin while the tests run, keeps it
// in -json FILE and the tests' text output in -log FILE, and prints
// progress: each package's result, each failed test with its output, each
// skipped test with its reason, output lines matching -show (all of it
// with -v). With FILEs (streams kept earlier with -json) it prints only the
// summary, over all of them: scripts/test.sh ends with that. The summary
// names each failed test with its last messages (the first line of each):
// the failure is among them.
//
// PKG matches a package path or its last elements ("integration" matches
// github.com/nodedns/nodedns/integration); TEST matches a test and its
// subtests. The exit status is 0 when the run passed, 1 when not, 2 on a
// usage error.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), with the build
// events go test adds (build-output, build-fail).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// allowRule lets one test (and its subtests) skip.
type allowRule struct {
	pkg, test, why string
}

type allowList []allowRule

func (a *allowList) String() string {
	var s []string
	for _, r := range *a {
		s = append(s, r.pkg+":"+r.test+"="+r.why)
	}
	return strings.Join(s, ", ")
}

func (a *allowList) Set(v string) error {
	spec, why, ok := strings.Cut(v, "=")
	pkg, test, ok2 := strings.Cut(spec, ":")
	if !ok || !ok2 || pkg == "" || test == "" || strings.TrimSpace(why) == "" {
		return fmt.Errorf("want PKG:TEST=WHY, got %q", v)
	}
	*a = append(*a, allowRule{pkg, test, strings.TrimSpace(why)})
	return nil
}

// why returns the reason test of pkg may skip, or "" when it may not.
func (a allowList) why(pkg, test string) string {
	for _, r := range a {
		if (pkg == r.pkg || strings.HasSuffix(pkg, "/"+r.pkg)) && (test == r.test || strings.HasPrefix(test, r.test+"/")) {
			return r.why
		}
	}
	return ""
}

// result is one finished (or unfinished) test.
type result struct {
	pkg, test, action string
	elapsed           float64
	output            []string
}

// run tallies one stream.
type run struct {
	label   string
	running map[string]*result // by pkg + "\x00" + test
	done    []*result
	pkgs    map[string]string // package -> pass, fail, skip (no test files)
	pkgOut  map[string][]string
	builds  map[string][]string // failed builds' output
	junk    int                 // lines that were not events
}

func newRun(label string) *run {
	return &run{label: label, running: map[string]*result{}, pkgs: map[string]string{},
		pkgOut: map[string][]string{}, builds: map[string][]string{}}
}

// printer shows progress while a stream is read; nil prints nothing.
type printer struct {
	w    io.Writer
	show *regexp.Regexp
	all  bool
}

func (p *printer) line(s string) {
	if p != nil {
		fmt.Fprint(p.w, s)
	}
}

// add takes in one event.
func (r *run) add(e event, p *printer) {
	switch e.Action {
	case "build-output":
		r.builds[e.ImportPath] = append(r.builds[e.ImportPath], e.Output)
		p.line(e.Output)
		return
	case "build-fail":
		r.builds[e.ImportPath] = append(r.builds[e.ImportPath], "")
		return
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			if p != nil && (p.all || strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") ||
				strings.HasPrefix(e.Output, "panic") || (p.show != nil && p.show.MatchString(e.Output))) {
				p.line(e.Output)
			} else {
				// Kept to be shown if the package fails.
				r.pkgOut[e.Package] = append(r.pkgOut[e.Package], e.Output)
			}
		case "pass", "fail", "skip":
			r.pkgs[e.Package] = e.Action
			if e.Action == "fail" && p != nil && !p.all {
				// Output outside any test (a panic in TestMain, a
				// timeout's goroutine dump) is all a failed package
				// has to say.
				for _, o := range tail(r.pkgOut[e.Package], 60) {
					p.line(o)
				}
			}
		}
		return
	}
	key := e.Package + "\x00" + e.Test
	t := r.running[key]
	if t == nil {
		t = &result{pkg: e.Package, test: e.Test}
		r.running[key] = t
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
		if p != nil && (p.all || (p.show != nil && p.show.MatchString(e.Output))) {
			p.line(e.Output)
		}
	case "pass", "fail", "skip":
		t.action, t.elapsed = e.Action, e.Elapsed
		delete(r.running, key)
		r.done = append(r.done, t)
		if p != nil && !p.all {
			switch e.Action {
			case "fail":
				for _, o := range t.output {
					if !(p.show != nil && p.show.MatchString(o)) {
						p.line(o)
					}
				}
			case "skip":
				p.line(fmt.Sprintf("--- SKIP: %s %s: %s\n", short(t.pkg), t.test, reason(t.output)))
			case "pass":
				if !strings.Contains(t.test, "/") && p.show != nil {
					p.line(fmt.Sprintf("--- PASS: %s (%.2fs)\n", t.test, t.elapsed))
				}
			}
		}
	}
}

// read takes in a stream of events; lines that are not events (text from
// a tool that ran before go test) are shown and counted.
func (r *run) read(in io.Reader, keep io.Writer, log io.Writer, p *printer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if keep != nil {
			keep.Write(b)
			keep.Write([]byte{'\n'})
		}
		var e event
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil || e.Action == "" {
			r.junk++
			p.line(string(b) + "\n")
			if log != nil {
				fmt.Fprintln(log, string(b))
			}
			continue
		}
		if log != nil && e.Output != "" {
			io.WriteString(log, e.Output)
		}
		r.add(e, p)
	}
	return sc.Err()
}

// reason is a skipped test's message: its output less the lines go test
// writes itself.
func reason(out []string) string {
	var parts []string
	for _, o := range out {
		s := strings.TrimSpace(o)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- SKIP") {
			continue
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	s := strings.Join(parts, " / ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// maxMessages and maxMessageLen bound what the summary quotes of a failed
// test: its last messages, each cut short.
const (
	maxMessages   = 6
	maxMessageLen = 240
)

// fileLine matches the first line of a message of t.Log, t.Error or
// t.Fatal: "    name_test.go:123: text".
var fileLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// messages is what a failed test said, for the summary: the first line of
// each of its last n messages (the failure is among them: a t.Fatal ends
// the test, and only its cleanups' messages can follow), each at most
// maxMessageLen bytes.
func messages(out []string, n int) []string {
	var ms []string
	for _, o := range out {
		if !fileLine.MatchString(o) {
			continue
		}
		m := strings.TrimSpace(o)
		if len(m) > maxMessageLen {
			m = m[:maxMessageLen] + "..."
		}
		ms = append(ms, m)
	}
	return tail(ms, n)
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/nodedns/nodedns/")
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// verdict sums up runs: the summary text and whether they passed.
func verdict(runs []*run, allow allowList) (string, bool) {
	var b strings.Builder
	ok := true
	var allowed, refused []string
	for _, r := range runs {
		var pass, fail, skip, subtests int
		var failed []string
		// A failed test's own messages, by its name: a test whose
		// subtests failed has none of its own (its subtests are listed).
		said := map[string][]string{}
		for _, t := range r.done {
			if strings.Contains(t.test, "/") {
				subtests++
			}
			switch t.action {
			case "pass":
				pass++
			case "fail":
				fail++
				failed = append(failed, short(t.pkg)+" "+t.test)
				said[short(t.pkg)+" "+t.test] = messages(t.output, maxMessages)
			case "skip":
				skip++
				line := fmt.Sprintf("%s %s: %s", short(t.pkg), t.test, reason(t.output))
				if why := allow.why(t.pkg, t.test); why != "" {
					allowed = append(allowed, line+"  [allowed: "+why+"]")
				} else {
					refused = append(refused, line)
				}
			}
		}
		var unfinished []string
		for _, t := range r.running {
			unfinished = append(unfinished, short(t.pkg)+" "+t.test)
		}
		var pkgFail, noTests []string
		for pkg, a := range r.pkgs {
			switch a {
			case "fail":
				pkgFail = append(pkgFail, short(pkg))
			case "skip":
				noTests = append(noTests, short(pkg))
			}
		}
		var buildFail []string
		for pkg := range r.builds {
			if _, ran := r.pkgs[pkg]; !ran {
				buildFail = append(buildFail, short(pkg))
			}
		}
		sort.Strings(failed)
		sort.Strings(unfinished)
		sort.Strings(pkgFail)
		sort.Strings(buildFail)
		fmt.Fprintf(&b, "%s: %d tests passed, %d failed, %d skipped (%d of them subtests) in %d packages (%d without tests)\n",
			r.label, pass, fail, skip, subtests, len(r.pkgs)-len(noTests), len(noTests))
		for _, f := range failed {
			fmt.Fprintf(&b, "  failed: %s\n", f)
			for _, m := range said[f] {
				fmt.Fprintf(&b, "      %s\n", m)
			}
		}
		for _, f := range unfinished {
			fmt.Fprintf(&b, "  unfinished (a panic or a timeout?): %s\n", f)
		}
		for _, f := range pkgFail {
			fmt.Fprintf(&b, "  package failed: %s\n", f)
		}
		for _, f := range buildFail {
			fmt.Fprintf(&b, "  build failed: %s\n", f)
		}
		if fail > 0 || len(unfinished) > 0 || len(pkgFail) > 0 || len(buildFail) > 0 {
			ok = false
		}
		if len(r.done) == 0 {
			fmt.Fprintf(&b, "  no test ran\n")
			ok = false
		}
	}
	fmt.Fprintf(&b, "skipped: %d allowed, %d not allowed\n", len(allowed), len(refused))
	sort.Strings(allowed)
	sort.Strings(refused)
	for _, s := range allowed {
		fmt.Fprintf(&b, "  skip %s\n", s)
	}
	for _, s := range refused {
		fmt.Fprintf(&b, "  SKIP NOT ALLOWED %s\n", s)
	}
	if len(refused) > 0 {
		ok = false
	}
	if ok {
		b.WriteString("PASS\n")
	} else {
		b.WriteString("FAIL\n")
	}
	return b.String(), ok
}

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func mainErr(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testsum", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var allow allowList
	fs.Var(&allow, "allow", "PKG:TEST=WHY: TEST of PKG (and its subtests) may skip, for the reason WHY (repeatable)")
	label := fs.String("label", "tests", "name of this run in the summary")
	keepPath := fs.String("json", "", "keep the event stream in this file")
	logPath := fs.String("log", "", "write the tests' text output to this file")
	show := fs.String("show", "", "also print output lines matching this regular expression")
	all := fs.Bool("v", false, "print all output")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		var runs []*run
		for _, f := range fs.Args() {
			in, err := os.Open(f)
			if err != nil {
				fmt.Fprintln(stderr, "testsum:", err)
				return 1
			}
			r := newRun(strings.TrimSuffix(filepath.Base(f), ".json"))
			err = r.read(in, nil, nil, nil)
			in.Close()
			if err != nil {
				fmt.Fprintf(stderr, "testsum: %s: %v\n", f, err)
				return 1
			}
			runs = append(runs, r)
		}
		s, ok := verdict(runs, allow)
		fmt.Fprint(stdout, s)
		if !ok {
			return 1
		}
		return 0
	}
	p := &printer{w: stdout, all: *all}
	if *show != "" {
		re, err := regexp.Compile(*show)
		if err != nil {
			fmt.Fprintln(stderr, "testsum: -show:", err)
			return 2
		}
		p.show = re
	}
	var keep, log io.Writer
	for _, o := range []struct {
		path string
		w    *io.Writer
	}{{*keepPath, &keep}, {*logPath, &log}} {
		if o.path == "" {
			continue
		}
		f, err := os.Create(o.path)
		if err != nil {
			fmt.Fprintln(stderr, "testsum:", err)
			return 1
		}
		defer f.Close()
		bw := bufio.NewWriter(f)
		defer bw.Flush()
		*o.w = bw
	}
	r := newRun(*label)
	if err := r.read(stdin, keep, log, p); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "testsum: reading the stream:", err)
		return 1
	}
	s, ok := verdict([]*run{r}, allow)
	fmt.Fprint(stdout, s)
	if !ok {
		return 1
	}
	return 0
}
