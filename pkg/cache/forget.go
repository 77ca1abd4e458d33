package cache

import (
	"slices"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// Forget drops every entry whose question name (lower-case, fully
// qualified) match reports, fresh or servable stale alike, and keeps every
// fetch under way from storing its reply: it is how answers of zones
// whose upstream servers changed stop being served (a reload), instead of
// living out their TTL. It returns how many entries went; a StoredHit of
// one of them misses from then on.
//
// match is called from Forget's goroutine, one name at a time, with no
// lock of the cache held. Call Forget after SetExchanger: between the two,
// hits may still find the old entries, but no old reply is stored after
// either.
func (c *Cache) Forget(match func(name string) bool) int {
	return c.dropIf(func(e *entry) bool {
		name, ok := e.name()
		return !ok || match(name)
	})
}

// dropIf removes the entries drop reports. The generation moves first, so
// a fetch begun before does not store its reply afterwards. Each shard is
// read under its lock, judged without it (drop may be slow: a predicate
// over many zones), and the judged entries removed under it again if they
// are still there: one stored meanwhile is a fetch begun after the move,
// and stays. Entries removed so are not counted as evictions.
func (c *Cache) dropIf(drop func(e *entry) bool) int {
	c.gen.Add(1)
	n := 0
	for _, sh := range c.shards {
		sh.mu.Lock()
		keys := sh.lru.Keys()
		ents := make([]*entry, len(keys))
		for i, h := range keys {
			ents[i], _ = sh.lru.Peek(h)
		}
		sh.mu.Unlock()
		var gone []int
		for i, e := range ents {
			if e != nil && drop(e) {
				gone = append(gone, i)
			}
		}
		if len(gone) == 0 {
			continue
		}
		sh.mu.Lock()
		sh.dropping = true
		for _, i := range gone {
			if cur, ok := sh.lru.Peek(keys[i]); ok && cur == ents[i] {
				sh.lru.Remove(keys[i])
				n++
			}
		}
		sh.dropping = false
		sh.mu.Unlock()
	}
	return n
}

// name is the question name e was stored for.
func (e *entry) name() (string, bool) {
	name, _, err := dns.UnpackDomainName(e.wire, dnswire.HeaderLen)
	return name, err == nil
}

// settingsDrop returns what a change of settings from old to cur drops
// (nil: nothing): entries that cur would not have stored as they are.
//   - answers under a zone of cur.DisableSuccess, and denials and failures
//     under one of cur.DisableDenial, when the list changed;
//   - entries whose lifetime is over cur's bound of their kind, when that
//     bound went down (MaxTTL, MaxNegativeTTL, ServfailTTL; a negative
//     ServfailTTL keeps no failure at all).
//
// The floors (MinTTL, MinNegativeTTL) only make entries expire sooner
// than cur would: they stay.
func settingsDrop(old, cur *Config) func(e *entry) bool {
	success := !slices.Equal(old.DisableSuccess, cur.DisableSuccess) && len(cur.DisableSuccess) > 0
	denial := !slices.Equal(old.DisableDenial, cur.DisableDenial) && len(cur.DisableDenial) > 0
	maxPos, maxNeg, maxFail := int64(-1), int64(-1), int64(-1)
	if cur.MaxTTL < old.MaxTTL {
		maxPos = int64(cur.MaxTTL)
	}
	if cur.MaxNegativeTTL < old.MaxNegativeTTL {
		maxNeg = int64(cur.MaxNegativeTTL)
	}
	if cur.ServfailTTL < old.ServfailTTL {
		maxFail = int64(max(cur.ServfailTTL, 0))
	}
	if !success && !denial && maxPos < 0 && maxNeg < 0 && maxFail < 0 {
		return nil
	}
	over := func(e *entry, bound int64) bool { return bound >= 0 && e.lifetime > bound }
	under := func(e *entry, zones []string) bool {
		name, ok := e.name()
		return !ok || dnsname.InZones(name, zones)
	}
	return func(e *entry) bool {
		switch e.kind {
		case kindPositive:
			return over(e, maxPos) || success && under(e, cur.DisableSuccess)
		case kindPartial:
			return over(e, maxNeg) || success && under(e, cur.DisableSuccess)
		case kindNegative:
			return over(e, maxNeg) || denial && under(e, cur.DisableDenial)
		default:
			return over(e, maxFail) || denial && under(e, cur.DisableDenial)
		}
	}
}
