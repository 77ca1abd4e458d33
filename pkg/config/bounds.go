package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/resolvconf"
)

// Bounds of the settings. Every numeric setting has an upper bound (and a
// lower one where a small value would turn a loop busy): a value past it is
// a mistake or an attack on the node, never a tuning, and taking it would
// let one line of a ConfigMap take the node's DNS down (10,500 UDP sockets
// exhausted the runtime's threads; 100,000 Ps took 2.2 GB). Each bound is
// far above what a node needs; the comment says what sets it. Errors name
// the flag (or key) and the bound; docs/configuration.md shows the ranges.
const (
	// maxUDPSockets: each socket has a reader on its own OS thread,
	// holding a P; one reader serves about one core's worth of queries
	// (~95k QPS), so 64 are more than any node's NIC queues can feed.
	maxUDPSockets = 64
	// maxUDPReaders bounds --udp-sockets x listen addresses: each reader
	// is an OS thread (and by default a P); the runtime stops at 10,000
	// threads.
	maxUDPReaders = 256
	// maxGoMaxProcs: each P costs memory (its mcache, GC work) whether
	// used or not; 256 is above any node the agent runs on. The check
	// cannot see the machine, so the bound is static.
	maxGoMaxProcs = 256
	// maxInflight: each query resolved off the readers is a goroutine
	// (~8 KiB), the query and an upstream socket, some 16 KiB: 160 MiB at
	// the bound, what the DaemonSet's 256 MiB can afford beside the cache
	// and the cluster index.
	maxInflight = 10_000
	// maxTCPConns: a goroutine and buffers per connection (~16 KiB) plus
	// the kernel's socket memory: 64 MiB at the bound, 4x the default.
	maxTCPConns = 4096
	// maxCacheSize: the memory of entries is bounded by cache-max-bytes;
	// past a million entries the LRU's own map is ~100 MiB.
	maxCacheSize = 1_000_000
	// minCacheMaxBytes leaves room for a few large answers;
	// maxCacheMaxBytes: past the container's memory limit (256 MiB in the
	// DaemonSet) the bound bounds nothing.
	minCacheMaxBytes Bytes = 64 << 10
	maxCacheMaxBytes Bytes = 1 << 30
	// maxPrefetch: hits within one entry's life; past a thousand,
	// prefetch is off in practice.
	maxPrefetch = 1000
	// maxMinTTL: a floor of hours overrides every zone's TTL; no resolver
	// offers that (CoreDNS's cache: 5 s).
	maxMinTTL = time.Hour
	// maxMaxTTL: RFC 8767 §4 caps TTLs at 604,800 s (7 days).
	maxMaxTTL = 7 * 24 * time.Hour
	// maxNegativeTTL: RFC 2308 §5: one to three hours is sensible, over a
	// day is problematic.
	maxNegativeTTL = 24 * time.Hour
	// maxServeStale: RFC 8767 §5 suggests a maximum stale timer of one to
	// three days.
	maxServeStale = 3 * 24 * time.Hour
	// minSyncInterval: each pass lists the rules (iptables-save); more
	// often is a busy loop. maxSyncInterval: a rule someone deleted is put
	// back within the hour at worst (node-cache: 60 s).
	minSyncInterval = time.Second
	maxSyncInterval = time.Hour
	// maxClusterSyncWait: a node has no DNS while its first agent waits
	// (CoreDNS waits 5 s).
	maxClusterSyncWait = 5 * time.Minute
	// maxLameduck: the pod's grace period ends it anyway (30 s in the
	// shipped manifests: kubelet's SIGKILL then skips the drain and the
	// teardown of the rules); warnLameduck warns of that at start. A
	// second SIGTERM or SIGINT ends the lameduck early (pkg/agent).
	maxLameduck = 5 * time.Minute
	// The hang timeout: under half a second a GC pause or a throttled
	// CPU quota could pass for a hang; over a minute the queries queued
	// meanwhile would have timed out long before.
	minHangTimeout = 500 * time.Millisecond
	maxHangTimeout = time.Minute
	warnLameduck   = 25 * time.Second

	// maxListen, maxLocalIPs: every address is bound (UDP readers, TCP)
	// and every local IP gets rules; a node has a handful.
	maxListen   = 16
	maxLocalIPs = 8
	// maxUpstreams: each server is tried up to twice per exchange, with
	// its own health, pools and figures; CoreDNS's forward takes at most
	// 15. Stub domains: kube-dns ConfigMap's bounds (pkg/k8s/kubedns),
	// for the zones of the file and the ConfigMap together.
	maxUpstreams   = 15
	maxStubZones   = kubedns.MaxStubZones
	maxStubServers = kubedns.MaxStubServers
	// The search list: kubelet's bounds for a pod's (pkg/resolvconf):
	// each domain is one step of the walk of every query that walks.
	maxSearch      = resolvconf.MaxSearch
	maxSearchChars = resolvconf.MaxSearchChars
	// maxClusterDomains: every name of the index exists once per zone.
	maxClusterDomains = 8
	// maxFallthrough, maxHostsZones: zones matched per answer; a handful
	// in practice.
	maxFallthrough = 64
	maxHostsZones  = 64
	// maxNamespaces: a set, not walked per query; the bound catches a
	// generated list gone wrong (more is better said by namespace-labels).
	maxNamespaces = 1000
	// maxRewriteRules: every rule is tried on every query, on the reader
	// (a regex included); CoreDNS setups have a handful.
	maxRewriteRules = 64
	// maxLogClasses: the classes there are.
	maxLogClasses = 4
	// minHostsReload, maxHostsReload: the hosts file is stat'ed every
	// period (0s: never); more often than 100 ms is a busy loop, and a
	// change may well wait that long.
	minHostsReload = 100 * time.Millisecond
	maxHostsReload = time.Hour
)

// between checks an integer setting.
func between(key string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %d: want %d to %d", key, v, lo, hi)
	}
	return nil
}

// durationBetween checks a duration setting.
func durationBetween(key string, d Duration, lo, hi time.Duration) error {
	if time.Duration(d) < lo || time.Duration(d) > hi {
		return fmt.Errorf("--%s %s: want %s to %s", key, d, Duration(lo), Duration(hi))
	}
	return nil
}

// checkList checks a list setting: at most max items (what names them:
// "addresses", "domains"), each accepted by canon, which returns the form
// two items are compared in (an item equal to an earlier one is refused:
// in these lists a repetition means nothing); nil canon compares items as
// written.
func checkList(key, what string, l List, max int, canon func(string) (string, error)) error {
	if len(l) > max {
		return fmt.Errorf("--%s: %d %s: want at most %d", key, len(l), what, max)
	}
	seen := make(map[string]bool, len(l))
	for _, item := range l {
		k := item
		if canon != nil {
			var err error
			if k, err = canon(item); err != nil {
				return fmt.Errorf("--%s %q: %w", key, item, err)
			}
		}
		if seen[k] {
			return fmt.Errorf("--%s %q: given twice", key, item)
		}
		seen[k] = true
	}
	return nil
}

// canonAddrPort is an ip:port item's canonical form.
func canonAddrPort(s string) (string, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return "", fmt.Errorf("want ip:port")
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), nil
}

// canonDomain is a domain name item's canonical form (lower-case FQDN);
// names with an empty label, or over 253 characters, are refused.
func canonDomain(s string) (string, error) {
	n := dnsname.Canonical(strings.TrimSpace(s))
	if n == "." {
		return "", fmt.Errorf("the root is not a domain here")
	}
	if _, ok := dns.IsDomainName(n); !ok || strings.Contains(n, "..") || len(n) > 254 {
		return "", fmt.Errorf("not a domain name")
	}
	return n, nil
}

// canonClusterDomain is canonDomain for a cluster domain, which cannot be
// a reverse zone (the index answers PTR for the addresses it knows).
func canonClusterDomain(s string) (string, error) {
	n, err := canonDomain(s)
	if err != nil {
		return "", err
	}
	if dnsname.IsReverse(n) {
		return "", fmt.Errorf("a reverse zone cannot be the cluster domain")
	}
	return n, nil
}

// checkSearch checks a search list as kubelet checks a pod's: valid names,
// at most maxSearch of them and maxSearchChars characters in all.
func checkSearch(key string, l List) error {
	if err := checkList(key, "domains", l, maxSearch, canonDomain); err != nil {
		return err
	}
	if n := len(strings.Join(l, " ")); n > maxSearchChars {
		return fmt.Errorf("--%s: %d characters: want at most %d", key, n, maxSearchChars)
	}
	return nil
}

// canonLower compares zones, CIDRs and classes case-insensitively, with or
// without a trailing dot.
func canonLower(s string) (string, error) {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), ".")), nil
}

// canonNamespace accepts a namespace name (a DNS-1123 label).
func canonNamespace(s string) (string, error) {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return "", fmt.Errorf("not a namespace name: %s", errs[0])
	}
	return s, nil
}

// checkReaders bounds the UDP readers over all listen addresses.
func (c *Config) checkReaders() error {
	addrs := len(c.ListenAddrs())
	if n := c.SocketsPerAddr() * addrs; n > maxUDPReaders {
		return fmt.Errorf("--udp-sockets %d x %d listen addresses: %d UDP readers: want at most %d", c.SocketsPerAddr(), addrs, n, maxUDPReaders)
	}
	return nil
}

// checkHostsBounds bounds the lists and the reload period of the hosts key
// (the records themselves are pkg/query/hosts's: its file holds at most
// 16 MiB and 100,000 names, the entries as many names, and by this file's
// size).
func (c *Config) checkHostsBounds() error {
	h := c.Hosts
	if h == nil {
		return nil
	}
	if len(h.Zones) > maxHostsZones {
		return fmt.Errorf("hosts zones: %d zones: want at most %d", len(h.Zones), maxHostsZones)
	}
	if len(h.Fallthrough.Zones) > maxHostsZones {
		return fmt.Errorf("hosts fallthrough: %d zones: want at most %d", len(h.Fallthrough.Zones), maxHostsZones)
	}
	if r := h.Reload; r != nil && *r != 0 && (time.Duration(*r) < minHostsReload || time.Duration(*r) > maxHostsReload) {
		return fmt.Errorf("hosts reload %s: want 0s (never) or %s to %s", *r, Duration(minHostsReload), Duration(maxHostsReload))
	}
	return nil
}

// advice are warnings about valid values that may not do what is meant:
// the agent starts, and logs each.
var advice = []func(c *Config) string{
	func(c *Config) string {
		if time.Duration(c.Lameduck) >= warnLameduck {
			return fmt.Sprintf("--lameduck %s: make sure the pod's terminationGracePeriodSeconds exceeds it by some seconds (30 s in the shipped manifests): past the grace period the kubelet kills the agent without the drain and the removal of its rules", c.Lameduck)
		}
		return ""
	},
}
