package metrics

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/observe/hist"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// This file exports CoreDNS 1.15's series (names, label names and
// meanings, read from coredns v1.15.0 plugin/metrics/vars, plugin/cache,
// plugin/forward and plugin/pkg/proxy; the forward series CoreDNS moved to
// coredns_proxy_* in 1.11 are exported under both names, since the
// coredns-mixin and node-local-dns dashboards still query the old ones),
// plus node-cache's coredns_nodecache_setup_errors_total, so that
// dashboards and alerts written for CoreDNS and NodeLocal DNSCache work
// unchanged. How nodedns maps onto CoreDNS's labels:
//
//   - server is "dns://" + the listen address a query came in on, as
//     CoreDNS labels a server block bound to an address; series not tied
//     to one query (cache, plugins) carry the first listen address.
//   - zone is the longest configured zone the query name falls under (the
//     cluster domains, in-addr.arpa., ip6.arpa. and the stub domains: the
//     server blocks of node-local-dns's Corefile), else ".".
//   - view is always empty (nodedns has no views).
//   - plugin, on responses, is the CoreDNS plugin doing the work of the
//     stage that answered: kubernetes (cluster names), cache (cache hits,
//     stale answers), forward (upstream), autopath (search-path walks),
//     empty for answers the server writes itself (errors, ANY).
//
// Counting follows the package's rule: Observe adds to fixed arrays of
// atomic counters picked by index (zone, listener, proto, family, type,
// source, rcode), and the collector turns them into series at scrape time.

// Compat says which compatibility series are exported besides nodedns_*.
type Compat string

// Compat values (the --metrics-compat flag).
const (
	CompatCoreDNS Compat = "coredns" // CoreDNS 1.15 and node-cache series (the default)
	CompatNone    Compat = "none"    // nodedns_* only
)

// maxZones bounds the zones counted apart (zones are never forgotten, so
// that counters stay monotonic across reloads); further zones count
// under the zone enclosing them, or ".".
const maxZones = 64

// monitoredTypes are the query types CoreDNS's requests_total names
// (plugin/metrics/vars/monitor.go); every other type is "other".
var monitoredTypes = [...]uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeDNSKEY, dns.TypeDS, dns.TypeMX,
	dns.TypeNSEC3, dns.TypeNSEC, dns.TypeNS, dns.TypePTR, dns.TypeRRSIG, dns.TypeSOA,
	dns.TypeSRV, dns.TypeTXT, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeIXFR, dns.TypeAXFR, dns.TypeANY,
}

const numQtypes = len(monitoredTypes) + 1 // the last is "other"

var qtypeNames = func() [numQtypes]string {
	var n [numQtypes]string
	for i, t := range monitoredTypes {
		n[i] = dns.Type(t).String()
	}
	n[numQtypes-1] = "other"
	return n
}()

// qtypeIndex is a switch rather than a map: it is on the query path.
func qtypeIndex(t uint16) int {
	switch t {
	case dns.TypeA:
		return 0
	case dns.TypeAAAA:
		return 1
	case dns.TypeCNAME:
		return 2
	case dns.TypeDNSKEY:
		return 3
	case dns.TypeDS:
		return 4
	case dns.TypeMX:
		return 5
	case dns.TypeNSEC3:
		return 6
	case dns.TypeNSEC:
		return 7
	case dns.TypeNS:
		return 8
	case dns.TypePTR:
		return 9
	case dns.TypeRRSIG:
		return 10
	case dns.TypeSOA:
		return 11
	case dns.TypeSRV:
		return 12
	case dns.TypeTXT:
		return 13
	case dns.TypeHTTPS:
		return 14
	case dns.TypeSVCB:
		return 15
	case dns.TypeIXFR:
		return 16
	case dns.TypeAXFR:
		return 17
	case dns.TypeANY:
		return 18
	}
	return numQtypes - 1
}

// sourcePlugin is the CoreDNS plugin label of each answer source.
var sourcePlugin = [numSources]string{
	srcCluster: "kubernetes", srcCache: "cache", srcStale: "cache", srcUpstream: "forward",
	srcAutopath: "autopath", srcLocal: "", srcTemplate: "template", srcFile: "file", srcOther: "",
}

// corednsRcode is the rcode label CoreDNS gives responses
// (plugin/pkg/rcode.ToString: miekg/dns's name, else "RCODE" and the
// number); OTHER past the counted range.
func corednsRcode(i int) string {
	if i == numRcodes-1 {
		return "OTHER"
	}
	if s, ok := dns.RcodeToString[i]; ok {
		return s
	}
	return "RCODE" + strconv.Itoa(i)
}

// forwardRcode is the rcode label CoreDNS gives upstream replies
// (plugin/pkg/proxy: miekg/dns's name, else the number).
func forwardRcode(rc int) string {
	if rc < 0 {
		return "other"
	}
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}

// serverCounters are one (zone, listener)'s counters.
type serverCounters struct {
	requests  [2][2][numQtypes]atomic.Uint64 // proto (udp, tcp), family (1, 2), type
	responses [numSources][numRcodes]atomic.Uint64
	do        atomic.Uint64
	duration  hist.Durations
	reqSize   [2]hist.Sizes // by proto
	respSize  [2]hist.Sizes
}

var protoNames = [2]string{"udp", "tcp"}
var familyNames = [2]string{"1", "2"}

// zoneSet holds a zone's counters, one serverCounters per listener.
type zoneSet struct {
	zone    string
	servers []serverCounters
}

// zoneTable is what Observe matches names against; replaced whole by
// SetZones.
type zoneTable struct {
	root  *zoneSet
	zones []zoneMatch // longest first
}

type zoneMatch struct {
	zone   string // "cluster.local."
	dotted string // ".cluster.local."
	tail   byte   // the zone's last character before the root dot ('l')
	set    *zoneSet
}

// match returns the set of the longest zone name is in (name is the
// lower-case FQDN), else the root's. Names of other top-level domains
// (most external names) are told apart by one byte per zone.
func (t *zoneTable) match(name string) *zoneSet {
	n := len(name)
	if n < 2 {
		return t.root
	}
	c := name[n-2]
	for i := range t.zones {
		z := &t.zones[i]
		if z.tail != c {
			continue
		}
		if name == z.zone || n > len(z.dotted) && name[n-len(z.dotted):] == z.dotted {
			return z.set
		}
	}
	return t.root
}

// compat keeps the counters behind the CoreDNS series.
type compat struct {
	servers []string // server label per listener
	log     *slog.Logger
	table   atomic.Pointer[zoneTable]

	mu   sync.Mutex // guards sets (SetZones and the collector)
	sets []*zoneSet // every zone counted since start, "." first
}

func newCompat(listeners []string, log *slog.Logger) *compat {
	c := &compat{log: log}
	for _, l := range listeners {
		c.servers = append(c.servers, serverLabel(l))
	}
	if len(c.servers) == 0 {
		c.servers = []string{"dns://:53"}
	}
	root := c.newSet(".")
	c.sets = []*zoneSet{root}
	c.table.Store(&zoneTable{root: root})
	return c
}

// serverLabel is CoreDNS's server label for a listen address:
// "dns://" + host:port (IPv6 hosts bracketed).
func serverLabel(listen string) string {
	if ap, err := netip.ParseAddrPort(listen); err == nil {
		return "dns://" + ap.String()
	}
	return "dns://" + listen
}

func (c *compat) newSet(zone string) *zoneSet {
	return &zoneSet{zone: zone, servers: make([]serverCounters, len(c.servers))}
}

// setZones makes zones (besides ".") the ones names are counted under.
// A zone seen before gets its counters back.
func (c *compat) setZones(zones []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byName := map[string]*zoneSet{}
	for _, s := range c.sets {
		byName[s.zone] = s
	}
	seen := map[string]bool{".": true}
	t := &zoneTable{root: c.sets[0]}
	for _, z := range zones {
		z = dns.CanonicalName(z)
		if _, ok := dns.IsDomainName(z); !ok || seen[z] {
			continue
		}
		seen[z] = true
		set, ok := byName[z]
		if !ok {
			if len(c.sets) >= maxZones {
				c.log.Warn("too many zones for metrics: counting this one under its parent", "component", "metrics", "zone", z, "max", maxZones)
				continue
			}
			set = c.newSet(z)
			c.sets = append(c.sets, set)
			byName[z] = set
		}
		t.zones = append(t.zones, zoneMatch{zone: z, dotted: "." + z, tail: z[len(z)-2], set: set})
	}
	slices.SortFunc(t.zones, func(a, b zoneMatch) int {
		if d := len(b.zone) - len(a.zone); d != 0 {
			return d
		}
		return strings.Compare(a.zone, b.zone)
	})
	c.table.Store(t)
}

// observe counts one answer; si and rc are the source and rcode indexes.
func (c *compat) observe(ev *pipeline.Event, si, rc int) {
	zs := c.table.Load().match(ev.Name)
	li := ev.Listener
	if li < 0 || li >= len(zs.servers) {
		li = 0
	}
	sc := &zs.servers[li]
	proto := 0
	if ev.Proto == "tcp" {
		proto = 1
	}
	fam := 1
	if ev.Client.Is4() {
		fam = 0
	}
	sc.requests[proto][fam][qtypeIndex(ev.Qtype)].Add(1)
	sc.responses[si][rc].Add(1)
	if ev.DO {
		sc.do.Add(1)
	}
	sc.duration.Observe(ev.Duration)
	sc.reqSize[proto].Observe(ev.RequestSize)
	sc.respSize[proto].Observe(ev.ResponseSize)
}

// corednsCollector exports the compat series.
type corednsCollector struct {
	r *Recorder
	c *compat

	buildInfo, panics, pluginEnabled, reloadFailed, setupErrors *prometheus.Desc

	requests, responses, doRequests, duration, reqSize, respSize *prometheus.Desc

	cacheEntries, cacheHits, cacheMisses, cacheRequests, cacheStale, cachePrefetch, cacheEvictions *prometheus.Desc

	fwdRequests, fwdResponses, fwdDuration, fwdHCFailures, fwdHCBroken, fwdMaxConcurrent *prometheus.Desc
	proxyDuration, proxyHCFailures                                                       *prometheus.Desc

	autopathSuccess *prometheus.Desc
	dns64Translated *prometheus.Desc
}

func newCorednsCollector(r *Recorder, c *compat) *corednsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("coredns_"+name, help, labels, nil)
	}
	return &corednsCollector{
		r: r, c: c,
		buildInfo:     d("build_info", "A metric with a constant '1' value labeled by version, revision, and goversion from which nodedns was built.", "version", "revision", "goversion"),
		panics:        d("panics_total", "A metrics that counts the number of panics."),
		pluginEnabled: d("plugin_enabled", "A metric that indicates whether a plugin is enabled on per server and zone basis (the CoreDNS plugins whose work nodedns does).", "server", "zone", "view", "name"),
		reloadFailed:  d("reload_failed_total", "Counter of the number of failed reload attempts."),
		setupErrors:   d("nodecache_setup_errors_total", "The number of errors during periodic network setup for node-cache", "errortype"),

		requests:   d("dns_requests_total", "Counter of DNS requests made per zone, protocol and family.", "server", "zone", "view", "proto", "family", "type"),
		responses:  d("dns_responses_total", "Counter of response status codes.", "server", "zone", "view", "rcode", "plugin"),
		doRequests: d("dns_do_requests_total", "Counter of DNS requests with DO bit set per zone.", "server", "zone", "view"),
		duration:   d("dns_request_duration_seconds", "Histogram of the time (in seconds) each request took per zone.", "server", "zone", "view"),
		reqSize:    d("dns_request_size_bytes", "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.", "server", "zone", "view", "proto"),
		respSize:   d("dns_response_size_bytes", "Size of the returned response in bytes.", "server", "zone", "view", "proto"),

		cacheEntries:   d("cache_entries", "The number of elements in the cache.", "server", "type", "zones", "view"),
		cacheHits:      d("cache_hits_total", "The count of cache hits.", "server", "type", "zones", "view"),
		cacheMisses:    d("cache_misses_total", "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.", "server", "zones", "view"),
		cacheRequests:  d("cache_requests_total", "The count of cache requests.", "server", "zones", "view"),
		cacheStale:     d("cache_served_stale_total", "The number of requests served from stale cache entries.", "server", "zones", "view"),
		cachePrefetch:  d("cache_prefetch_total", "The number of times the cache has prefetched a cached item.", "server", "zones", "view"),
		cacheEvictions: d("cache_evictions_total", "The count of cache evictions.", "server", "type", "zones", "view"),

		fwdRequests:      d("forward_requests_total", "Counter of requests made per upstream.", "to"),
		fwdResponses:     d("forward_responses_total", "Counter of responses received per upstream.", "rcode", "to"),
		fwdDuration:      d("forward_request_duration_seconds", "Histogram of the time each request took.", "to", "rcode"),
		fwdHCFailures:    d("forward_healthcheck_failures_total", "Counter of the number of failed healthchecks.", "to"),
		fwdHCBroken:      d("forward_healthcheck_broken_total", "Counter of the number of complete failures of the healthchecks."),
		fwdMaxConcurrent: d("forward_max_concurrent_rejects_total", "Counter of the number of queries rejected because the concurrent queries were at maximum."),
		proxyDuration:    d("proxy_request_duration_seconds", "Histogram of the time each request took.", "proxy_name", "to", "rcode"),
		proxyHCFailures:  d("proxy_healthcheck_failures_total", "Counter of the number of failed healthchecks.", "proxy_name", "to"),

		autopathSuccess: d("autopath_success_total", "Counter of requests that did autopath.", "server"),
		dns64Translated: d("dns64_requests_translated_total", "Counter of DNS requests translated by dns64.", "server"),
	}
}

func (cc *corednsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cc.buildInfo, cc.panics, cc.pluginEnabled, cc.reloadFailed, cc.setupErrors,
		cc.requests, cc.responses, cc.doRequests, cc.duration, cc.reqSize, cc.respSize,
		cc.cacheEntries, cc.cacheHits, cc.cacheMisses, cc.cacheRequests, cc.cacheStale, cc.cachePrefetch, cc.cacheEvictions,
		cc.fwdRequests, cc.fwdResponses, cc.fwdDuration, cc.fwdHCFailures, cc.fwdHCBroken, cc.fwdMaxConcurrent,
		cc.proxyDuration, cc.proxyHCFailures, cc.autopathSuccess, cc.dns64Translated} {
		ch <- d
	}
}

// setupErrorTypes are node-cache's error types, all exported from the
// start (node-cache registers them at zero too).
var setupErrorTypes = []string{"iptables", "iptables_lock", "interface_add", "interface_check", "configmap"}

func (cc *corednsCollector) Collect(ch chan<- prometheus.Metric) {
	r, c := cc.r, cc.c
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	histogram := func(d *prometheus.Desc, s hist.Snapshot, labels ...string) {
		ch <- prometheus.MustNewConstHistogram(d, s.Count(), s.Sum, s.Cumulative(), labels...)
	}
	first := c.servers[0]
	gauge(cc.buildInfo, 1, r.cfg.Version, r.cfg.Revision, runtime.Version())
	for _, p := range r.cfg.Plugins {
		gauge(cc.pluginEnabled, 1, first, ".", "", p)
	}

	c.mu.Lock()
	sets := slices.Clone(c.sets)
	c.mu.Unlock()
	var doTotal uint64
	for _, zs := range sets {
		for li := range zs.servers {
			sc, srv := &zs.servers[li], c.servers[li]
			for p := range 2 {
				for f := range 2 {
					for t := range numQtypes {
						if v := sc.requests[p][f][t].Load(); v > 0 {
							counter(cc.requests, v, srv, zs.zone, "", protoNames[p], familyNames[f], qtypeNames[t])
						}
					}
				}
			}
			// Sources that map to one plugin (cache and stale) add up.
			byPlugin := map[[2]string]uint64{}
			for s := range numSources {
				for rc := range numRcodes {
					if v := sc.responses[s][rc].Load(); v > 0 {
						byPlugin[[2]string{corednsRcode(rc), sourcePlugin[s]}] += v
					}
				}
			}
			for k, v := range byPlugin {
				counter(cc.responses, v, srv, zs.zone, "", k[0], k[1])
			}
			if v := sc.do.Load(); v > 0 {
				counter(cc.doRequests, v, srv, zs.zone, "")
				doTotal += v
			}
			if s := sc.duration.Snapshot(); s.Count() > 0 {
				histogram(cc.duration, s, srv, zs.zone, "")
			}
			for p := range 2 {
				if s := sc.reqSize[p].Snapshot(); s.Count() > 0 {
					histogram(cc.reqSize, s, srv, zs.zone, "", protoNames[p])
				}
				if s := sc.respSize[p].Snapshot(); s.Count() > 0 {
					histogram(cc.respSize, s, srv, zs.zone, "", protoNames[p])
				}
			}
		}
	}
	counter(cc.autopathSuccess, r.apShortcuts.Load(), first)
	// As CoreDNS's, whose series appears with the first translation.
	if v := r.dns64Translated.Load(); v > 0 {
		counter(cc.dns64Translated, v, first)
	}

	src := r.cfg.Sources
	if src.Server != nil {
		counter(cc.panics, src.Server().Panics)
	} else {
		counter(cc.panics, 0)
	}
	var reloadFailures uint64
	if src.ConfigErrors != nil {
		reloadFailures = src.ConfigErrors()
	}
	counter(cc.reloadFailed, reloadFailures)
	setup := map[string]uint64{"configmap": reloadFailures}
	if src.Intercept != nil {
		for k, v := range src.Intercept().Errors {
			setup[k] += v
		}
	}
	for _, t := range setupErrorTypes {
		counter(cc.setupErrors, setup[t], t)
	}
	if src.Cache != nil {
		cf := src.Cache()
		denial := min(cf.DenialEntries, cf.Entries)
		gauge(cc.cacheEntries, float64(cf.Entries-denial), first, "success", ".", "")
		gauge(cc.cacheEntries, float64(denial), first, "denial", ".", "")
		dh := min(cf.DenialHits, cf.Hits)
		counter(cc.cacheHits, cf.Hits-dh, first, "success", ".", "")
		counter(cc.cacheHits, dh, first, "denial", ".", "")
		counter(cc.cacheMisses, cf.Misses, first, ".", "")
		counter(cc.cacheRequests, cf.Hits+cf.Misses, first, ".", "")
		counter(cc.cacheStale, cf.StaleServed, first, ".", "")
		counter(cc.cachePrefetch, cf.Prefetches, first, ".", "")
		de := min(cf.DenialEvictions, cf.Evictions)
		counter(cc.cacheEvictions, cf.Evictions-de, first, "success", ".", "")
		counter(cc.cacheEvictions, de, first, "denial", ".", "")
	}
	if src.Upstreams != nil {
		for _, u := range uniqueUpstreams(src.Upstreams()) {
			var replies uint64
			rcodes := make([]int, 0, len(u.Latency))
			for rc := range u.Latency {
				rcodes = append(rcodes, rc)
			}
			slices.Sort(rcodes)
			for _, rc := range rcodes {
				s := u.Latency[rc]
				n := s.Count()
				replies += n
				label := forwardRcode(rc)
				counter(cc.fwdResponses, n, label, u.Addr)
				histogram(cc.fwdDuration, s, u.Addr, label)
				histogram(cc.proxyDuration, s, "forward", u.Addr, label)
			}
			counter(cc.fwdRequests, replies, u.Addr)
			counter(cc.fwdHCFailures, u.ProbeFailures, u.Addr)
			counter(cc.proxyHCFailures, u.ProbeFailures, "forward", u.Addr)
		}
	}
	var fw upstream.ForwarderStats
	if src.Forwarder != nil {
		fw = src.Forwarder()
	}
	counter(cc.fwdHCBroken, fw.AllDown)
	counter(cc.fwdMaxConcurrent, fw.Overloaded)
}

// uniqueUpstreams drops repeated addresses: the same server may sit in
// several groups (default and stub domains) and must be one series.
func uniqueUpstreams(us []upstream.ServerStats) []upstream.ServerStats {
	seen := map[string]bool{}
	out := us[:0:0]
	for _, u := range us {
		if !seen[u.Addr] {
			seen[u.Addr] = true
			out = append(out, u)
		}
	}
	return out
}

// SetZones makes zones the ones CoreDNS-compatible series count query
// names under besides "." (the cluster domains, reverse zones and stub
// domains; a reload calls it with the new stub domains). A no-op when the
// compatibility series are off.
func (r *Recorder) SetZones(zones []string) {
	if r.compat != nil {
		r.compat.setZones(zones)
	}
}

func (r *Recorder) registerCompat() error {
	if r.compat == nil {
		return nil
	}
	if err := r.reg.Register(newCorednsCollector(r, r.compat)); err != nil {
		return fmt.Errorf("metrics: registering CoreDNS-compatible collector: %w", err)
	}
	return nil
}
