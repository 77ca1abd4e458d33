package migrate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// cacheOpts are the options of one cache directive besides its TTLs and
// capacities, kept until the directive is known to apply to every name
// (the root block's cache, not a cluster zone's).
type cacheOpts struct {
	settings []func()
}

// later records a setting to make once the directive applies.
func (o *cacheOpts) later(f func()) { o.settings = append(o.settings, f) }

// setCacheOpts makes the settings recorded for d.
func (m *migrator) setCacheOpts(_ *Directive, o *cacheOpts) {
	for _, f := range o.settings {
		f()
	}
}

// prefetchOptions maps prefetch's DURATION and PERCENTAGE%.
func (m *migrator) prefetchOptions(o *Directive, oa []string, opts *cacheOpts) {
	if len(oa) > 3 {
		m.drop(o.Line, "cache %s: too many arguments; not carried", o.String())
		return
	}
	if len(oa) > 1 {
		d, err := time.ParseDuration(oa[1])
		switch {
		case err != nil:
			m.drop(o.Line, "cache %s: %q is not a duration; the window is not carried", o.String(), oa[1])
		case d < time.Second || d > 24*time.Hour:
			m.drop(o.Line, "cache %s: nodedns takes a window of 1s to 24h; not carried (the window stays 1m)", o.String())
		default:
			opts.later(func() { set(m, &m.cfg.PrefetchWindow, config.Duration(d), o.Line) })
		}
	}
	if len(oa) > 2 {
		n, err := strconv.Atoi(strings.TrimSuffix(oa[2], "%"))
		if err != nil || !strings.HasSuffix(oa[2], "%") || n < 10 || n > 90 {
			m.drop(o.Line, "cache %s: the percentage must be 10%% to 90%%; not carried", o.String())
			return
		}
		opts.later(func() { set(m, &m.cfg.PrefetchPercent, n, o.Line) })
	}
}

// serveStale maps serve_stale [DURATION [immediate [TTL [RECHECK]] |
// verify [TIMEOUT [TTL [RECHECK]]]]] and returns DURATION (none when the
// directive is not carried). CoreDNS's defaults (immediate, TTL 0s,
// recheck 0s, verify without a timeout) differ from nodedns's, so every
// setting is written.
func (m *migrator) serveStale(o *Directive, oa []string, opts *cacheOpts) time.Duration {
	if len(oa) > 5 {
		m.drop(o.Line, "cache %s: too many arguments; not carried", o.String())
		return none
	}
	dur := time.Hour
	if len(oa) > 0 {
		d, err := time.ParseDuration(oa[0])
		if err != nil || d < 0 {
			m.drop(o.Line, "cache %s: %q is not a duration; not carried", o.String(), oa[0])
			return none
		}
		dur = d
	}
	mode := config.ServeStaleImmediate
	if len(oa) > 1 {
		mode = strings.ToLower(oa[1])
		if mode != config.ServeStaleImmediate && mode != config.ServeStaleVerify {
			m.drop(o.Line, "cache %s: mode %q: want immediate or verify; not carried", o.String(), oa[1])
			return none
		}
	}
	rest := oa[min(2, len(oa)):]
	timeout := time.Duration(0)
	if mode == config.ServeStaleVerify && len(rest) > 0 {
		d, err := time.ParseDuration(rest[0])
		if err != nil || d < 0 || d > time.Minute {
			m.drop(o.Line, "cache %s: the verify timeout must be 0s to 1m; not carried", o.String())
			return none
		}
		timeout, rest = d, rest[1:]
	}
	if mode == config.ServeStaleImmediate && len(rest) > 2 {
		m.drop(o.Line, "cache %s: too many arguments for immediate; not carried", o.String())
		return none
	}
	ttl, recheck := time.Duration(0), time.Duration(0)
	if len(rest) > 0 {
		d, err := time.ParseDuration(rest[0])
		if err != nil || d < 0 || d%time.Second != 0 || d > 7*24*time.Hour {
			m.drop(o.Line, "cache %s: the response TTL must be whole seconds up to 168h; not carried", o.String())
			return none
		}
		ttl = d
	}
	if len(rest) > 1 {
		d, err := time.ParseDuration(rest[1])
		if err != nil || d < 0 || d > 5*time.Minute {
			m.drop(o.Line, "cache %s: the failure recheck must be 0s to 5m; not carried", o.String())
			return none
		}
		recheck = d
	}
	opts.later(func() {
		set(m, &m.cfg.ServeStaleMode, mode, o.Line)
		if mode == config.ServeStaleVerify {
			why := fmt.Sprintf("line %d: %s", o.Line, o.String())
			if timeout == 0 {
				why += " (no timeout: a query waits for the upstream to fail, as CoreDNS's verify)"
			}
			set(m, &m.cfg.ServeStaleTimeout, config.Duration(timeout), o.Line, why)
		}
		set(m, &m.cfg.ServeStaleTTL, config.Duration(ttl), o.Line)
		var notes []string
		if mode == config.ServeStaleVerify && recheck > 0 {
			notes = append(notes, "within it nodedns also refreshes the entry in the background, one refresh at a time, so an upstream that is back is seen sooner than CoreDNS sees it")
		}
		set(m, &m.cfg.ServeStaleRecheck, config.Duration(recheck), o.Line, notes...)
	})
	return dur
}

// cacheOption maps the cache options that are one setting each.
func (m *migrator) cacheOption(b *block, o *Directive, oa []string, opts *cacheOpts) {
	switch o.Name {
	case "servfail":
		d, err := time.ParseDuration(firstArg(oa))
		if len(oa) != 1 || err != nil || d < 0 || d > 5*time.Minute {
			m.drop(o.Line, "cache %s: want one duration of 0s to 5m; not carried", o.String())
			return
		}
		opts.later(func() { set(m, &m.cfg.ServfailTTL, config.Duration(d), o.Line) })
	case "keepttl":
		opts.later(func() { set(m, &m.cfg.CacheKeepTTL, true, o.Line) })
	case "serve_stale_policy":
		if len(oa) != 1 || strings.ToLower(oa[0]) != config.ServeStalePreferPositive {
			m.drop(o.Line, "cache %s: want prefer_positive; not carried", o.String())
			return
		}
		opts.later(func() { set(m, &m.cfg.ServeStalePolicy, config.ServeStalePreferPositive, o.Line) })
	case "disable":
		if len(oa) == 0 || oa[0] != "success" && oa[0] != "denial" {
			m.drop(o.Line, "cache %s: want success or denial; not carried", o.String())
			return
		}
		given := b.zones // no zones: every name the cache sees, the block's
		if len(oa) > 1 {
			given = nil
			for _, z := range oa[1:] {
				given = append(given, dnsname.Canonical(z))
			}
		}
		// The cluster zone is answered from the index and never cached
		// (in this block: a forwarded cluster zone's block is not here).
		var zones config.List
		for _, z := range given {
			if !m.isClusterZone(z) {
				zones = append(zones, trimDot(z))
			}
		}
		if len(zones) == 0 {
			return
		}
		field := &m.cfg.CacheDisableSuccess
		if oa[0] == "denial" {
			field = &m.cfg.CacheDisableDenial
		}
		opts.later(func() { m.addZones(field, zones, o.Line) })
	default:
		m.drop(o.Line, "cache option %s: not known to nodedns", o.String())
	}
}

// addZones adds zones to a zone-list setting: the first directive sets
// it, later ones (other blocks' caches) add their zones.
func (m *migrator) addZones(field *config.List, zones config.List, line int) {
	if !m.isSet(field) {
		set(m, field, zones, line)
		return
	}
	for _, z := range zones {
		if !slices.Contains(*field, z) {
			*field = append(*field, z)
		}
	}
}
