//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/e2e/framework"
)

// TestDaemonSet (step 1): deploy/daemonset.yaml, unchanged but for the
// image and one ConfigMap value (upstream: the test upstream on
// 127.0.53.53, a loopback address of the node); the DaemonSet becomes
// Ready; the link and each NOTRACK/ACCEPT rule exist exactly once, beside
// kube-proxy's rules (its iptables chains, or in nftables mode its
// nftables tables).
func TestDaemonSet(t *testing.T) {
	c := setup(t)
	c.Apply(t, manifest(t, c))
	ds := c.WaitDaemonSet(t, ns, framework.AgentName, 2*time.Minute)
	ok(t, "DaemonSet Ready: %d/%d", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	want := rulesWanted(t, c)
	c.RulesOnce(t, want)
	ok(t, "link nodelocaldns holds %v; its rules (16 for %s: 10, and 6 of the DNS fallback) exist once each (iptables-nft), beside kube-proxy's (%s mode)", want, agentIP, c.ProxyMode)
}

// TestDelete (step 6): `kubectl delete -f` of the manifest: the link and
// every rule (the fallback's chain too) are gone.
func TestDelete(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	objs := framework.Decode(t, manifest(t, c))
	c.Delete(t, objs, 2*time.Minute)
	framework.WaitFor(t, "the agent's pods gone", 20*time.Second, 200*time.Millisecond, func() (bool, string) {
		l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, framework.ToYAML(len(l.Items)) + " pods"
	})
	if framework.LinkExists() {
		t.Fatal("link nodelocaldns still there after delete, want none")
	}
	if n := c.AllRules(t); n != 0 {
		t.Fatalf("%d nodedns rules left after delete, want 0", n)
	}
	ok(t, "the link and every rule are gone")
}
