package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/rewrite"
)

// HostsConfig is the `hosts:` key: static records answered before the
// cluster zone and the cache, as CoreDNS's hosts plugin (pkg/query/hosts).
// A written file leaves out the fields at their zero value.
type HostsConfig struct {
	// Entries are hosts(5) lines ("IP name [alias...]").
	Entries []string `json:"entries,omitempty"`
	// File is a hosts(5) file, re-read when it changes.
	File string `json:"file,omitempty"`
	// TTL of the records; default 3600s.
	TTL Duration `json:"ttl,omitzero"`
	// NoReverse: no PTR records for the addresses.
	NoReverse bool `json:"no-reverse,omitempty"`
	// Zones the records are answered in; default every name.
	Zones List `json:"zones,omitempty"`
	// Fallthrough: where a name without records goes on to the cluster
	// zone, cache and upstream (absent: nowhere; empty: everywhere). Left
	// out of a written file when absent: null would read back as
	// everywhere.
	Fallthrough ZoneList `json:"fallthrough,omitzero"`
	// FallthroughUnsupported: other types than A/AAAA/PTR of a known
	// name go on too (where Fallthrough covers it).
	FallthroughUnsupported bool `json:"fallthrough-unsupported,omitempty"`
	// Reload is how often File is checked; default 5s; 0s: never.
	Reload *Duration `json:"reload,omitempty"`
}

// HostsSettings maps the `hosts:` key onto pkg/query/hosts; the zero
// hosts.Config (no records) when the key is absent.
func (c *Config) HostsSettings() hosts.Config {
	h := c.Hosts
	if h == nil {
		return hosts.Config{}
	}
	hc := hosts.Config{Entries: h.Entries, File: h.File, TTL: time.Duration(h.TTL), NoReverse: h.NoReverse,
		Zones: h.Zones, FallthroughUnsupported: h.FallthroughUnsupported}
	if h.Fallthrough.Set {
		hc.Fallthrough = append([]string{}, h.Fallthrough.Zones...)
	}
	if h.Reload != nil {
		hc.Reload = time.Duration(*h.Reload)
		if hc.Reload == 0 {
			hc.Reload = -1 // 0s: never, as CoreDNS's `reload 0s`
		}
	}
	return hc
}

// ZoneList is a list of zones where being absent differs from being empty:
// absent (Set false) is "nowhere"; an empty list, or a key with no value,
// is "every zone" (CoreDNS's bare `fallthrough`).
type ZoneList struct {
	Set   bool
	Zones []string
}

// UnmarshalJSON accepts null (every zone), a list, or a comma-separated
// string.
func (z *ZoneList) UnmarshalJSON(b []byte) error {
	z.Set, z.Zones = true, nil
	if string(b) == "null" {
		return nil
	}
	var l List
	if err := l.UnmarshalJSON(b); err != nil {
		return err
	}
	z.Zones = l
	return nil
}

// MarshalJSON writes the list (omitted by callers when not Set).
func (z ZoneList) MarshalJSON() ([]byte, error) {
	if !z.Set {
		return []byte("null"), nil
	}
	return json.Marshal(append([]string{}, z.Zones...))
}

func (z ZoneList) String() string {
	if !z.Set {
		return "(none)"
	}
	if len(z.Zones) == 0 {
		return "(every zone)"
	}
	return strings.Join(z.Zones, ",")
}

// RewriteRule is one entry of the `rewrite:` key: CoreDNS's `rewrite
// [stop|continue] name TYPE FROM TO answer auto` (pkg/query/rewrite).
type RewriteRule struct {
	// Type is exact (default), prefix, suffix, substring or regex.
	Type string `json:"type,omitempty"`
	From string `json:"from"`
	// To may use {0}, {1}.. captures of a regex From.
	To string `json:"to"`
	// Mode is stop (default: a match ends the list) or continue.
	Mode string `json:"mode,omitempty"`
}

// Rewriter builds the rules of the `rewrite:` key; nil when there are
// none.
func (c *Config) Rewriter() (*rewrite.Rewriter, error) {
	rules := c.Rewrite
	if len(rules) == 0 {
		return nil, nil
	}
	rs := make([]rewrite.Rule, 0, len(rules))
	for i, r := range rules {
		switch r.Mode {
		case "", "stop", "continue":
		default:
			return nil, fmt.Errorf("rewrite rule %d: mode %q: want stop or continue", i+1, r.Mode)
		}
		rs = append(rs, rewrite.Rule{Type: r.Type, From: r.From, To: r.To, Continue: r.Mode == "continue"})
	}
	return rewrite.New(rs)
}

// Load-balancing policies of --loadbalance.
const (
	LoadBalanceOff        = ""
	LoadBalanceRoundRobin = "round_robin"
)
