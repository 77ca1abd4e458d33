//go:build e2e

package e2e

import (
	"testing"
	"time"

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
