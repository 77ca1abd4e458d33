//go:build integration

package integration

// The node half of uninstalling (the Helm chart's cleanup DaemonSet runs
// it on every node): `nodedns cleanup --wait-for-agent` refuses to remove
// the interception under an agent that still serves, and removes what a
// killed agent left once none does; --hold then keeps the pod running.

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestCleanupWaitsForAgent(t *testing.T) {
	e := newInterceptEnv(t, "nft")
	agent := e.node.Start(t, "agent", nodednsBin, e.agentArgs()...)
	e.waitServing(t, agent)
	ips := strings.Join(localIPs, ",")

	start := time.Now()
	out, err := e.node.Run(nodednsBin, "cleanup", "--local-ip", ips, "--interface", linkName, "--wait-for-agent", "2s")
	if err == nil || !strings.Contains(out, "not cleaning up under a running server after 2s") || !strings.Contains(out, "another process still serves") {
		t.Fatalf("cleanup under a running agent: err %v, output:\n%s", err, out)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("cleanup gave up after %s, before --wait-for-agent 2s", d)
	}
	if err := e.checkRulesOnce(); err != nil {
		t.Errorf("the refused cleanup touched the rules: %v", err)
	}
	e.expectAnswers(t, e.pod)

	// An agent killed without its teardown leaves link and rules: the
	// cleanup now finds no server and removes them, then holds.
	agent.Kill()
	if err := e.checkRulesOnce(); err != nil {
		t.Fatalf("after SIGKILL: %v", err)
	}
	c := e.node.Start(t, "cleanup", nodednsBin, "cleanup", "--local-ip", ips, "--interface", linkName, "--wait-for-agent", "10s", "--hold")
	dnstest.Eventually(t, 15*time.Second, "cleanup done", func() error {
		if err := e.checkNoRules(); err != nil {
			return err
		}
		return e.checkNoLink()
	})
	dnstest.Eventually(t, 5*time.Second, "cleanup reports done and holds", func() error {
		if !strings.Contains(c.Output(), "cleanup done") {
			return errString("no 'cleanup done' yet")
		}
		if c.Exited() {
			return errString("exited instead of holding")
		}
		return nil
	})
	if err := c.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
		t.Errorf("cleanup --hold on SIGTERM: %v", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
