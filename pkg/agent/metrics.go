package agent

import (
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// newRecorder wires the agent's figures into pkg/observe/metrics. Every source is
// a closure over the agent, read at scrape time, so a forwarder swapped by
// a reload is the one reported. Call it after wireCluster: the plugins it
// reports depend on whether the cluster zone is served.
func (a *Agent) newRecorder() (*metrics.Recorder, error) {
	return metrics.New(metrics.Config{Version: a.version, Revision: a.revision, LogQueries: a.cfg.LogQueries, LogClasses: a.cfg.LogQueriesClass, Logger: a.log,
		Compat: metrics.Compat(a.cfg.MetricsCompat), Listeners: a.cfg.ListenAddrs(), Zones: metricZones(a.cfg), Plugins: a.plugins(),
		Namespaces: a.cfg.MetricsNamespaces,
		Sources: metrics.Sources{
			Pod: func(ip netip.Addr) (metrics.PodInfo, bool) {
				if a.ix == nil {
					return metrics.PodInfo{}, false
				}
				p, ok := a.ix.PodOf(ip)
				return metrics.PodInfo{Namespace: p.Namespace, Name: p.Name, Kind: p.OwnerKind, Workload: p.OwnerName}, ok
			},
			Search: a.searchPath,
			Dnstap: a.tapStats,
			Cache:  func() cache.Stats { return a.cache.Stats() },
			Upstreams: func() []upstream.ServerStats {
				var out []upstream.ServerStats
				for _, s := range a.fwd.Load().Servers() {
					out = append(out, s.Stats())
				}
				others := a.views
				if a.clusterFwd != nil { // --cluster-dns, unless also an upstream
					others = append([]agentView{{fwd: a.clusterFwd}}, others...)
				}
				for _, v := range others { // and the views' servers
					for _, s := range v.fwd.Servers() {
						if !slices.ContainsFunc(out, func(f upstream.ServerStats) bool { return f.Addr == s.Addr }) {
							out = append(out, s.Stats())
						}
					}
				}
				return out
			},
			Forwarder: func() upstream.ForwarderStats { return a.fwd.Load().Stats() },
			Server:    func() server.Stats { return a.srv.Stats() },
			Intercept: func() intercept.Status {
				if a.ic == nil {
					return intercept.Status{} // not enabled
				}
				return a.ic.Status()
			},
			Peers: a.peerFigures,
			Informers: func() k8s.Stats {
				if a.ix == nil {
					return k8s.Stats{} // not enabled
				}
				return a.ix.Stats()
			},
			ConfigErrors: a.reloads.failures.Load,
			Supervisor:   a.supervisorSource(),
		}})
}

// searchPath is the cluster domain and the node's search domains pods walk
// after it, as the running configuration has them, for the search-path
// report.
func (a *Agent) searchPath() (string, []string) {
	cfg := a.running()
	if cfg == nil {
		cfg = &a.cfg
	}
	zones := cfg.ClusterZones()
	if len(zones) == 0 {
		return "", nil
	}
	return zones[0], searchDomains(*cfg, zones[0])
}

// metricZones are the zones the CoreDNS-compatible series count queries
// under besides ".": the server blocks of NodeLocal DNSCache's Corefile
// (the cluster domains, the reverse zones) and one per stub domain.
func metricZones(cfg config.Config) []string {
	zones := append([]string{"in-addr.arpa.", "ip6.arpa."}, cfg.ClusterDomain...)
	for z := range cfg.Stubs {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	return zones
}

// plugins are the CoreDNS plugins whose work the agent does as configured
// (coredns_plugin_enabled).
func (a *Agent) plugins() []string {
	p := []string{"bind", "cache", "errors", "forward", "health", "prometheus", "ready"}
	if a.ix != nil {
		p = append(p, "kubernetes")
		if a.cfg.Autopath && a.cfg.NodeName != "" {
			p = append(p, "autopath")
		}
	}
	if a.cfg.LoopCheck {
		p = append(p, "loop")
	}
	if a.cfg.Path() != "" {
		p = append(p, "reload")
	}
	if a.cfg.LogQueries > 0 {
		p = append(p, "log")
	}
	for _, on := range []struct {
		plugin string
		on     bool
	}{{"local", a.cfg.Local}, {"chaos", a.cfg.Chaos}, {"acl", len(a.cfg.ACL) > 0}, {"template", len(a.cfg.Templates) > 0},
		{"header", a.cfg.Header != nil}, {"minimal", a.cfg.MinimalResponses}, {"dnstap", len(a.cfg.Dnstap) > 0}, {"view", len(a.cfg.Views) > 0}} {
		if on.on {
			p = append(p, on.plugin)
		}
	}
	slices.Sort(p)
	return p
}

// adminCollectors report the admin endpoint's connection bounds (its TCP
// address is reachable from the network: a refusal or an eviction there
// is someone holding connections).
func adminCollectors(s *admin.Server) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nodedns_admin_connections",
			Help: "Open TCP connections of the admin endpoint (bounded in all and per client address)."},
			func() float64 { return float64(s.ConnStats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodedns_admin_connections_refused_total",
			Help: "TCP connections of the admin endpoint closed at once: their client address held its share, or the endpoint was full."},
			func() float64 { return float64(s.ConnStats().Refused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodedns_admin_connections_evicted_total",
			Help: "TCP connections of the admin endpoint closed to make room, at the bound, for a client address holding fewer."},
			func() float64 { return float64(s.ConnStats().Evicted) }),
	}
}
