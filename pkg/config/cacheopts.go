package config

import (
	"fmt"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// The options of CoreDNS's cache plugin the agent carries beyond the TTL
// clamps (keepttl, servfail, the denial minimum, serve_stale's modes and
// policy, prefetch's window and percentage, disable): their values and
// checks. The settings table (keys.go) declares the keys; pkg/agent maps
// them onto pkg/cache.

// Serve-stale modes (serve-stale-mode) and policies (serve-stale-policy).
const (
	ServeStaleVerify    = "verify"
	ServeStaleImmediate = "immediate"
	// ServeStalePreferPositive keeps an answer over a denial while it may
	// be served stale (CoreDNS's spelling, as round_robin is).
	ServeStalePreferPositive = "prefer_positive"
)

// Bounds of the cache options.
const (
	// maxServfailTTL: RFC 2308 §7.1 (and CoreDNS) bound a SERVFAIL's
	// lifetime at 5 minutes.
	maxServfailTTL = 5 * time.Minute
	// maxStaleTimeout: a query's upstream budget is 5 s; a verify
	// waiting longer than a minute is a mistake.
	maxStaleTimeout = time.Minute
	// maxStaleRecheck: CoreDNS's bound.
	maxStaleRecheck = 5 * time.Minute
	// maxPrefetchWindow: hits a day apart make no name popular.
	minPrefetchWindow = time.Second
	maxPrefetchWindow = 24 * time.Hour
	// maxDisableZones bounds each disable list (a suffix test per zone on
	// every stored reply).
	maxDisableZones = 64
)

func checkServeStaleTTL(c *Config) error {
	if err := durationBetween("serve-stale-ttl", c.ServeStaleTTL, 0, maxMaxTTL); err != nil {
		return err
	}
	if time.Duration(c.ServeStaleTTL)%time.Second != 0 {
		return fmt.Errorf("--serve-stale-ttl %s: want whole seconds (it is a TTL)", c.ServeStaleTTL)
	}
	return nil
}

func checkServeStalePolicy(c *Config) error {
	if c.ServeStalePolicy != "" && c.ServeStalePolicy != ServeStalePreferPositive {
		return fmt.Errorf("--serve-stale-policy %q: want %s (or empty for none)", c.ServeStalePolicy, ServeStalePreferPositive)
	}
	return nil
}

// checkDisableZones checks a cache-disable list: zone names ("." is every
// name), none twice.
func checkDisableZones(key string, l List) error {
	return checkList(key, "zones", l, maxDisableZones, func(s string) (string, error) {
		n := dnsname.Canonical(s)
		if _, ok := dns.IsDomainName(n); !ok || len(n) > 254 {
			return "", fmt.Errorf("not a zone name")
		}
		return n, nil
	})
}

// checkMinNegativeTTL: the minimum of denials under their maximum.
func checkMinNegativeTTL(c *Config) error {
	if c.MinNegativeTTL > c.MaxNegativeTTL && time.Duration(c.MinNegativeTTL) <= maxNegativeTTL {
		return fmt.Errorf("--min-negative-ttl %s is above --max-negative-ttl %s", c.MinNegativeTTL, c.MaxNegativeTTL)
	}
	return nil
}

// Zones returns l's zones lower-case and fully qualified ("." stays).
func (l List) Zones() []string {
	if len(l) == 0 {
		return nil
	}
	out := make([]string, len(l))
	for i, z := range l {
		out[i] = dnsname.Canonical(z)
	}
	return out
}
