package framework

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Rule counts of the agent (pkg/intercept): per local IP, NOTRACK in
// PREROUTING and OUTPUT (both ways) and ACCEPT in INPUT and OUTPUT, each
// for udp and tcp; with the DNS fallback's NAT (the default for
// 169.254.20.10) six more: the nat PREROUTING jump, the POSTROUTING
// masquerade and the FORWARD accept, and the family's NODEDNS-FALLBACK
// chain once. A local IP that is a Service ClusterIP (kube-dns) keeps the
// ten: kube-proxy's DNAT is its fallback.
const (
	RulesPerIP        = 10
	RulesWithFallback = 16
)

// save runs an iptables save command ("" and no failure when the backend
// is not there at all, as iptables-legacy-save on a machine without it).
func save(t testing.TB, cmd string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(cmd); err != nil {
		t.Fatalf("%s not found: %v", cmd, err)
	}
	out, err := HostErr(cmd, args...)
	if err != nil {
		t.Fatalf("on the node: %v", err)
	}
	return out
}

// agentRules are the lines of an iptables save output that are the
// agent's rules (their comment starts "nodedns:").
func agentRules(saved string) []string {
	var r []string
	for _, l := range strings.Split(saved, "\n") {
		if strings.Contains(l, `comment "nodedns:`) {
			r = append(r, l)
		}
	}
	return r
}

// RulesOnce checks that each of the agent's rules for each IP exists
// exactly once, in the number want gives (RulesPerIP or
// RulesWithFallback), in the iptables backend the node uses (nft:
// kubelet's chains are there, in either kube-proxy mode), beside
// kube-proxy's own rules, and none in the legacy backend; that no rule is
// there twice; that the NODEDNS-FALLBACK chain exists once when an IP has
// the fallback; and that the link nodelocaldns holds each IP. A rule is the
// IP's when its comment names it.
func (c *Cluster) RulesOnce(t testing.TB, want map[string]int) {
	t.Helper()
	ips := make([]string, 0, len(want))
	for ip := range want {
		ips = append(ips, ip)
	}
	slices.Sort(ips)
	for _, ip := range ips {
		cmd := "iptables-nft-save"
		if strings.Contains(ip, ":") {
			cmd = "ip6tables-nft-save"
		}
		saved := save(t, cmd)
		rules := agentRules(saved)
		var mine []string
		for _, r := range rules {
			if strings.Contains(r, " "+ip+" ") {
				mine = append(mine, r)
			}
		}
		if len(mine) != want[ip] {
			t.Fatalf("%s: %d nodedns rules for %s, want %d:\n%s", cmd, len(mine), ip, want[ip], strings.Join(mine, "\n"))
		}
		sorted := slices.Clone(rules)
		slices.Sort(sorted)
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				t.Fatalf("%s: rule there twice: %s", cmd, sorted[i])
			}
		}
		if want[ip] == RulesWithFallback {
			if n := CountPrefix(saved, ":NODEDNS-FALLBACK "); n != 1 {
				t.Fatalf("%s: %d NODEDNS-FALLBACK chains, want 1", cmd, n)
			}
		}
	}
	if err := c.KubeProxyRules(); err != nil {
		t.Fatalf("kube-proxy's rules (%s mode) are missing: %v", c.ProxyMode, err)
	}
	if n := c.LegacyRules(t); n != 0 {
		t.Fatalf("%d nodedns rules in the legacy iptables backend, which kube-proxy does not use, want 0", n)
	}
	addrs, err := HostErr("ip", "addr", "show", "dev", "nodelocaldns")
	if err != nil {
		t.Fatalf("link nodelocaldns missing: %v", err)
	}
	for _, ip := range ips {
		if !strings.Contains(addrs, " "+ip+"/") {
			t.Fatalf("%s not on nodelocaldns: %s", ip, addrs)
		}
	}
}

// LegacyRules counts the agent's rules in the legacy iptables backend.
func (c *Cluster) LegacyRules(t testing.TB) int {
	t.Helper()
	n := 0
	for _, cmd := range []string{"iptables-legacy-save", "ip6tables-legacy-save"} {
		out, _ := HostErr(cmd) // a kernel without the legacy tables prints nothing
		n += strings.Count(out, "nodedns:")
	}
	return n
}

// AllRules counts every line naming "nodedns:" in both families of both
// iptables backends (0 once the agent is gone).
func (c *Cluster) AllRules(t testing.TB) int {
	t.Helper()
	n := c.LegacyRules(t)
	for _, cmd := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		n += strings.Count(save(t, cmd), "nodedns:")
	}
	return n
}

// LinkExists: the link nodelocaldns is on the node.
func LinkExists() bool {
	_, err := HostErr("ip", "link", "show", "nodelocaldns")
	return err == nil
}

// KubeProxyRules: kube-proxy has programmed the node: its KUBE-SERVICES
// chain (iptables mode) or its services chains in its own nftables
// tables (nftables mode).
func (c *Cluster) KubeProxyRules() error {
	if c.ProxyMode == "nftables" {
		for _, fam := range []string{"ip", "ip6"} {
			if _, err := HostErr("nft", "list", "chain", fam, "kube-proxy", "services"); err != nil {
				return err
			}
		}
		return nil
	}
	out, err := HostErr("iptables-nft-save", "-t", "nat")
	if err != nil {
		return err
	}
	if CountPrefix(out, ":KUBE-SERVICES") == 0 {
		return fmt.Errorf("no KUBE-SERVICES chain in iptables-nft-save -t nat")
	}
	return nil
}

// KubeProxyDNAT says whether kube-proxy load-balances the Service IP ip (a
// rule naming it in its ip6 nat rules or nftables table), and what it read.
func (c *Cluster) KubeProxyDNAT(ip string) (bool, string) {
	if c.ProxyMode == "nftables" {
		out, err := HostErr("nft", "list", "table", "ip6", "kube-proxy")
		return err == nil && strings.Contains(out, ip), out
	}
	out, err := HostErr("ip6tables-nft-save", "-t", "nat")
	if err != nil {
		return false, err.Error()
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "-d "+ip+"/128 ") && strings.Contains(l, "KUBE-SVC") {
			return true, out
		}
	}
	return false, out
}

// ConntrackForget deletes the conntrack entries to dst (flows that began
// before the rules existed stay tracked until they time out).
func ConntrackForget(dst string) {
	args := []string{"-D", "-d", dst}
	if strings.Contains(dst, ":") {
		args = []string{"-D", "-f", "ipv6", "-d", dst}
	}
	_, _ = HostErr("conntrack", args...) // exits 1 when there was nothing to delete
}

// ConntrackDNS counts the conntrack entries of DNS flows (dport=53) to
// dst.
func ConntrackDNS(t testing.TB, dst string) int {
	t.Helper()
	args := []string{"-L", "-d", dst}
	if strings.Contains(dst, ":") {
		args = []string{"-L", "-f", "ipv6", "-d", dst}
	}
	if _, err := exec.LookPath("conntrack"); err != nil {
		t.Fatalf("conntrack not found: %v", err)
	}
	out, _ := HostErr("conntrack", args...) // status 1 with 0 entries on some versions
	return strings.Count(out, "dport=53")
}
