package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"reflect"
	"time"

	"github.com/nodedns/nodedns/pkg/upstream"
)

// upstreamBudget outlasts any exchange a replaced forwarder still carries
// (the forwarder's default overall budget is 5s).
const upstreamBudget = 10 * time.Second

// reloadPoll is how often the config file is read for changes. Reading
// the content (not watching inotify events) is what survives the symlink
// swap a ConfigMap volume does on update.
var reloadPoll = 2 * time.Second

// watchConfig re-applies the configuration whenever the --config file's
// content changes, until ctx is done.
func (a *agent) watchConfig(ctx context.Context) {
	if a.cfg.path == "" {
		return
	}
	// cur is the running configuration as far as reloads go; only this
	// goroutine reads or writes it.
	cur := a.cfg
	last, _ := os.ReadFile(a.cfg.path)
	t := time.NewTicker(reloadPoll)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(a.cfg.path)
		if err != nil {
			if err.Error() != lastErr {
				a.log.Warn("config file unreadable; keeping the running configuration", "file", a.cfg.path, "err", err)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		if bytes.Equal(b, last) {
			continue
		}
		last = b
		cur = a.reload(cur)
	}
}

// reload reads the configuration again and applies what can change while
// serving: upstreams and stub domains, cache size and TTL bounds,
// serve-stale and prefetch, search domains and autopath, log level. Sockets
// are not touched, so no query is dropped. A bad file changes nothing.
func (a *agent) reload(old Config) Config {
	cfg, err := loadConfig(a.args, io.Discard)
	if err != nil {
		a.log.Error("config reload rejected; keeping the running configuration", "err", err)
		return old
	}
	if !reflect.DeepEqual([]any{cfg.Upstream, cfg.Stubs, cfg.Policy}, []any{old.Upstream, old.Stubs, old.Policy}) {
		fwd, err := newForwarder(cfg, a.log)
		if err != nil {
			a.log.Error("config reload rejected; keeping the running configuration", "err", err)
			return old
		}
		a.swapForwarder(fwd)
	}
	if err := a.cache.Reconfigure(cacheConfig(cfg, a.log)); err != nil {
		a.log.Error("config reload: cache settings rejected", "err", err)
		return old
	}
	zone := "cluster.local."
	if a.ix != nil {
		zone = a.ix.Zone()
	}
	a.srv.SetSearchPath(cfg.Autopath, searchDomains(cfg, zone))
	_ = a.level.UnmarshalText([]byte(cfg.LogLevel))
	for _, name := range restartOnly(old, cfg) {
		a.log.Warn("config change needs a restart to apply", "setting", name)
	}
	// Keep the running values of what was not applied, so the next reload
	// warns again rather than forgetting.
	cfg.Listen, cfg.LocalIP, cfg.Admin, cfg.AdminSocket = old.Listen, old.LocalIP, old.Admin, old.AdminSocket
	cfg.Kubeconfig, cfg.ClusterDomain, cfg.ClusterTTL, cfg.Pods, cfg.ClusterDNS, cfg.NodeName = old.Kubeconfig, old.ClusterDomain, old.ClusterTTL, old.Pods, old.ClusterDNS, old.NodeName
	cfg.Interface, cfg.SetupInterface, cfg.SetupIptables, cfg.SyncInterval = old.Interface, old.SetupInterface, old.SetupIptables, old.SyncInterval
	cfg.MaxInflight, cfg.MaxTCPConns, cfg.MaxUDPSize = old.MaxInflight, old.MaxTCPConns, old.MaxUDPSize
	cfg.MaxClientInflight = old.MaxClientInflight
	cfg.LogFormat, cfg.Pprof = old.LogFormat, old.Pprof
	cfg.LogQueries, cfg.LogQueriesClass = old.LogQueries, old.LogQueriesClass
	cfg.EndpointPodNames, cfg.IgnoreEmptyService, cfg.NoEndpoints = old.EndpointPodNames, old.IgnoreEmptyService, old.NoEndpoints
	cfg.Namespaces, cfg.NamespaceLabels, cfg.Fallthrough = old.Namespaces, old.NamespaceLabels, old.Fallthrough
	a.log.Info("configuration reloaded", "file", cfg.path)
	return cfg
}

// swapForwarder makes fwd the upstream; the old forwarder keeps probing
// until the exchanges it carries are past their budget, then stops.
func (a *agent) swapForwarder(fwd *upstream.Forwarder) {
	ctx, cancel := context.WithCancel(a.runCtx)
	go fwd.Run(ctx)
	a.cache.SetExchanger(fwd)
	a.fwd.Store(fwd)
	time.AfterFunc(upstreamBudget, a.stopFwd)
	a.stopFwd = cancel
	a.log.Info("upstreams replaced", "servers", len(fwd.Servers()))
}

// restartOnly lists the settings that differ between a and b but apply
// only at start.
func restartOnly(a, b Config) []string {
	pairs := []struct {
		name string
		x, y any
	}{
		{"listen", a.Listen, b.Listen}, {"local-ip", a.LocalIP, b.LocalIP}, {"admin", a.Admin, b.Admin},
		{"admin-socket", a.AdminSocket, b.AdminSocket}, {"kubeconfig", a.Kubeconfig, b.Kubeconfig},
		{"cluster-domain", a.ClusterDomain, b.ClusterDomain}, {"cluster-ttl", a.ClusterTTL, b.ClusterTTL},
		{"pods", a.Pods, b.Pods}, {"cluster-dns", a.ClusterDNS, b.ClusterDNS}, {"node-name", a.NodeName, b.NodeName},
		{"interface", a.Interface, b.Interface}, {"setup-interface", a.SetupInterface, b.SetupInterface},
		{"setup-iptables", a.SetupIptables, b.SetupIptables}, {"sync-interval", a.SyncInterval, b.SyncInterval},
		{"max-inflight", a.MaxInflight, b.MaxInflight}, {"max-tcp-conns", a.MaxTCPConns, b.MaxTCPConns},
		{"max-udp-size", a.MaxUDPSize, b.MaxUDPSize}, {"max-client-inflight", a.MaxClientInflight, b.MaxClientInflight},
		{"endpoint-pod-names", a.EndpointPodNames, b.EndpointPodNames},
		{"ignore-empty-service", a.IgnoreEmptyService, b.IgnoreEmptyService},
		{"no-endpoints", a.NoEndpoints, b.NoEndpoints}, {"namespaces", a.Namespaces, b.Namespaces},
		{"namespace-labels", a.NamespaceLabels, b.NamespaceLabels}, {"fallthrough", a.Fallthrough, b.Fallthrough},
		{"log-format", a.LogFormat, b.LogFormat}, {"pprof", a.Pprof, b.Pprof},
		{"log-queries", a.LogQueries, b.LogQueries}, {"log-queries-class", a.LogQueriesClass, b.LogQueriesClass},
	}
	var out []string
	for _, p := range pairs {
		if !reflect.DeepEqual(p.x, p.y) {
			out = append(out, p.name)
		}
	}
	return out
}
