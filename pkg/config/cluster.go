package config

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Values of --cluster-zone and --cluster-dns-protocol.
const (
	// ClusterZoneLocal answers the cluster zone from the API server.
	ClusterZoneLocal = "local"
	// ClusterZoneForward sends the cluster and reverse zones to
	// --cluster-dns, as NodeLocal DNSCache does.
	ClusterZoneForward = "forward"
	ProtoTCP           = "tcp"
	ProtoUDP           = "udp"
)

// ClusterZones are the cluster domains as lower-case FQDNs, primary first.
func (c *Config) ClusterZones() []string {
	out := make([]string, 0, len(c.ClusterDomain))
	for _, z := range c.ClusterDomain {
		out = append(out, dnsname.Canonical(z))
	}
	return out
}

// MulticlusterZones are the multicluster domains as lower-case FQDNs.
func (c *Config) MulticlusterZones() []string {
	out := make([]string, 0, len(c.MulticlusterDomain))
	for _, z := range c.MulticlusterDomain {
		out = append(out, dnsname.Canonical(z))
	}
	return out
}

// ClusterSettings maps c onto the cluster index's settings.
func (c *Config) ClusterSettings() k8s.Config {
	fall := []string(c.Fallthrough)
	if fall == nil {
		fall = []string{} // emptied on purpose: no fallthrough at all
	}
	return k8s.Config{
		Zones:              c.ClusterDomain,
		MulticlusterZones:  c.MulticlusterDomain,
		TTL:                uint32(time.Duration(c.ClusterTTL) / time.Second),
		Pods:               k8s.PodMode(c.Pods),
		NodeName:           c.NodeName,
		EndpointPodNames:   c.EndpointPodNames,
		IgnoreEmptyService: c.IgnoreEmptyService,
		NoEndpoints:        c.NoEndpoints,
		Namespaces:         c.Namespaces,
		NamespaceLabels:    c.NamespaceLabels,
		Fallthrough:        fall,
	}
}

// validateForward checks --cluster-zone and what it needs.
func (c *Config) validateForward() error {
	switch c.ClusterZone {
	case ClusterZoneLocal, ClusterZoneForward:
	default:
		return fmt.Errorf("--cluster-zone %q: want local or forward", c.ClusterZone)
	}
	switch c.ClusterDNSProtocol {
	case ProtoTCP, ProtoUDP:
	default:
		return fmt.Errorf("--cluster-dns-protocol %q: want tcp or udp", c.ClusterDNSProtocol)
	}
	if c.ClusterZone == ClusterZoneForward && c.ClusterDNS == "" {
		return fmt.Errorf("--cluster-zone forward needs --cluster-dns (the central cluster DNS, e.g. a kube-dns-upstream Service's ClusterIP)")
	}
	if c.ClusterDNS == "" {
		return nil
	}
	n, err := upstream.NormalizeAddr(c.ClusterDNS)
	if err != nil {
		return fmt.Errorf("--cluster-dns: %w", err)
	}
	ap := netip.MustParseAddrPort(n)
	for _, l := range c.ListenAddrs() {
		if netip.MustParseAddrPort(l) == ap {
			return fmt.Errorf("--cluster-dns %s is one of this agent's own addresses: that is a forwarding loop (point it at a Service with kube-dns's endpoints but its own ClusterIP, as NodeLocal DNSCache's kube-dns-upstream)", c.ClusterDNS)
		}
	}
	return nil
}
