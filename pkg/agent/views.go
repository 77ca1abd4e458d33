package agent

import (
	"context"
	"fmt"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// agentView is one view's forwarder and the cache in front of it.
type agentView struct {
	name  string
	fwd   *upstream.Forwarder
	cache *cache.Cache
}

// buildViews builds the views of cfg (CoreDNS view blocks): each its
// forwarder, with the view's servers and forward options, and a cache of
// its own with the agent's cache settings, as each CoreDNS block has its
// own cache. Restart-only: built once.
func (a *Agent) buildViews(cfg config.Config) ([]pipeline.View, error) {
	var out []pipeline.View
	for _, v := range cfg.Views {
		cond, err := v.ViewCondition()
		if err != nil {
			return nil, fmt.Errorf("view %q: %w", v.Name, err)
		}
		fc := upstream.Config{Servers: v.Forward.Servers, Options: v.Forward.GroupOptions(""), Policy: upstream.Policy(cfg.Policy),
			CAFile: cfg.UpstreamCA, Resolver: indexResolver{ix: func() *k8s.Index { return a.ix }}, ClusterZones: cfg.ClusterZones(),
			Panics: a.panics, Tap: a.upstreamTap(), Logger: a.upLog.With("view", v.Name)}
		if fc.NameServers, err = nameResolvers(cfg, a.upLog); err != nil {
			return nil, fmt.Errorf("view %q: %w", v.Name, err)
		}
		fwd, err := upstream.New(fc)
		if err != nil {
			return nil, fmt.Errorf("view %q: forward: %w", v.Name, err)
		}
		cc := cacheConfig(cfg, a.log)
		cc.Panics = a.panics
		c, err := cache.New(cc, fwd)
		if err != nil {
			return nil, fmt.Errorf("view %q: cache: %w", v.Name, err)
		}
		a.views = append(a.views, agentView{name: v.Name, fwd: fwd, cache: c})
		out = append(out, pipeline.View{Name: v.Name, Zones: v.ViewZones(), Cond: cond, Resolver: c})
	}
	return out, nil
}

// runViews runs the views' forwarders (their health probes) until ctx
// is done; the returned function closes their caches.
func (a *Agent) runViews(ctx context.Context) func() {
	for _, v := range a.views {
		go v.fwd.Run(ctx)
	}
	return func() {
		for _, v := range a.views {
			v.cache.Close()
		}
	}
}
