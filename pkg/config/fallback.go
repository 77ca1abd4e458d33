package config

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxFallbackEntries bounds fallback-dns: each Service is looked up in the
// cluster index whenever it changes, and the targets of each address
// family are bounded anyway (intercept.MaxFallbackTargets).
const maxFallbackEntries = 16

// fallbackPort is the port of a fallback-dns address given without one.
const fallbackPort = 53

// FallbackEntry is one item of fallback-dns: an address with its port, or
// a Service (Namespace and Name set, Addr invalid).
type FallbackEntry struct {
	Addr            netip.AddrPort
	Namespace, Name string
}

// String is the entry's canonical form: "ip:port" or "namespace/name".
func (e FallbackEntry) String() string {
	if e.Name != "" {
		return e.Namespace + "/" + e.Name
	}
	return e.Addr.String()
}

// ParseFallbackEntry reads "ip", "ip:port" ("[v6]:port"), or
// "namespace/name". Addresses that cannot be a DNAT target (unspecified,
// loopback, multicast) and names that cannot be a Service's are refused.
func ParseFallbackEntry(s string) (FallbackEntry, error) {
	s = strings.TrimSpace(s)
	if ns, name, ok := strings.Cut(s, "/"); ok {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return FallbackEntry{}, fmt.Errorf("not a namespace name: %s", errs[0])
		}
		if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
			return FallbackEntry{}, fmt.Errorf("not a Service name: %s", errs[0])
		}
		return FallbackEntry{Namespace: ns, Name: name}, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		ip, perr := netip.ParseAddr(s)
		if perr != nil {
			return FallbackEntry{}, fmt.Errorf("want an IP address, ip:port or namespace/name")
		}
		ap = netip.AddrPortFrom(ip, fallbackPort)
	}
	ip := ap.Addr().Unmap()
	switch {
	case ip.Zone() != "":
		return FallbackEntry{}, fmt.Errorf("an address with a zone cannot be a DNAT target")
	case ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast():
		return FallbackEntry{}, fmt.Errorf("unspecified, loopback and multicast addresses cannot be DNAT targets")
	case ap.Port() == 0:
		return FallbackEntry{}, fmt.Errorf("port 0")
	}
	return FallbackEntry{Addr: netip.AddrPortFrom(ip, ap.Port())}, nil
}

// FallbackEntries returns the parsed fallback-dns list (checked at load)
// and whether the key is unset: the default, the cluster DNS Service when
// the cluster index runs. An empty list turns the fallback off.
func (c *Config) FallbackEntries() (entries []FallbackEntry, unset bool) {
	if c.FallbackDNS == nil {
		return nil, true
	}
	for _, s := range c.FallbackDNS {
		if e, err := ParseFallbackEntry(s); err == nil {
			entries = append(entries, e)
		}
	}
	return entries, false
}

// HasFallbackServices reports whether fallback-dns names a Service, which
// needs the cluster index.
func (c *Config) HasFallbackServices() bool {
	entries, _ := c.FallbackEntries()
	for _, e := range entries {
		if e.Name != "" {
			return true
		}
	}
	return false
}

func checkFallbackDNS(c *Config) error {
	return checkList("fallback-dns", "entries", c.FallbackDNS, maxFallbackEntries, func(s string) (string, error) {
		e, err := ParseFallbackEntry(s)
		if err != nil {
			return "", err
		}
		return e.String(), nil
	})
}

// checkFallbackLoop refuses a fallback address that is one of the local
// IPs: the fallback would send queries back to the address no socket
// serves.
func checkFallbackLoop(c *Config) error {
	entries, _ := c.FallbackEntries()
	for _, e := range entries {
		if e.Name != "" {
			continue
		}
		for _, l := range c.LocalIP {
			if ip, err := netip.ParseAddr(l); err == nil && ip.Unmap() == e.Addr.Addr() {
				return fmt.Errorf("--fallback-dns %s is a --local-ip: the fallback would send queries back to the address nobody serves", e)
			}
		}
	}
	return nil
}
