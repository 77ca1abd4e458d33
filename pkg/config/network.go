package config

import (
	"fmt"
	"net/netip"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Values of --network-mode.
const (
	// NetworkHost is the agent on the node's network: it holds the
	// local IPs on its link, with NOTRACK/ACCEPT rules, and removes them
	// on exit (pkg/intercept).
	NetworkHost = "host"
	// NetworkPod is the agent in the pod network, the backend of a
	// CiliumLocalRedirectPolicy (or any redirect that sends the pods'
	// DNS to the agent pod's own addresses): no link, no rules, no
	// teardown; DNS on port 53 of the pod's addresses (--pod-ips).
	NetworkPod = "pod"
)

// WellKnownLocalIP is the node-local address kubelets point pods at
// (NodeLocal DNSCache's and nodedns's default, the address Cilium's
// node-local DNS recipe redirects). In pod mode it is always one of the
// redirected addresses, listed in local-ip or not.
const WellKnownLocalIP = "169.254.20.10"

// PodMode reports whether the agent runs in the pod network.
func (c *Config) PodMode() bool { return c.NetworkMode == NetworkPod }

// Intercepts reports whether the agent owns a link and rules on the node:
// host mode with local IPs. In pod mode nothing on the host is touched.
func (c *Config) Intercepts() bool { return !c.PodMode() && len(c.LocalIP) > 0 }

// RedirectedAddrs are, in pod mode, the addresses a redirect sends to this
// agent (the LocalRedirectPolicy's frontends): every local-ip and
// WellKnownLocalIP. A query the agent sent there would come back to it (a
// forwarding loop), so no upstream may be one of them. Nil in host mode.
func (c *Config) RedirectedAddrs() []netip.Addr {
	if !c.PodMode() {
		return nil
	}
	out := []netip.Addr{netip.MustParseAddr(WellKnownLocalIP)}
	for _, s := range c.LocalIP {
		if a, err := netip.ParseAddr(s); err == nil && !containsAddr(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func containsAddr(l []netip.Addr, a netip.Addr) bool {
	for _, b := range l {
		if b == a {
			return true
		}
	}
	return false
}

// kubeDNSName is the kube-dns Service's name in zone: a server given by
// that name resolves to its ClusterIP, which a serviceMatcher redirect
// sends back to the agent.
func kubeDNSName(zone string) string { return "kube-dns.kube-system.svc." + zone }

// CheckPodNetwork refuses, in pod mode, every server the agent would send
// queries to that is a redirected address (RedirectedAddrs, on any port)
// or the kube-dns Service by name: upstream, upstream-next, the stub
// domains and their next, the views' forward servers, upstream-resolver
// and cluster-dns. Behind a LocalRedirectPolicy those addresses are the
// agent itself: Cilium before 1.16 (and 1.16 and later unless the policy
// sets skipRedirectFromBackend) sends the agent's own queries back to it,
// and an addressMatcher's address has nothing else behind it. The cluster
// zone comes from the agent's informers, external names go to the node's
// resolvers (dnsPolicy Default), and the central DNS, when one is needed
// (cluster-dns), is reached through a Service of its own
// (kube-dns-upstream). Host mode: nil. `nodedns serve` and `nodedns
// config validate` both run it (a cross check of Parse).
func CheckPodNetwork(c *Config) error {
	if !c.PodMode() {
		return nil
	}
	redirected := c.RedirectedAddrs()
	names := map[string]bool{}
	for _, z := range c.ClusterZones() {
		names[kubeDNSName(z)] = true
	}
	check := func(what string, servers []string) error {
		for _, s := range servers {
			sp, err := upstream.ParseServer(s)
			if err != nil {
				continue // reported by the servers' own check
			}
			if sp.ByName() {
				if names[dnsname.Canonical(sp.Name)] {
					return fmt.Errorf("%s %q: with --network-mode pod this name is the kube-dns Service, whose ClusterIP the redirect sends back to this agent (a forwarding loop): use a Service with kube-dns's endpoints and its own ClusterIP (kube-dns-upstream)", what, s)
				}
				continue
			}
			if containsAddr(redirected, sp.Addr.Addr().Unmap()) {
				return fmt.Errorf("%s %q: with --network-mode pod %s is an address the redirect sends to this agent (a forwarding loop): give the node's resolvers (or nothing: the pod's resolv.conf with dnsPolicy Default), and for the central DNS a Service with kube-dns's endpoints and its own ClusterIP (kube-dns-upstream)", what, s, sp.Addr.Addr().Unmap())
			}
		}
		return nil
	}
	nexts := func(what string, sd *StubDomain) error {
		for n, i := sd, 0; n != nil && i <= maxNextDepth; n, i = n.Next, i+1 {
			if err := check(what, n.Servers); err != nil {
				return err
			}
			what += " next"
		}
		return nil
	}
	if err := check("--upstream", c.Upstream); err != nil {
		return err
	}
	if err := nexts("upstream-next", c.UpstreamNext); err != nil {
		return err
	}
	for _, z := range c.Stubs.SortedZones() {
		sd := c.Stubs[z]
		if err := nexts(fmt.Sprintf("stub domain %q", z), &sd); err != nil {
			return err
		}
	}
	for _, v := range c.Views {
		if err := nexts(fmt.Sprintf("view %q forward", v.Name), &v.Forward); err != nil {
			return err
		}
	}
	if err := check("--upstream-resolver", c.UpstreamResolver); err != nil {
		return err
	}
	if c.ClusterDNS != "" {
		if n, err := upstream.NormalizeAddr(c.ClusterDNS); err == nil {
			if a := netip.MustParseAddrPort(n).Addr().Unmap(); containsAddr(redirected, a) {
				return fmt.Errorf("--cluster-dns %q: with --network-mode pod %s is an address the redirect sends to this agent (a forwarding loop): point it at a Service with kube-dns's endpoints and its own ClusterIP (kube-dns-upstream)", c.ClusterDNS, a)
			}
		}
	}
	return nil
}

// checkPodIPs validates --pod-ips: addresses a pod's interface can hold.
// Host mode ignores them (a stray $POD_IPS must not stop a host agent).
func checkPodIPs(c *Config) error {
	if !c.PodMode() {
		return nil
	}
	for _, s := range c.PodIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("--pod-ips %q: want IP addresses (the downward API's status.podIPs)", s)
		}
		if a = a.Unmap(); a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
			return fmt.Errorf("--pod-ips %q: unspecified, loopback and multicast addresses are no pod's", s)
		}
	}
	return checkList("pod-ips", "addresses", c.PodIPs, maxPodIPs, func(s string) (string, error) {
		return netip.MustParseAddr(s).Unmap().String(), nil // parsed above
	})
}

// maxPodIPs: a pod has one address per family.
const maxPodIPs = 2

// checkNetworkMode refuses what pod mode cannot do: the DNS fallback (a
// NAT rule on the node) given on purpose.
func checkNetworkMode(c *Config) error {
	if !c.PodMode() {
		return nil
	}
	if entries, unset := c.FallbackEntries(); !unset && len(entries) > 0 {
		return fmt.Errorf("--fallback-dns %s with --network-mode pod: the fallback is a NAT rule on the node, which pod mode does not install (the serviceMatcher redirect falls back to kube-dns by itself)", c.FallbackDNS.String())
	}
	return nil
}
