package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/cluster/k8s"
	"github.com/nodedns/nodedns/pkg/cluster/kubedns"
	"github.com/nodedns/nodedns/pkg/query/upstream"
)

// StubDomain is one entry of the stub-domains key: in the file a list of
// servers (or a comma-separated string), or a map with the servers and
// their options:
//
//	stub-domains:
//	  corp.example: ["10.0.0.53", "10.0.0.54"]
//	  consul.local:
//	    servers: ["10.150.0.1"]
//	    force-tcp: true
//	  dot.example:
//	    servers: ["tls://192.0.2.53#dns.example"]
//	    policy: sequential
type StubDomain struct {
	Servers List `json:"servers"`
	// ForceTCP / PreferUDP: as the keys of the same names, for this zone.
	ForceTCP  bool `json:"force-tcp,omitempty"`
	PreferUDP bool `json:"prefer-udp,omitempty"`
	// Policy replaces --policy for this zone.
	Policy string `json:"policy,omitempty"`
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
			return fmt.Errorf("want servers, force-tcp, prefer-udp, policy: %w", err)
		}
		*s = StubDomain(p)
		return nil
	}
	*s = StubDomain{}
	return s.Servers.UnmarshalJSON(b)
}

// sortedZones are the stub zones in a stable order.
func (m StubsMap) sortedZones() []string {
	out := make([]string, 0, len(m))
	for z := range m {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

// validateUpstreams checks upstream, stub-domains, force-tcp, prefer-udp
// and upstream-ca.
func (c *Config) validateUpstreams() error {
	zones := make([]string, 0, len(c.ClusterDomain))
	for _, z := range c.ClusterDomain {
		zones = append(zones, strings.ToLower(dns.Fqdn(z)))
	}
	check := func(what, s string) error {
		sp, err := upstream.ParseServer(s)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if sp.ByName() && !under(sp.Name, zones) {
			return fmt.Errorf("%s %q: a server given by name must be in the cluster zone (%s); elsewhere DNS would be needed to reach DNS", what, s, strings.Join(c.ClusterDomain, ", "))
		}
		return nil
	}
	for _, u := range c.Upstream {
		if err := check("--upstream", u); err != nil {
			return err
		}
	}
	if c.ForceTCP && c.PreferUDP {
		return errors.New("--force-tcp and --prefer-udp: pick one")
	}
	for _, z := range c.Stubs.sortedZones() {
		sd := c.Stubs[z]
		what := fmt.Sprintf("stub domain %q", z)
		fq := strings.ToLower(dns.Fqdn(z))
		if _, ok := dns.IsDomainName(fq); !ok || fq == "." {
			return fmt.Errorf("%s: not a domain name", what)
		}
		if len(sd.Servers) == 0 {
			return fmt.Errorf("%s: no servers", what)
		}
		for _, s := range sd.Servers {
			if err := check(what, s); err != nil {
				return err
			}
		}
		if sd.ForceTCP && sd.PreferUDP {
			return fmt.Errorf("%s: force-tcp and prefer-udp: pick one", what)
		}
		switch upstream.Policy(sd.Policy) {
		case "", upstream.Random, upstream.RoundRobin, upstream.Sequential:
		default:
			return fmt.Errorf("%s: policy %q: want random, round_robin or sequential", what, sd.Policy)
		}
	}
	if c.UpstreamCA != "" {
		if err := upstream.CheckCAFile(c.UpstreamCA); err != nil {
			return fmt.Errorf("--upstream-ca: %w", err)
		}
	}
	return nil
}

func under(name string, zones []string) bool {
	for _, z := range zones {
		if dns.IsSubDomain(z, name) {
			return true
		}
	}
	return false
}

// hasNamedServers reports whether any of servers is given by name.
func hasNamedServers(servers []string) bool {
	for _, s := range servers {
		if sp, err := upstream.ParseServer(s); err == nil && sp.ByName() {
			return true
		}
	}
	return false
}

// forwarderConfig maps cfg, the default upstreams resolved for it and the
// kube-dns ConfigMap onto the forwarder's settings. The ConfigMap sits
// under the agent's own settings: its upstreamNameservers apply when the
// agent names no upstream (the caller resolved ups so), its stubDomains
// for the zones the agent does not forward itself.
func forwarderConfig(cfg Config, ups []string, kd kubedns.Config, res upstream.Resolver, log *slog.Logger) upstream.Config {
	stubs := map[string][]string{}
	opts := map[string]upstream.GroupOptions{}
	own := map[string]bool{}
	for _, z := range cfg.Stubs.sortedZones() {
		sd := cfg.Stubs[z]
		stubs[z] = sd.Servers
		opts[z] = upstream.GroupOptions{ForceTCP: sd.ForceTCP, PreferUDP: sd.PreferUDP, Policy: upstream.Policy(sd.Policy)}
		own[strings.ToLower(dns.Fqdn(z))] = true
	}
	for _, z := range kd.Zones() {
		if own[strings.ToLower(dns.Fqdn(z))] {
			continue
		}
		stubs[z] = kd.StubDomains[z]
	}
	return upstream.Config{
		Servers:     ups,
		Stubs:       stubs,
		StubOptions: opts,
		Options:     upstream.GroupOptions{ForceTCP: cfg.ForceTCP, PreferUDP: cfg.PreferUDP},
		Policy:      upstream.Policy(cfg.Policy),
		CAFile:      cfg.UpstreamCA,
		Resolver:    res,
		Logger:      log,
	}
}

// indexResolver resolves upstreams given by name from the cluster index
// (the index may be wired after the forwarder is built).
type indexResolver struct{ ix func() *k8s.Index }

// ResolveServer returns the A and AAAA addresses of name in the index.
func (r indexResolver) ResolveServer(name string) ([]netip.Addr, bool) {
	ix := r.ix()
	if ix == nil || !ix.Synced() {
		return nil, false
	}
	var out []netip.Addr
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		res, ok := ix.Lookup(name, t)
		if !ok || res.NotSynced || res.Msg == nil {
			continue
		}
		for _, rr := range res.Msg.Answer {
			switch v := rr.(type) {
			case *dns.A:
				if a, ok := netip.AddrFromSlice(v.A); ok {
					out = append(out, a.Unmap())
				}
			case *dns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA); ok {
					out = append(out, a)
				}
			}
		}
	}
	return out, true
}
