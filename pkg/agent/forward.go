package agent

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// reverseZones go to the cluster DNS in forward mode, as NodeLocal
// DNSCache sends in-addr.arpa and ip6.arpa to kube-dns-upstream.
var reverseZones = []string{"in-addr.arpa.", "ip6.arpa."}

// forwardedZone stands for the cluster zone in forward mode: it answers
// nothing itself (the names go to the cluster DNS through the pipeline's
// route) and names the zone, which the search-path walk builds its list
// from.
type forwardedZone struct{ zone string }

func (f forwardedZone) Lookup(string, uint16) (stage.Result, bool) {
	return stage.Result{}, false
}

func (f forwardedZone) Zone() string { return f.zone }

// Generation never moves: nothing forwardedZone answers ever changes.
func (f forwardedZone) Generation() uint64 { return 1 }

// clusterDNSForwarder is the forwarder to --cluster-dns.
func clusterDNSForwarder(cfg config.Config, log *slog.Logger, tap upstream.Tap) (*upstream.Forwarder, error) {
	fwd, err := upstream.New(upstream.Config{Servers: []string{cfg.ClusterDNS}, Policy: upstream.Sequential,
		ForceTCP: cfg.ClusterDNSProtocol == config.ProtoTCP, Tap: tap, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--cluster-dns: %w", err)
	}
	return fwd, nil
}

// clusterCacheConfig is the cache of forwarded cluster answers: the
// agent's cache settings, with every lifetime capped at --cluster-ttl so
// that a change in the cluster shows as soon as with the local index
// (--cluster-ttl 0: nothing is kept past the reply, except to be served
// stale when the cluster DNS fails).
func clusterCacheConfig(cfg config.Config, log *slog.Logger) cache.Config {
	cc := cacheConfig(cfg, log)
	ttl := time.Duration(cfg.ClusterTTL)
	if ttl <= 0 {
		ttl = time.Nanosecond // 0 would mean the cache's default
	}
	cc.MinTTL, cc.MaxTTL, cc.MaxNegativeTTL = 0, ttl, ttl
	cc.MinNegativeTTL = min(cc.MinNegativeTTL, ttl)
	return cc
}

// wireForward is --cluster-zone forward, NodeLocal DNSCache's arrangement:
// the cluster's zones and the reverse zones go to --cluster-dns (over TCP
// unless --cluster-dns-protocol udp) through a cache of their own capped
// at the cluster TTL; everything else goes to the upstreams as usual.
// Nothing of the zone is answered from the API server; only this node's
// pods are watched (when a kubeconfig is at hand), so the search-path walk
// still runs here, asking the forwarded zone for each step.
func (a *Agent) wireForward(pcfg *pipeline.Config) error {
	fwd, err := clusterDNSForwarder(a.cfg, a.upLog, a.upstreamTap())
	if err != nil {
		return err
	}
	a.clusterFwd = fwd
	ccfg := clusterCacheConfig(a.cfg, a.log)
	ccfg.Clock = a.cacheClock
	if a.clusterCache, err = cache.New(ccfg, fwd); err != nil {
		return fmt.Errorf("cluster zone cache: %w", err)
	}
	zones := a.cfg.ClusterZones()
	// A stub domain inside a forwarded zone (10.in-addr.arpa, say) keeps
	// its own servers, as its more specific server block would in a
	// Corefile.
	// The multicluster zones too: the central DNS answers them.
	routed := append(append(append([]string(nil), zones...), a.cfg.MulticlusterZones()...), reverseZones...)
	pcfg.Route = &pipeline.Route{Zones: routed, Except: stubZones(a.cfg), Resolver: a.clusterCache}
	pcfg.Search = searchDomains(a.cfg, zones[0])
	a.log.Info("cluster zone forwarded", "zones", zones, "multicluster", a.cfg.MulticlusterZones(), "reverse", reverseZones, "cluster-dns", a.cfg.ClusterDNS,
		"protocol", a.cfg.ClusterDNSProtocol, "cache-ttl", a.cfg.ClusterTTL.String())
	if ignored := localOnlyOptions(a.cfg); len(ignored) > 0 {
		a.log.Warn("cluster zone options ignored with --cluster-zone forward: the central DNS answers the zone", "options", ignored)
	}
	// This node's pods: the search-path walk's, and the per-namespace
	// figures'.
	if !a.cfg.Autopath && a.cfg.MetricsNamespaces == 0 {
		return nil
	}
	if a.cfg.NodeName == "" {
		if a.cfg.Autopath {
			a.log.Warn("autopath needs --node-name (or $NODE_NAME) to know this node's pods: search-path walk off")
		}
		return nil
	}
	rc, err := k8s.RESTConfigContext(a.cfg.Kubeconfig, a.cfg.KubeconfigContext)
	if err != nil {
		return err
	}
	if rc == nil {
		a.log.Warn("no --kubeconfig and not running in a pod: this node's pods are unknown, search-path walk and per-namespace figures off")
		return nil
	}
	rc.UserAgent = "nodedns/" + a.version
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating Kubernetes client: %w", err)
	}
	if a.ix, err = k8s.New(client, k8s.Config{Zones: a.cfg.ClusterDomain, TTL: uint32(time.Duration(a.cfg.ClusterTTL) / time.Second),
		NodeName: a.cfg.NodeName, PodsOnly: true, Logger: a.log}); err != nil {
		return err
	}
	pcfg.Cluster, pcfg.Pods = forwardedZone{zone: zones[0]}, a.ix
	return nil
}

// localOnlyOptions lists the cluster zone options set away from their
// defaults, which only the local index applies.
func localOnlyOptions(cfg config.Config) []string {
	def := config.Default()
	var out []string
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"pods", cfg.Pods != def.Pods},
		{"endpoint-pod-names", cfg.EndpointPodNames},
		{"ignore-empty-service", cfg.IgnoreEmptyService},
		{"no-endpoints", cfg.NoEndpoints},
		{"namespaces", len(cfg.Namespaces) > 0},
		{"namespace-labels", cfg.NamespaceLabels != ""},
		{"fallthrough", !slices.Equal(cfg.Fallthrough, def.Fallthrough)},
	} {
		if o.set {
			out = append(out, o.name)
		}
	}
	return out
}

// stubZones are the zones of the stub domains.
func stubZones(cfg config.Config) []string {
	out := make([]string, 0, len(cfg.Stubs))
	for z := range cfg.Stubs {
		out = append(out, z)
	}
	return out
}
