package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/dns64"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// The `dns64:` and `k8s-external:` keys: CoreDNS's dns64 and k8s_external
// plugins. The settings table (keys.go) declares them; pkg/agent builds
// pkg/query/dns64 and pkg/k8s's External from them and hands them to the
// pipeline's plugins, so a reload applies them (CoreDNS's reload plugin
// re-reads the whole Corefile).

// DNS64Config is the `dns64:` key: CoreDNS's `dns64 [PREFIX] { prefix
// PREFIX; translate_all; allow_ipv4 }`. Absent: off.
type DNS64Config struct {
	// Prefix is an IPv6 prefix of length 32, 40, 48, 56, 64 or 96;
	// default 64:ff9b::/96.
	Prefix string `json:"prefix,omitempty"`
	// TranslateAll translates replies that hold AAAA records too.
	TranslateAll bool `json:"translate-all,omitempty"`
	// AllowIPv4 translates for clients asking over IPv4 too.
	AllowIPv4 bool `json:"allow-ipv4,omitempty"`
	// Except are zones whose names are not translated (a Corefile's
	// other server blocks, without the root block's dns64); at most 64.
	Except List `json:"except,omitempty"`
}

// DNS64 builds the `dns64:` key; nil when it is not set.
func (c *Config) DNS64() (*dns64.DNS64, error) {
	d := c.DNS64Opts
	if d == nil {
		return nil, nil
	}
	var cfg dns64.Config
	if d.Prefix != "" {
		p, err := dns64.ParsePrefix(d.Prefix) // its error names the key and the value
		if err != nil {
			return nil, err
		}
		cfg.Prefix = p
	}
	cfg.TranslateAll, cfg.AllowIPv4 = d.TranslateAll, d.AllowIPv4
	for _, z := range d.Except {
		if _, err := netip.ParseAddr(strings.TrimSuffix(z, ".")); err == nil || z == "" {
			return nil, fmt.Errorf("dns64 except zone %q: want a name", z)
		}
		if _, ok := dns.IsDomainName(z); !ok {
			return nil, fmt.Errorf("dns64 except zone %q: not a domain name", z)
		}
	}
	cfg.Except = d.Except
	return dns64.New(cfg)
}

func checkDNS64(c *Config) error {
	_, err := c.DNS64()
	return err
}

// K8sExternalConfig is the `k8s-external:` key: CoreDNS's `k8s_external
// ZONES... { apex APEX; ttl TTL; headless; fallthrough [ZONES...] }`.
// Absent: off. It needs the cluster zone (a kubeconfig).
type K8sExternalConfig struct {
	// Zones the external names are answered in; at least one.
	Zones List `json:"zones"`
	// Apex is the label of the zone's own names; default dns.
	Apex string `json:"apex,omitempty"`
	// TTL in seconds, 0 to 3600; default 5.
	TTL *int `json:"ttl,omitempty"`
	// Headless answers the ready endpoints of headless Services without
	// external addresses.
	Headless bool `json:"headless,omitempty"`
	// Fallthrough: where an NXDOMAIN goes on to the next stage (absent:
	// nowhere; empty: every zone).
	Fallthrough ZoneList `json:"fallthrough,omitzero"`
}

// maxK8sExternalZones bounds the zones of the key: each is tried on every
// query.
const maxK8sExternalZones = 64

// K8sExternal returns the `k8s-external:` key as pkg/k8s takes it; ok
// false when it is not set.
func (c *Config) K8sExternal() (cfg k8s.ExternalConfig, ok bool, err error) {
	x := c.K8sExternalOpts
	if x == nil {
		return k8s.ExternalConfig{}, false, nil
	}
	if len(x.Zones) > maxK8sExternalZones || len(x.Fallthrough.Zones) > maxK8sExternalZones {
		return cfg, false, fmt.Errorf("k8s-external: at most %d zones and %d fallthrough zones", maxK8sExternalZones, maxK8sExternalZones)
	}
	norm := func(zs []string) ([]string, error) {
		out := make([]string, 0, len(zs))
		for _, z := range zs {
			n := dnsname.Canonical(z)
			if _, err := netip.ParseAddr(strings.TrimSuffix(z, ".")); err == nil {
				return nil, fmt.Errorf("k8s-external zone %q: an address, want a name", z)
			}
			out = append(out, n)
		}
		return out, nil
	}
	if cfg.Zones, err = norm(x.Zones); err != nil {
		return cfg, false, err
	}
	if cfg.Fallthrough, err = norm(x.Fallthrough.Zones); err != nil {
		return cfg, false, err
	}
	cfg.FallthroughSet = x.Fallthrough.Set
	cfg.Apex, cfg.Headless, cfg.TTL = x.Apex, x.Headless, 5
	if x.TTL != nil {
		if *x.TTL < 0 || *x.TTL > 3600 {
			return cfg, false, fmt.Errorf("k8s-external ttl %d: want 0 to 3600", *x.TTL)
		}
		cfg.TTL = uint32(*x.TTL)
	}
	return cfg, true, k8s.CheckExternal(cfg)
}

func checkK8sExternal(c *Config) error {
	_, _, err := c.K8sExternal()
	return err
}
