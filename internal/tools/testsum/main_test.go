package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stream builds a `go test -json` stream from "Action Package Test
// Output" lines (Test "-" for none; Output may hold spaces).
func stream(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		f := strings.SplitN(l, " ", 4)
		for len(f) < 4 {
			f = append(f, "")
		}
		test := f[2]
		if test == "-" {
			test = ""
		}
		out := ""
		if f[3] != "" {
			out = f[3] + "\n"
		}
		b.WriteString(`{"Action":"` + f[0] + `","Package":"` + f[1] + `","Test":"` + test + `","Output":` + quote(out) + "}\n")
	}
	return b.String()
}

func quote(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func runSum(t *testing.T, in string, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := mainErr(args, strings.NewReader(in), &out, &errb)
	return out.String() + errb.String(), code
}

const pkg = "github.com/nodedns/nodedns/integration"

func TestPassingRun(t *testing.T) {
	in := stream("run "+pkg+" TestA", "output "+pkg+" TestA === RUN   TestA", "pass "+pkg+" TestA",
		"output "+pkg+" - ok  \t"+pkg+"\t0.1s", "pass "+pkg+" -",
		"skip github.com/nodedns/nodedns/cmd/x - ")
	out, code := runSum(t, in)
	if code != 0 || !strings.Contains(out, "1 tests passed, 0 failed, 0 skipped") || !strings.Contains(out, "(1 without tests)") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestSkipFailsUnlessAllowed(t *testing.T) {
	in := stream("run "+pkg+" TestSoak",
		"output "+pkg+" TestSoak === RUN   TestSoak",
		"output "+pkg+" TestSoak     soak_test.go:111: soak runs only with NODEDNS_SOAK=DURATION",
		"output "+pkg+" TestSoak --- SKIP: TestSoak (0.00s)",
		"skip "+pkg+" TestSoak",
		"run "+pkg+" TestA", "pass "+pkg+" TestA", "pass "+pkg+" -")
	out, code := runSum(t, in)
	if code != 1 || !strings.Contains(out, "SKIP NOT ALLOWED integration TestSoak: soak_test.go:111: soak runs only with NODEDNS_SOAK=DURATION") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	out, code = runSum(t, in, "-allow", "integration:TestSoak=the opt-in soak")
	if code != 0 || !strings.Contains(out, "[allowed: the opt-in soak]") || !strings.Contains(out, "1 allowed, 0 not allowed") {
		t.Fatalf("allowed: exit %d:\n%s", code, out)
	}
	// The rule names a package: the same test elsewhere may not skip.
	out, code = runSum(t, strings.ReplaceAll(in, "/integration", "/other"), "-allow", "integration:TestSoak=the opt-in soak")
	if code != 1 {
		t.Fatalf("another package's TestSoak allowed: exit %d:\n%s", code, out)
	}
}

func TestSubtestSkipMatchesParentRule(t *testing.T) {
	in := stream("run "+pkg+" TestX", "run "+pkg+" TestX/a", "skip "+pkg+" TestX/a", "pass "+pkg+" TestX", "pass "+pkg+" -")
	if out, code := runSum(t, in, "-allow", "integration:TestX=why"); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if out, code := runSum(t, in, "-allow", "integration:TestXY=why"); code != 1 {
		t.Fatalf("TestXY's rule let TestX/a skip: exit %d:\n%s", code, out)
	}
}

func TestFailures(t *testing.T) {
	for name, in := range map[string]string{
		"failed test":  stream("run "+pkg+" TestA", "fail "+pkg+" TestA", "fail "+pkg+" -"),
		"unfinished":   stream("run "+pkg+" TestA", "run "+pkg+" TestB", "pass "+pkg+" TestB", "output "+pkg+" - panic: boom"),
		"package fail": stream("run "+pkg+" TestA", "pass "+pkg+" TestA", "output "+pkg+" - FAIL", "fail "+pkg+" -"),
		"nothing ran":  stream("skip " + pkg + " -"),
		"empty":        "",
		"build failed": `{"ImportPath":"` + pkg + ` [` + pkg + `.test]","Action":"build-output","Output":"x.go:1: syntax error\n"}` + "\n" +
			`{"ImportPath":"` + pkg + ` [` + pkg + `.test]","Action":"build-fail"}` + "\n" +
			stream("run github.com/nodedns/nodedns/a TestA", "pass github.com/nodedns/nodedns/a TestA", "pass github.com/nodedns/nodedns/a -"),
	} {
		if out, code := runSum(t, in); code != 1 {
			t.Errorf("%s: exit %d:\n%s", name, code, out)
		}
	}
}

func TestBadAllow(t *testing.T) {
	for _, a := range []string{"TestSoak", "integration:TestSoak", "integration:TestSoak=", ":T=why"} {
		if _, code := runSum(t, "", "-allow", a); code != 2 {
			t.Errorf("-allow %q: exit %d, want 2", a, code)
		}
	}
}

// TestFiles: kept streams summed up together; a real go test stream.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "unit.json")
	if err := os.WriteFile(a, []byte(stream("run "+pkg+" TestA", "pass "+pkg+" TestA", "pass "+pkg+" -")), 0o644); err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "integration.json")
	if err := os.WriteFile(b, []byte(stream("run "+pkg+" TestS", "output "+pkg+" TestS     s_test.go:1: no root", "skip "+pkg+" TestS", "pass "+pkg+" -")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runSum(t, "", a, b)
	if code != 1 || !strings.Contains(out, "unit: 1 tests passed") || !strings.Contains(out, "integration: 0 tests passed, 0 failed, 1 skipped") ||
		!strings.Contains(out, "SKIP NOT ALLOWED integration TestS: s_test.go:1: no root") {
		t.Fatalf("exit %d:\n%s", code, out)
	}

	// The real thing: go test -json of a package with a skip.
	if testing.Short() {
		return
	}
	mod := t.TempDir()
	for name, s := range map[string]string{
		"go.mod":    "module m\n\ngo 1.21\n",
		"m_test.go": "package m\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n\nfunc TestNo(t *testing.T) { t.Skip(\"no frobnicator\") }\n",
	} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	js, err := cmd.Output()
	if err != nil {
		t.Fatalf("go test: %v\n%s", err, js)
	}
	out, code = runSum(t, string(js))
	if code != 1 || !strings.Contains(out, "1 tests passed, 0 failed, 1 skipped") || !strings.Contains(out, "m TestNo: m_test.go:7: no frobnicator") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	out, code = runSum(t, string(js), "-allow", "m:TestNo=no frobnicator here")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestFailureMessages: the summary quotes a failed test's last messages
// (the first line of each, cut short), so that a run's last lines say why
// it failed; a passed test's are not quoted.
func TestFailureMessages(t *testing.T) {
	long := strings.Repeat("x", 400)
	lines := []string{"run " + pkg + " TestNS", "output " + pkg + " TestNS === RUN   TestNS"}
	for i := 0; i < 8; i++ {
		lines = append(lines, "output "+pkg+" TestNS     namespaces_test.go:29"+string(rune('0'+i))+": step "+string(rune('0'+i)))
	}
	lines = append(lines,
		"output "+pkg+" TestNS     namespaces_test.go:421: timed out after 10s waiting for the bound: map[NXDOMAIN:1]",
		"output "+pkg+" TestNS         a continuation line of that message",
		"output "+pkg+" TestNS     controlplane_test.go:104: control plane logs: "+long,
		"output "+pkg+" TestNS --- FAIL: TestNS (24.00s)",
		"fail "+pkg+" TestNS",
		"run "+pkg+" TestOK", "output "+pkg+" TestOK     ok_test.go:1: fine", "pass "+pkg+" TestOK",
		"fail "+pkg+" -")
	out, code := runSum(t, stream(lines...))
	if code != 1 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	_, summary, _ := strings.Cut(out, "tests passed")
	for _, want := range []string{
		"  failed: integration TestNS\n      namespaces_test.go:294: step 4\n",
		"      namespaces_test.go:421: timed out after 10s waiting for the bound: map[NXDOMAIN:1]\n",
		"      controlplane_test.go:104: control plane logs: " + long[:240-len("controlplane_test.go:104: control plane logs: ")] + "...\n",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	for _, not := range []string{"step 3", "a continuation line", "ok_test.go"} {
		if strings.Contains(summary, not) {
			t.Errorf("summary quotes %q (an older message, a continuation or a passed test's):\n%s", not, summary)
		}
	}
}
