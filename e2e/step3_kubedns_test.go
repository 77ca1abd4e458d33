//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/e2e/framework"
)

// TestKubeDNSClusterIP (step 3): a kube-dns Service's ClusterIP added to
// local-ip: pods using it are answered by the agent although kube-proxy
// DNATs that IP, and conntrack holds no entry for the DNS flows (so no
// answer came from the central DNS behind the DNAT).
func TestKubeDNSClusterIP(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	ensureWorkloads(t, c)
	ensureKubeDNS(t, c)
	ok(t, "kube-proxy (%s mode) DNATs %s to the kube-dns endpoints", c.ProxyMode, kubeDNSIP)
	c.RulesOnce(t, map[string]int{agentIP: framework.RulesWithFallback, kubeDNSIP: framework.RulesPerIP})
	ok(t, "link holds %s too; its rules exist once each (ip6tables, nft)", kubeDNSIP)

	framework.ConntrackForget(kubeDNSIP)
	framework.ConntrackForget(agentIP)
	resolv := c.Exec(t, nsA, "legacy-client", "cat", "/etc/resolv.conf")
	if !slices.Contains(strings.Split(resolv, "\n"), "nameserver "+kubeDNSIP) {
		t.Fatalf("pod %s/legacy-client's resolv.conf lacks nameserver %s:\n%s", nsA, kubeDNSIP, resolv)
	}
	ahosts(t, c, "legacy-client", nsA, "web", serviceIPs(t, c, nsA, "web")...)
	got := strings.TrimSpace(c.Exec(t, nsA, "legacy-client", "dig", "+short", "+tcp", "@"+kubeDNSIP, "api."+extDomain, "A"))
	if got != extV4 {
		t.Fatalf("through %s over TCP: dig api.%s A got %q, want %q", kubeDNSIP, extDomain, got, extV4)
	}
	out := c.Exec(t, nsA, "legacy-client", "dig", "@"+kubeDNSIP, "web."+nsA+".svc.cluster.local", "AAAA")
	var server string
	for _, l := range strings.Split(out, "\n") {
		if s, found := strings.CutPrefix(l, ";; SERVER: "); found {
			server = s
		}
	}
	ok(t, "pod with nameserver %s answered by the agent (UDP and TCP; %s)", kubeDNSIP, server)
	tracked6 := framework.ConntrackDNS(t, kubeDNSIP)
	tracked4 := framework.ConntrackDNS(t, agentIP)
	if tracked6 != 0 || tracked4 != 0 {
		t.Fatalf("conntrack holds DNS flows: %d to %s, %d to %s, want 0 and 0", tracked6, kubeDNSIP, tracked4, agentIP)
	}
	ok(t, "conntrack holds no entry for DNS flows to %s or %s", kubeDNSIP, agentIP)
}
