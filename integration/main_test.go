//go:build integration

// Package integration runs the real agent against a real kube-apiserver and
// etcd on loopback, real iptables and real resolvers inside network
// namespaces the tests create. It needs root. Run it through
// scripts/test.sh, which installs and builds every prerequisite.
package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// nodednsBin is the agent binary built once for the whole package.
var nodednsBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodedns-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	nodednsBin = filepath.Join(dir, "nodedns")
	build := exec.Command("go", "build", "-o", nodednsBin, "../cmd/nodedns")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: building nodedns:", err)
		return 1
	}
	code := m.Run()
	stopControlPlane()
	return code
}

// need fails the test when a prerequisite is missing. It never skips:
// a skipped integration test tests nothing, and a run whose every test
// skipped for want of root or a program would otherwise end "ok". The
// prerequisites are what scripts/test.sh installs and builds; run the
// suite through it, or provide them (the failure names what is missing).
func need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	t.Fatalf("prerequisite missing: %s (scripts/test.sh installs and builds every prerequisite)", what)
}

// needRoot requires root (netns, links, iptables).
func needRoot(t testing.TB) {
	t.Helper()
	need(t, os.Geteuid() == 0, "root")
}

// needTool requires a program on PATH.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	need(t, err == nil, "program "+name+" on PATH")
	return p
}
