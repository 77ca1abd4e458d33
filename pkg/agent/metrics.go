package agent

import (
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
	"github.com/nodedns/nodedns/pkg/query/cache"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/upstream"
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
			Cache:  func() cache.Stats { return a.cache.Stats() },
			Upstreams: func() []upstream.ServerStats {
				var out []upstream.ServerStats
				for _, s := range a.fwd.Load().Servers() {
					out = append(out, s.Stats())
				}
				if a.clusterFwd != nil { // --cluster-dns, unless also an upstream
					for _, s := range a.clusterFwd.Servers() {
						if !slices.ContainsFunc(out, func(f upstream.ServerStats) bool { return f.Addr == s.Addr }) {
							out = append(out, s.Stats())
						}
					}
				}
				return out
			},
			Forwarder: func() metrics.ForwarderFigures {
				f := a.fwd.Load()
				return metrics.ForwarderFigures{Coalesced: f.Coalesced(), Overloaded: f.Overloaded(), ClientLimited: f.ClientLimited(), AllDown: f.AllDown()}
			},
			Server: func() server.Stats { return a.srv.Stats() },
			Intercept: func() metrics.InterceptFigures {
				if a.ic == nil {
					return metrics.InterceptFigures{}
				}
				st := a.ic.Status()
				return metrics.InterceptFigures{Enabled: true, Link: st.Link, LinkType: st.LinkType, IPs: st.IPs, Backend: st.Backend,
					RulesPresent: st.RulesPresent, RulesWanted: st.RulesWanted, Repairs: st.Repairs, LastRepair: st.LastRepair, LastError: st.LastError,
					Errors: st.Errors, Fallback: st.Fallback, FallbackError: st.FallbackError, FallbackTargets4: st.FallbackTargets4,
					FallbackTargets6: st.FallbackTargets6, FallbackClusterIPs: st.FallbackClusterIPs, FallbackFlows4: st.FallbackFlows4,
					FallbackFlows6: st.FallbackFlows6, FallbackUpdates: st.FallbackUpdates}
			},
			Peers: a.peerFigures,
			Informers: func() metrics.InformerFigures {
				if a.ix == nil {
					return metrics.InformerFigures{}
				}
				st := a.ix.Stats()
				return metrics.InformerFigures{Enabled: true, Synced: st.Synced, Objects: map[string]int{
					"services": st.Services, "endpointslices": st.EndpointSlices, "namespaces": st.Namespaces,
					"pods": st.Pods, "endpoints": st.Endpoints}}
			},
			ConfigErrors: a.reloads.failures.Load,
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
		{"header", a.cfg.Header != nil}, {"minimal", a.cfg.MinimalResponses}} {
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
