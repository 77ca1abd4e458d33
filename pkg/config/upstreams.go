package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// StubDomain is one entry of the stub-domains key: in the file a list of
// servers (or a comma-separated string), or a map with the servers and
// their options, CoreDNS's forward options among them (upstreamopts.go):
//
//	stub-domains:
//	  corp.example: ["10.0.0.53", "10.0.0.54"]
//	  consul.local:
//	    servers: ["10.150.0.1"]
//	    force-tcp: true
//	  dot.example:
//	    servers: ["tls://192.0.2.53#dns.example"]
//	    policy: sequential
//	    failover: [SERVFAIL]
//	    next: {when: [NXDOMAIN], servers: ["192.0.2.54"]}
//
// The same form, with when, is a next: the servers a reply goes on to.
type StubDomain struct {
	Servers List `json:"servers"`
	// On (when:), in a next only: the rcodes (and NODATA) whose replies go to
	// these servers.
	On List `json:"when,omitempty"`
	// ForceTCP / PreferUDP: as the keys of the same names, for this zone.
	ForceTCP  bool `json:"force-tcp,omitempty"`
	PreferUDP bool `json:"prefer-udp,omitempty"`
	// Policy replaces --policy for this zone.
	Policy string `json:"policy,omitempty"`
	ForwardOptions
}

// UnmarshalJSON reads a list, a comma-separated string, or the map form
// (unknown keys are errors).
func (s *StubDomain) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		type plain StubDomain
		var p plain
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&p); err != nil {
			return fmt.Errorf("want servers, force-tcp, prefer-udp, policy, failover, failfast, except, read-timeout, max-fails, health-check, health-check-domain, health-check-no-rec, expire, doh-method, next (when, in a next): %w", err)
		}
		*s = StubDomain(p)
		return nil
	}
	*s = StubDomain{}
	return s.Servers.UnmarshalJSON(b)
}

// SortedZones are the stub zones in a stable order.
func (m StubsMap) SortedZones() []string {
	out := make([]string, 0, len(m))
	for z := range m {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

// validateUpstreams checks upstream, stub-domains, force-tcp, prefer-udp,
// upstream-ca and the forward options of every group.
func (c *Config) validateUpstreams() error {
	check := func(what, s string) error {
		if _, err := upstream.ParseServer(s); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if len(c.Upstream) > maxUpstreams {
		return fmt.Errorf("--upstream: %d servers: want at most %d", len(c.Upstream), maxUpstreams)
	}
	if err := checkServers("--upstream", c.Upstream, check); err != nil {
		return err
	}
	if c.ForceTCP && c.PreferUDP {
		return errors.New("--force-tcp and --prefer-udp: pick one")
	}
	if len(c.Stubs) > maxStubZones {
		return fmt.Errorf("stub-domains: %d zones: want at most %d", len(c.Stubs), maxStubZones)
	}
	zoneOf := make(map[string]string, len(c.Stubs))
	for _, z := range c.Stubs.SortedZones() {
		sd := c.Stubs[z]
		what := fmt.Sprintf("stub domain %q", z)
		fq := dnsname.Canonical(z)
		if _, ok := dns.IsDomainName(fq); !ok || fq == "." || strings.Contains(fq, "..") {
			return fmt.Errorf("%s: not a domain name", what)
		}
		if other, dup := zoneOf[fq]; dup {
			return fmt.Errorf("%s: the same zone as %q", what, other)
		}
		zoneOf[fq] = z
		if len(sd.Servers) == 0 {
			return fmt.Errorf("%s: no servers", what)
		}
		if len(sd.Servers) > maxStubServers {
			return fmt.Errorf("%s: %d servers: want at most %d", what, len(sd.Servers), maxStubServers)
		}
		if err := checkServers(what, sd.Servers, check); err != nil {
			return err
		}
		if sd.ForceTCP && sd.PreferUDP {
			return fmt.Errorf("%s: force-tcp and prefer-udp: pick one", what)
		}
		if err := checkPolicy(what, sd.Policy); err != nil {
			return err
		}
		if err := checkForward(what, &sd, 0); err != nil {
			return err
		}
		for n := sd.Next; n != nil; n = n.Next {
			if err := checkServers(what+" next", n.Servers, check); err != nil {
				return err
			}
		}
	}
	if err := c.checkUpstreamOptions(); err != nil {
		return err
	}
	if c.UpstreamCA != "" {
		if err := upstream.CheckCAFile(c.UpstreamCA); err != nil {
			return fmt.Errorf("--upstream-ca: %w", err)
		}
	}
	return nil
}

// checkServers checks each server of a group with check, and that none is
// given twice (the same server in another spelling included): a repeated
// server would only be tried twice.
func checkServers(what string, servers []string, check func(what, s string) error) error {
	seen := make(map[upstream.Spec]string, len(servers))
	for _, s := range servers {
		if err := check(what, s); err != nil {
			return err
		}
		sp, _ := upstream.ParseServer(s) // check parsed it
		if first, dup := seen[sp]; dup {
			return fmt.Errorf("%s %q: the same server as %q, given twice", what, s, first)
		}
		seen[sp] = s
	}
	return nil
}

// CheckKubeDNS validates the kube-dns ConfigMap's servers as the forwarder
// will take them under c: names must be in the cluster zone.
func (c *Config) CheckKubeDNS(kd kubedns.Config) error {
	zones := c.ClusterZones()
	// The stub zones of both together are the forwarder's groups.
	all := make(map[string]bool, len(c.Stubs)+len(kd.StubDomains))
	for _, z := range c.Stubs.SortedZones() {
		all[dnsname.Canonical(z)] = true
	}
	for _, z := range kd.Zones() {
		all[dnsname.Canonical(z)] = true
	}
	if len(all) > maxStubZones {
		return fmt.Errorf("%s: %d stub domains with the %d of stub-domains: want at most %d together", kubedns.StubDomainsKey, len(kd.StubDomains), len(c.Stubs), maxStubZones)
	}
	for _, z := range kd.Zones() {
		for _, s := range kd.StubDomains[z] {
			sp, err := upstream.ParseServer(s)
			if err != nil {
				return fmt.Errorf("%s: stub domain %q: %w", kubedns.StubDomainsKey, z, err)
			}
			if sp.ByName() && !dnsname.InZones(sp.Name, zones) {
				return fmt.Errorf("%s: stub domain %q: nameserver %q: nodedns resolves names of the cluster zone (%s) only",
					kubedns.StubDomainsKey, z, s, strings.Join(c.ClusterDomain, ", "))
			}
		}
	}
	return nil
}
