package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodedns/nodedns/pkg/intercept"
)

// collector turns the Recorder's counters and the Sources into Prometheus
// metrics at scrape time: each source func is called once per scrape.
type collector struct {
	r *Recorder

	buildInfo *prometheus.Desc

	requests, duration *prometheus.Desc

	cacheEntries, cacheCapacity, cacheHits, cacheMisses *prometheus.Desc
	cacheEvictions, cacheStale, cachePrefetches         *prometheus.Desc
	cacheBytes, cacheMaxBytes, cacheTooLarge            *prometheus.Desc

	upRequests, upFailures, upUp, upDuration, upProbeFailures *prometheus.Desc
	upCoalesced, upOverloaded, upClientLimited, upAllDown     *prometheus.Desc

	apShortcuts, apSteps, apSaved *prometheus.Desc

	queryLogSuppressed *prometheus.Desc

	icEnabled, icRepairs, icPresent, icWanted, icErrors *prometheus.Desc
	icFallback, icFallbackTargets, icFallbackFlows      *prometheus.Desc

	infEnabled, infSynced, infObjects *prometheus.Desc

	srvOverloaded, srvClientLimited, srvPanics, srvInflight, srvTCP *prometheus.Desc
	srvTCPClientLimited, srvTCPEvicted                              *prometheus.Desc

	srvReaders, srvReadersLive, srvReaderRestarts *prometheus.Desc

	peerServers *prometheus.Desc

	tapConnected, tapSent, tapDropped, tapLost, tapReconnects, tapQueued, tapQueuedBytes *prometheus.Desc

	ns nsDescs
}

func newCollector(r *Recorder) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("nodedns_"+name, help, labels, nil)
	}
	return &collector{
		r:         r,
		buildInfo: d("build_info", "Always 1; labelled with the agent's version and Go version.", "version", "goversion"),

		requests: d("requests_total", "Answered DNS requests by the stage that answered (source) and response code.", "source", "rcode"),
		duration: d("request_duration_seconds", "Time from reading a request to answering it, by source.", "source"),

		cacheEntries:    d("cache_entries", "Entries in the cache."),
		cacheCapacity:   d("cache_capacity", "Maximum entries in the cache."),
		cacheHits:       d("cache_hits_total", "Cache lookups answered from the cache."),
		cacheMisses:     d("cache_misses_total", "Cache lookups that went upstream."),
		cacheEvictions:  d("cache_evictions_total", "Entries evicted from the full cache."),
		cacheStale:      d("cache_stale_served_total", "Expired answers served because the upstream failed."),
		cachePrefetches: d("cache_prefetches_total", "Entries refreshed before they expired."),
		cacheBytes:      d("cache_bytes", "Bytes held by the cache's entries (replies in wire form plus a fixed overhead each)."),
		cacheMaxBytes:   d("cache_max_bytes", "Maximum bytes held by the cache (--cache-max-bytes)."),
		cacheTooLarge:   d("cache_too_large_total", "Replies answered but not cached for their size."),

		upRequests: d("upstream_requests_total", "Exchanges sent to an upstream server.", "upstream"),
		upFailures: d("upstream_failures_total", "Exchanges with an upstream server that failed.", "upstream"),
		upUp:       d("upstream_up", "1 when the upstream server is considered healthy, 0 when marked down.", "upstream"),
		// A histogram, not quantile gauges: buckets add up across nodes
		// and upstreams, quantiles do not.
		upDuration:      d("upstream_request_duration_seconds", "Duration of exchanges with an upstream server that got a reply, by the reply's rcode.", "upstream", "rcode"),
		upProbeFailures: d("upstream_probe_failures_total", "Health probes of an upstream server marked down that failed.", "upstream"),
		upCoalesced:     d("upstream_coalesced_total", "Queries answered by joining an identical exchange already in flight."),
		upOverloaded:    d("upstream_overloaded_total", "Queries refused because the bound on upstream exchanges in flight was reached."),
		upClientLimited: d("upstream_client_limited_total", "Of upstream_overloaded_total, the queries refused because their client or namespace held its share of the bound."),
		upAllDown:       d("upstream_all_down_total", "Exchanges that found every upstream server of their zone marked down (and tried them anyway)."),

		apShortcuts: d("autopath_shortcuts_total", "Search-path walks done by the agent that saved the client at least one query."),
		apSteps:     d("autopath_steps_total", "Search-path expansions the agent resolved on behalf of clients."),
		apSaved:     d("autopath_queries_saved_total", "Client queries (round trips) saved by search-path walks."),

		icEnabled:         d("intercept_enabled", "1 when the agent manages the interception link and rules."),
		icRepairs:         d("intercept_repairs_total", "Things put back by interception reconcile passes (link, address, rule)."),
		icPresent:         d("intercept_rules_present", "Interception rules found in place after the last reconcile pass."),
		icWanted:          d("intercept_rules_wanted", "Interception rules the agent wants in place."),
		icErrors:          d("intercept_errors_total", "Failures putting the interception link and rules in place, by kind (iptables, iptables_lock, interface_add, interface_check).", "kind"),
		icFallback:        d("intercept_fallback_state", "1 for the DNS fallback's state, 0 for the others: off (none), unavailable (the kernel refused the socket match), waiting (no targets set yet), on.", "state"),
		icFallbackTargets: d("intercept_fallback_targets", "Servers the DNS fallback sends queries to while no process holds the agent's sockets, by address family.", "family"),
		icFallbackFlows:   d("intercept_fallback_flows_total", "Flows the DNS fallback redirected (queries no socket served), by address family, as the kernel counted them; read at every sync pass, so those of a time when no agent ran are counted by the next agent.", "family"),

		infEnabled: d("informer_enabled", "1 when the cluster zone is served from Kubernetes informers."),
		infSynced:  d("informer_synced", "1 once the informers have synced and cluster answers are authoritative."),
		infObjects: d("informer_objects", "Objects held by the cluster index, by kind.", "kind"),

		srvOverloaded:    d("server_overloaded_total", "Requests answered SERVFAIL at once because too many were in flight."),
		srvClientLimited: d("server_client_limited_total", "Requests answered SERVFAIL at once because their client held its share of the in-flight bound."),
		srvPanics:        d("server_panics_total", "Panics recovered in the agent: answering requests, and background work (prefetch, stale refresh, shared upstream exchanges)."),
		srvInflight:      d("server_inflight_requests", "Requests being resolved off the socket readers."),
		srvTCP:           d("server_tcp_connections", "Open client TCP connections."),

		srvTCPClientLimited: d("server_tcp_client_limited_total", "Client TCP connections closed at once because their client held its share of the connection bound with none stalled."),
		srvTCPEvicted:       d("server_tcp_evicted_total", "Stalled client TCP connections (idle, or with a message not arriving, for 100 ms) closed to make room for a new one at the connection bound."),

		srvReaders:        d("server_udp_readers", "UDP socket readers the agent runs (sockets per address x listen addresses)."),
		srvReadersLive:    d("server_udp_readers_live", "UDP socket readers reading now; below server_udp_readers while a failed reader is being restarted."),
		srvReaderRestarts: d("server_udp_reader_restarts_total", "UDP socket readers restarted after their socket failed or they panicked."),

		queryLogSuppressed: d("query_log_suppressed_total", "Query log lines held back by the log's bounds (1,000 lines a second, 125 per client address)."),

		ns: newNSDescs(d),

		tapConnected:   d("dnstap_connected", "1 while the dnstap collector is connected.", "socket"),
		tapSent:        d("dnstap_sent_total", "dnstap messages written to the collector.", "socket"),
		tapDropped:     d("dnstap_dropped_total", "dnstap messages dropped because the queue to the collector was full (a slow collector, or none).", "socket"),
		tapLost:        d("dnstap_lost_total", "dnstap messages queued or written when the connection to the collector failed.", "socket"),
		tapReconnects:  d("dnstap_reconnects_total", "Connections to the dnstap collector made again after one failed.", "socket"),
		tapQueued:      d("dnstap_queued_messages", "dnstap messages waiting for the collector.", "socket"),
		tapQueuedBytes: d("dnstap_queued_bytes", "Bytes of the dnstap messages waiting for the collector.", "socket"),

		peerServers: d("peer_servers", "Other processes serving the agent's DNS addresses (per address and protocol), by kind: nodedns (another agent, as in a rolling update), foreign (another DNS server: the agent is not ready), unidentified.", "kind"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.buildInfo, c.requests, c.duration,
		c.cacheEntries, c.cacheCapacity, c.cacheHits, c.cacheMisses, c.cacheEvictions, c.cacheStale, c.cachePrefetches,
		c.cacheBytes, c.cacheMaxBytes, c.cacheTooLarge,
		c.upRequests, c.upFailures, c.upUp, c.upDuration, c.upProbeFailures, c.upCoalesced, c.upOverloaded, c.upClientLimited, c.upAllDown,
		c.apShortcuts, c.apSteps, c.apSaved, c.queryLogSuppressed,
		c.icEnabled, c.icRepairs, c.icPresent, c.icWanted, c.icErrors, c.icFallback, c.icFallbackTargets, c.icFallbackFlows, c.infEnabled, c.infSynced, c.infObjects,
		c.srvOverloaded, c.srvClientLimited, c.srvPanics, c.srvInflight, c.srvTCP, c.srvTCPClientLimited, c.srvTCPEvicted,
		c.srvReaders, c.srvReadersLive, c.srvReaderRestarts, c.peerServers,
		c.tapConnected, c.tapSent, c.tapDropped, c.tapLost, c.tapReconnects, c.tapQueued, c.tapQueuedBytes} {
		ch <- d
	}
	if c.r.ns != nil {
		for _, d := range c.ns.all() {
			ch <- d
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.buildInfo, 1, r.cfg.Version, runtime.Version())

	// Only the (source, rcode) pairs seen are exported: series appear on
	// their first answer, as a labelled counter's would.
	for s := range numSources {
		for rc := range numRcodes {
			if v := r.answers[s][rc].Load(); v > 0 {
				counter(c.requests, v, sourceNames[s], rcodeNames[rc])
			}
		}
		if n, sum, b := r.durations[s].snapshot(); n > 0 {
			ch <- prometheus.MustNewConstHistogram(c.duration, n, sum, b, sourceNames[s])
		}
	}
	counter(c.apShortcuts, r.apShortcuts.Load())
	counter(c.apSteps, r.apSteps.Load())
	counter(c.apSaved, r.apSaved.Load())
	counter(c.queryLogSuppressed, r.QueryLogSuppressed())
	if r.ns != nil {
		c.ns.collect(r.ns, ch)
	}

	src := r.cfg.Sources
	if src.Cache != nil {
		cf := src.Cache()
		gauge(c.cacheEntries, float64(cf.Entries))
		gauge(c.cacheCapacity, float64(cf.Capacity))
		gauge(c.cacheBytes, float64(cf.Bytes))
		gauge(c.cacheMaxBytes, float64(cf.MaxBytes))
		counter(c.cacheTooLarge, cf.TooLarge)
		counter(c.cacheHits, cf.Hits)
		counter(c.cacheMisses, cf.Misses)
		counter(c.cacheEvictions, cf.Evictions)
		counter(c.cacheStale, cf.StaleServed)
		counter(c.cachePrefetches, cf.Prefetches)
	}
	if src.Upstreams != nil {
		for _, u := range uniqueUpstreams(src.Upstreams()) {
			counter(c.upRequests, u.Requests, u.Addr)
			counter(c.upFailures, u.Failures, u.Addr)
			counter(c.upProbeFailures, u.ProbeFailures, u.Addr)
			gauge(c.upUp, b2f(u.Up), u.Addr)
			for rc, s := range u.Latency {
				label := "OTHER"
				if rc >= 0 {
					label = rcodeName(rc)
				}
				ch <- prometheus.MustNewConstHistogram(c.upDuration, s.Count(), s.Sum, s.Cumulative(), u.Addr, label)
			}
		}
	}
	if src.Forwarder != nil {
		fw := src.Forwarder()
		counter(c.upCoalesced, fw.Coalesced)
		counter(c.upOverloaded, fw.Overloaded)
		counter(c.upClientLimited, fw.ClientLimited)
		counter(c.upAllDown, fw.AllDown)
	}
	if src.Dnstap != nil {
		for _, t := range src.Dnstap() {
			gauge(c.tapConnected, b2f(t.Connected), t.Socket)
			counter(c.tapSent, t.Sent, t.Socket)
			counter(c.tapDropped, t.Dropped, t.Socket)
			counter(c.tapLost, t.Lost, t.Socket)
			counter(c.tapReconnects, t.Reconnects, t.Socket)
			gauge(c.tapQueued, float64(t.QueuedMessages), t.Socket)
			gauge(c.tapQueuedBytes, float64(t.QueuedBytes), t.Socket)
		}
	}
	if src.Intercept != nil {
		ic := src.Intercept()
		gauge(c.icEnabled, b2f(ic.Enabled))
		counter(c.icRepairs, ic.Repairs)
		gauge(c.icPresent, float64(ic.RulesPresent))
		gauge(c.icWanted, float64(ic.RulesWanted))
		for _, k := range interceptErrorKinds {
			counter(c.icErrors, ic.Errors[k], k)
		}
		state := ic.Fallback
		if state == "" { // interception off
			state = "off"
		}
		for _, st := range fallbackStates {
			gauge(c.icFallback, b2f(state == st), st)
		}
		gauge(c.icFallbackTargets, float64(len(ic.FallbackTargets4)), "ipv4")
		gauge(c.icFallbackTargets, float64(len(ic.FallbackTargets6)), "ipv6")
		counter(c.icFallbackFlows, ic.FallbackFlows4, "ipv4")
		counter(c.icFallbackFlows, ic.FallbackFlows6, "ipv6")
	}
	if src.Informers != nil {
		inf := src.Informers()
		gauge(c.infEnabled, b2f(inf.Enabled))
		gauge(c.infSynced, b2f(inf.Synced))
		kinds := make([]string, 0, len(inf.Objects))
		for k := range inf.Objects {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			gauge(c.infObjects, float64(inf.Objects[k]), k)
		}
	}
	if src.Peers != nil {
		p := src.Peers()
		gauge(c.peerServers, float64(len(p.Agents)), "nodedns")
		gauge(c.peerServers, float64(len(p.Foreign)), "foreign")
		gauge(c.peerServers, float64(len(p.Unidentified)), "unidentified")
	}
	if src.Server != nil {
		st := src.Server()
		counter(c.srvOverloaded, st.Overloaded)
		counter(c.srvClientLimited, st.ClientLimited)
		counter(c.srvPanics, st.Panics)
		gauge(c.srvInflight, float64(st.InFlight))
		gauge(c.srvTCP, float64(st.TCPConns))
		counter(c.srvTCPClientLimited, st.TCPClientLimited)
		counter(c.srvTCPEvicted, st.TCPEvicted)
		gauge(c.srvReaders, float64(st.UDPReaders))
		gauge(c.srvReadersLive, float64(st.UDPReadersLive))
		counter(c.srvReaderRestarts, st.UDPReaderRestarts)
	}
}

// interceptErrorKinds are the kinds of intercept.Status.Errors, exported
// from the start at zero.
var interceptErrorKinds = []string{intercept.ErrIptables, intercept.ErrIptablesLock, intercept.ErrInterfaceAdd, intercept.ErrInterfaceCheck}

// fallbackStates are the values of intercept.Status.Fallback, each
// exported (the current one 1) so that an alert can name one.
var fallbackStates = []string{"off", "unavailable", "waiting", "on"}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (r *Recorder) registerCollectors() error {
	for _, c := range []prometheus.Collector{
		newCollector(r),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := r.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: registering collector: %w", err)
		}
	}
	return nil
}

// Register adds a collector to the Recorder's registry (for figures
// owned elsewhere, e.g. config reloads).
func (r *Recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: registering collector: %w", err)
	}
	return nil
}

// Handler serves /metrics from the Recorder's own registry.
func (r *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{r.cfg.Logger.With("component", "metrics")},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      r.reg,
	})
}

// promLogger adapts slog to promhttp's error log.
type promLogger struct{ l *slog.Logger }

func (p promLogger) Println(v ...any) { p.l.Warn("serving /metrics", "err", fmt.Sprint(v...)) }
