//go:build e2e

// Package e2e holds the end-to-end tests: what nodedns promises, shown on
// the real single-node cluster scripts/cluster.sh runs, written on
// e2e/framework. scripts/e2e.sh (the agent from deploy/daemonset.yaml) and
// scripts/chart-e2e.sh (the Helm chart) bring the cluster up, build and
// import the images, run these tests and take the cluster down; against a
// cluster already up (KEEP=1 scripts/e2e.sh, or scripts/cluster.sh up),
// each step runs alone:
//
//	go test -tags e2e -count=1 -v -run TestRollouts ./e2e/
//
// A step makes what it needs and finds missing (the DaemonSet, the
// workloads, the kube-dns Service and its intercept), so it can run alone
// or after the steps before it. The tests run as root on the cluster's
// node.
package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/nodedns/nodedns/e2e/framework"
)

// stopUpstream stops the test upstream this binary started, if any.
var stopUpstream = func() {}

func TestMain(m *testing.M) {
	code := m.Run()
	stopUpstream()
	if err := framework.RemoveTools(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: removing the tools built:", err)
		code = 1
	}
	os.Exit(code)
}

var (
	upstreamOnce sync.Once
	upstreamErr  error
)

// setup connects to the cluster and makes sure the test upstream answers
// (the steps of scripts/e2e.sh; the chart's steps need no upstream).
func setup(t *testing.T) *framework.Cluster {
	t.Helper()
	c := framework.Connect(t)
	upstreamOnce.Do(func() {
		var stop func()
		stop, upstreamErr = c.EnsureUpstream()
		if upstreamErr == nil {
			stopUpstream = stop
		}
	})
	if upstreamErr != nil {
		t.Fatalf("test upstream: %v", upstreamErr)
	}
	return c
}

// ok logs an "ok:" line: what a step showed.
func ok(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("ok: %s", fmt.Sprintf(format, args...))
}
