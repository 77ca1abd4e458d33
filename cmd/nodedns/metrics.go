package main

import (
	"github.com/nodedns/nodedns/pkg/metrics"
	"github.com/nodedns/nodedns/pkg/server"
)

// newRecorder wires the agent's figures into pkg/metrics. Every source is
// a closure over the agent, read at scrape time, so a forwarder swapped by
// a reload is the one reported.
func (a *agent) newRecorder() (*metrics.Recorder, error) {
	return metrics.New(metrics.Config{Version: version, LogQueries: a.cfg.LogQueries, LogClasses: a.cfg.LogQueriesClass, Logger: a.log,
		Sources: metrics.Sources{
			Cache: func() metrics.CacheFigures { return metrics.CacheFigures(a.cache.Stats()) },
			Upstreams: func() []metrics.UpstreamFigures {
				var out []metrics.UpstreamFigures
				for _, s := range a.fwd.Load().Servers() {
					out = append(out, metrics.UpstreamFigures(s.Stats()))
				}
				return out
			},
			Server: func() server.Stats { return a.srv.Stats() },
			Intercept: func() metrics.InterceptFigures {
				if a.ic == nil {
					return metrics.InterceptFigures{}
				}
				st := a.ic.Status()
				return metrics.InterceptFigures{Enabled: true, Link: st.Link, LinkType: st.LinkType, IPs: st.IPs, Backend: st.Backend,
					RulesPresent: st.RulesPresent, RulesWanted: st.RulesWanted, Repairs: st.Repairs, LastRepair: st.LastRepair, LastError: st.LastError}
			},
			Informers: func() metrics.InformerFigures {
				if a.ix == nil {
					return metrics.InformerFigures{}
				}
				st := a.ix.Stats()
				return metrics.InformerFigures{Enabled: true, Synced: st.Synced, Objects: map[string]int{
					"services": st.Services, "endpointslices": st.EndpointSlices, "namespaces": st.Namespaces,
					"pods": st.Pods, "endpoints": st.Endpoints}}
			},
		}})
}
