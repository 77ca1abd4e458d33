package migrate

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// none marks a duration the Corefile does not give.
const none time.Duration = -1

// cache maps the cache directive: nodedns has one cache for every external
// name, so the root block's settings are the ones carried.
func (m *migrator) cache(b *block, d *Directive, clusterFwd bool) {
	args := d.ArgTexts()
	maxTTL, negTTL, minTTL := none, none, none
	if len(args) > 0 {
		if n, err := strconv.Atoi(args[0]); err == nil {
			if n <= 0 {
				m.drop(d.Line, "%s: a TTL must be positive", d.String())
			} else {
				maxTTL = time.Duration(n) * time.Second
				negTTL = maxTTL
			}
			args = args[1:]
		}
	}
	for _, z := range args {
		if zz := dnsname.Canonical(z); zz != "." && !slices.Contains(b.zones, zz) {
			m.drop(d.Line, "%s: caching only %s is not carried; nodedns caches every external name", d.String(), z)
			break
		}
	}
	succCap, denCap := -1, -1
	prefetch, stale := -1, none
	minNeg := none
	var opts cacheOpts
	for _, o := range d.Block {
		oa := o.ArgTexts()
		switch o.Name {
		case "success", "denial":
			if len(oa) == 0 {
				m.drop(o.Line, "cache %s: wants a capacity", o.String())
				continue
			}
			n, err := strconv.Atoi(oa[0])
			if err != nil || n < 0 {
				m.drop(o.Line, "cache %s: bad capacity", o.String())
				continue
			}
			ttl, mttl := none, none
			if len(oa) > 1 {
				if t, ok := seconds(oa[1]); ok && t > 0 {
					ttl = time.Duration(t) * time.Second
				}
			}
			if len(oa) > 2 {
				if t, ok := seconds(oa[2]); ok {
					mttl = time.Duration(t) * time.Second
				}
			}
			if o.Name == "success" {
				succCap = n
				if ttl != none {
					maxTTL = ttl
				}
				if mttl != none {
					minTTL = mttl
				}
			} else {
				denCap = n
				if ttl != none {
					negTTL = ttl
				}
				if mttl != none {
					minNeg = mttl
				}
			}
		case "prefetch":
			if n, err := strconv.Atoi(firstArg(oa)); err == nil && n >= 0 {
				prefetch = n
			}
			m.prefetchOptions(o, oa, &opts)
		case "serve_stale":
			stale = m.serveStale(o, oa, &opts)
		default:
			m.cacheOption(b, o, oa, &opts)
		}
	}
	switch {
	case clusterFwd:
		// node-cache's cache of the cluster zone: nodedns caps forwarded
		// cluster answers at cluster-ttl.
		ttl := maxTTL
		if negTTL != none && (ttl == none || negTTL < ttl) {
			ttl = negTTL
		}
		if ttl != none {
			// Applies only if the block's forward is carried (finish).
			m.clusterCache = &pendingTTL{ttl: ttl, line: d.Line,
				comment: fmt.Sprintf("line %d: cache in the cluster zone's block; nodedns keeps forwarded cluster answers at most cluster-ttl (the shorter of its TTLs)", d.Line)}
		}
		return
	case b.kube && !b.root:
		// The cluster zone's own block: nodedns answers it from the index,
		// never cached.
		return
	}
	m.seen["cache"] = true
	if maxTTL != none {
		set(m, &m.cfg.MaxTTL, config.Duration(maxTTL), d.Line)
	}
	if negTTL != none {
		set(m, &m.cfg.MaxNegativeTTL, config.Duration(negTTL), d.Line)
	}
	if minTTL != none {
		set(m, &m.cfg.MinTTL, config.Duration(minTTL), d.Line)
	}
	if prefetch >= 0 {
		set(m, &m.cfg.Prefetch, prefetch, d.Line)
	}
	if minNeg != none {
		set(m, &m.cfg.MinNegativeTTL, config.Duration(minNeg), d.Line)
	}
	if stale != none {
		set(m, &m.cfg.ServeStale, config.Duration(stale), d.Line)
	}
	m.setCacheOpts(d, &opts)
	if succCap >= 0 || denCap >= 0 {
		if succCap < 0 {
			succCap = 10000
		}
		if denCap < 0 {
			denCap = 10000
		}
		set(m, &m.cfg.CacheSize, max(succCap+denCap, 1), d.Line, "CoreDNS's success and denial capacities together")
	}
}
