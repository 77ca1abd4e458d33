package config

import (
	"fmt"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/zonefile"
)

// CoreDNS's file and nsid plugins: the `zone-files:` key (file key only)
// and the `nsid`, `nsid-data` settings, with their checks. The settings
// table (keys.go) declares the keys; pkg/agent builds the zones
// (pkg/query/zonefile) and the NSID payload and hands them to the
// pipeline.

// maxNSIDBytes bounds the NSID payload (an EDNS option of every reply to
// a query asking for it).
const maxNSIDBytes = 128

// defaultZoneReload is CoreDNS's file plugin's reload interval.
const defaultZoneReload = time.Minute

// ZoneFileConfig is one entry of the `zone-files:` key: CoreDNS's `file
// DBFILE [ZONES...] { reload DURATION; fallthrough [ZONES...] }`.
type ZoneFileConfig struct {
	// File is the zone file (RFC 1035 master file); in Kubernetes
	// typically a ConfigMap mounted into the agent's pod.
	File string `json:"file"`
	// Zones it is served for (its origins); at least one.
	Zones List `json:"zones"`
	// Reload is how often the file is read again (the zone replaced when
	// its SOA serial changed); default 1m; 0s: never.
	Reload *Duration `json:"reload,omitempty"`
	// Fallthrough: where a name of the zones that does not exist (or has
	// no records) goes on to the next stage (absent: nowhere; empty:
	// everywhere).
	Fallthrough ZoneList `json:"fallthrough,omitzero"`
}

// ZoneFileSettings maps the `zone-files:` key onto pkg/query/zonefile.
func (c *Config) ZoneFileSettings() zonefile.Config {
	var zc zonefile.Config
	for _, f := range c.ZoneFiles {
		z := zonefile.Zone{File: f.File, Reload: defaultZoneReload, Fall: f.Fallthrough.Set}
		for _, o := range f.Zones {
			z.Origins = append(z.Origins, dnsname.Canonical(o))
		}
		if f.Reload != nil {
			z.Reload = time.Duration(*f.Reload)
		}
		for _, o := range f.Fallthrough.Zones {
			z.Fallthrough = append(z.Fallthrough, dnsname.Canonical(o))
		}
		zc.Zones = append(zc.Zones, z)
	}
	return zc
}

// checkZoneFiles checks the `zone-files:` key and reads the files: a bad
// zone file fails `config validate` and the start with the file and line.
func checkZoneFiles(c *Config) error {
	if len(c.ZoneFiles) > zonefile.MaxFiles {
		return fmt.Errorf("zone-files: %d files, want at most %d", len(c.ZoneFiles), zonefile.MaxFiles)
	}
	for i, f := range c.ZoneFiles {
		if f.Reload != nil && *f.Reload < 0 {
			return fmt.Errorf("zone-files entry %d (%s): reload %s: want 0s or more", i+1, f.File, *f.Reload)
		}
		if len(f.Fallthrough.Zones) > maxACLItems {
			return fmt.Errorf("zone-files entry %d (%s): at most %d fallthrough zones", i+1, f.File, maxACLItems)
		}
	}
	return zonefile.Check(c.ZoneFileSettings())
}

// checkNSID bounds the NSID payload.
func checkNSID(c *Config) error {
	if len(c.NSIDData) > maxNSIDBytes {
		return fmt.Errorf("--nsid-data: %d bytes, want at most %d", len(c.NSIDData), maxNSIDBytes)
	}
	for _, l := range []struct {
		key   string
		zones List
	}{{"nsid-zones", c.NSIDZones}, {"nsid-except", c.NSIDExcept}} {
		if len(l.zones) > maxACLItems {
			return fmt.Errorf("--%s: %d zones, want at most %d", l.key, len(l.zones), maxACLItems)
		}
		for _, z := range l.zones {
			if _, ok := dns.IsDomainName(z); !ok || z == "" {
				return fmt.Errorf("--%s: %q is not a zone", l.key, z)
			}
		}
	}
	return nil
}

// NSIDPayload is the NSID the agent answers with: --nsid-data, else the
// node's name (--node-name), else the host name (CoreDNS's default), else
// "localhost".
func (c *Config) NSIDPayload(hostname func() (string, error)) string {
	switch {
	case c.NSIDData != "":
		return c.NSIDData
	case c.NodeName != "":
		return c.NodeName
	}
	if h, err := hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}
