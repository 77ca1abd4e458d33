package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// upstreamBudget outlasts any exchange a replaced forwarder still carries
// (the forwarder's default overall budget is 5s).
const upstreamBudget = 10 * time.Second

// defaultReloadPoll is how often the config file is read for changes
// (Options.reloadPoll replaces it in tests). Reading the content (not
// watching inotify events) is what survives the symlink swap a ConfigMap
// volume does on update.
const defaultReloadPoll = 2 * time.Second

// applier puts changed settings of one apply class (the settings table,
// pkg/config, names each setting's classes) into effect in the running
// agent. prepare does the part that can fail, without changing anything (a
// reload with a failing prepare changes nothing at all); the commit it
// returns makes the change. Commits run in applierOrder; only the first
// may fail.
type applier struct {
	class   config.Apply
	prepare func(a *Agent, cfg *config.Config) (commit func() error, err error)
}

var (
	// applyCache reconfigures the cache in place (entries are kept).
	// In forward mode the cluster zone's cache takes the same settings,
	// capped by the cluster TTL (restart-only, like the index's).
	applyCache = &applier{class: config.ApplyCache, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		return func() error {
			if err := a.cache.Reconfigure(cacheConfig(*cfg, a.log)); err != nil {
				return err
			}
			if a.clusterCache != nil {
				cc := *cfg
				cc.ClusterTTL = a.cfg.ClusterTTL
				if err := a.clusterCache.Reconfigure(clusterCacheConfig(cc, a.log)); err != nil {
					a.log.Error("config reload: cluster zone cache settings rejected", "err", err)
				}
			}
			return nil
		}, nil
	}}
	// applyForwarder builds a new forwarder (reading the resolv.conf again
	// when it supplies the upstreams) and swaps it in; exchanges under way
	// finish on the old one. The stub domains are zones of the
	// CoreDNS-compatible series, so those follow.
	applyForwarder = &applier{class: config.ApplyUpstreams, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		// Under the kube-dns ConfigMap as last applied (the watch loop,
		// which runs the reloads too, is the only writer).
		fwd, err := a.newForwarder(*cfg, a.kd.applied)
		if err != nil {
			return nil, err
		}
		zones := metricZones(*cfg)
		stubs := stubZones(*cfg)
		return func() error {
			a.swapForwarder(fwd)
			a.rec.SetZones(zones)
			// Stub domains inside the forwarded cluster zones keep their
			// own servers.
			if err := a.pipe.SetRouteExcept(stubs); err != nil {
				a.log.Error("config reload: stub domains inside the forwarded cluster zones keep their old routes", "err", err)
			}
			return nil
		}, nil
	}}
	// applyHosts reads the hosts file and entries (prepare) and swaps the
	// records in (commit).
	applyHosts = &applier{class: config.ApplyHosts, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		hc := cfg.HostsSettings()
		hc.Logger = a.log
		apply, err := a.hosts.Prepare(hc)
		if err != nil {
			return nil, err
		}
		return func() error { apply(); return nil }, nil
	}}
	applyRewrite = &applier{class: config.ApplyRewrite, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		rw, err := cfg.Rewriter()
		if err != nil {
			return nil, err
		}
		return func() error {
			if rw == nil { // no rules: a nil interface, not a nil *Rewriter in one
				a.pipe.SetRewriter(nil)
			} else {
				a.pipe.SetRewriter(rw)
			}
			return nil
		}, nil
	}}
	// applyPlugins builds the CoreDNS plugins around the stages (prepare)
	// and swaps them in (commit).
	applyPlugins = &applier{class: config.ApplyPlugins, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		pl, err := a.buildPlugins(*cfg)
		if err != nil {
			return nil, err
		}
		return func() error { a.pipe.SetPlugins(pl); return nil }, nil
	}}
	applyLoadBalance = &applier{class: config.ApplyLoadBalance, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		on := cfg.LoadBalance == config.LoadBalanceRoundRobin
		return func() error { a.pipe.SetLoadBalance(on); return nil }, nil
	}}
	// applySearch replaces the search-path settings of the pipeline.
	applySearch = &applier{class: config.ApplySearch, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		zone := "cluster.local."
		if a.ix != nil {
			zone = a.ix.Zone()
		}
		search := searchDomains(*cfg, zone)
		return func() error { a.pipe.SetSearchPath(cfg.Autopath, search); return nil }, nil
	}}
	applyLogLevel = &applier{class: config.ApplyLogLevel, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		return func() error { return a.level.UnmarshalText([]byte(cfg.LogLevel)) }, nil
	}}
	applyLogQueries = &applier{class: config.ApplyQueryLog, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		return func() error { return a.rec.SetLogQueries(cfg.LogQueries) }, nil
	}}
	// applyFallback: the fallback loop computes the targets again from
	// the running configuration (fallback.go); a Service needs the index.
	applyFallback = &applier{class: config.ApplyFallback, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
		if a.ix == nil && cfg.HasFallbackServices() {
			return nil, fmt.Errorf("--fallback-dns names a Service, which needs the cluster index")
		}
		return func() error { a.kickFallback(); return nil }, nil
	}}
	// applyAtExit: the setting is read when the agent stops (lameduck,
	// teardown), from the running configuration a reload replaces.
	applyAtExit = &applier{class: config.ApplyAtExit, prepare: func(*Agent, *config.Config) (func() error, error) {
		return func() error { return nil }, nil
	}}
)

// applierOrder is the order commits run in: the one commit that can fail
// (the cache's own checks) first, so that a failure leaves nothing applied.
// Every apply class of the settings table has its applier here.
var applierOrder = []*applier{applyCache, applyForwarder, applyHosts, applyRewrite, applyPlugins, applyLoadBalance, applySearch, applyLogLevel, applyLogQueries, applyFallback, applyAtExit, applyZoneFiles}

// applierOf returns the applier of class, or nil.
func applierOf(class config.Apply) *applier {
	for _, ap := range applierOrder {
		if ap.class == class {
			return ap
		}
	}
	return nil
}

// watchConfig re-applies the configuration whenever the --config file's
// content changes, and on SIGHUP (at once, changed or not), until ctx is
// done. Without a file, SIGHUP is logged and ignored: it never stops the
// agent, as an operator used to dnsmasq or unbound may send it.
func (a *Agent) watchConfig(ctx context.Context, hup <-chan os.Signal) {
	// The content loaded at start: a change made since is a change. Only
	// its digest is kept, so a large file costs no memory between polls.
	last := a.cfg.FileSum()
	t := time.NewTicker(a.reloadPoll)
	defer t.Stop()
	var lastErr string
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-hup:
			if a.cfg.Path() == "" {
				a.log.Warn("SIGHUP: no --config file to reload; ignored")
				continue
			}
			forced = true
			a.log.Info("SIGHUP: reloading the config file", "file", a.cfg.Path())
		}
		// One pass; configPolls counts them once done (what a test waits on to
		// know a change was weighed).
		func() {
			// The kube-dns ConfigMap directory (kubelet updates it in place):
			// applied under the running configuration as it changes.
			if kd, changed := a.kd.poll(*a.running(), a.log); changed {
				a.applyKubeDNS(*a.running(), kd)
			}
			if a.cfg.Path() == "" {
				return
			}
			// Read with the file's size bound (config.ReadFile): a file over
			// it is refused without being read whole.
			b, err := config.ReadFile(a.cfg.Path())
			if err != nil {
				if err.Error() != lastErr || forced {
					if errors.Is(err, config.ErrTooLarge) {
						a.log.Error("config reload rejected; keeping the running configuration", "file", a.cfg.Path(), "err", err)
					} else {
						a.log.Warn("config file unreadable; keeping the running configuration", "file", a.cfg.Path(), "err", err)
					}
					a.reloads.failed(err)
					lastErr = err.Error()
				}
				return
			}
			sum := config.SumOf(b)
			// Readable again after an error: reload even if the content is
			// what it was, so the figures stop saying the reload failed.
			recovered := lastErr != ""
			lastErr = ""
			if sum == last && !recovered && !forced {
				return
			}
			last = sum
			a.reload()
		}()
		a.configPolls.Add(1)
	}
}

// applyKubeDNS rebuilds the forwarder with a changed kube-dns ConfigMap
// under the running configuration cfg.
func (a *Agent) applyKubeDNS(cfg config.Config, kd kubedns.Config) {
	fwd, err := a.newForwarder(cfg, kd)
	if err != nil {
		a.log.Warn("kube-dns config not applied; keeping the running settings", "dir", cfg.KubeDNSConfig, "err", err)
		return
	}
	a.kd.applied = kd
	a.swapForwarder(fwd)
	a.log.Info("kube-dns config applied", "dir", cfg.KubeDNSConfig, "stub_domains", len(kd.StubDomains), "upstream_nameservers", len(kd.UpstreamNameservers))
}

// notifyHUP delivers SIGHUP to the returned channel (instead of letting
// it end the process) until stop is called.
func notifyHUP() (hup <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c, func() { signal.Stop(c) }
}

// reload reads the configuration again (the file, then the command line
// over it) and applies what changed, or nothing: the whole configuration
// is validated, and every change prepared, before any of it is applied.
// What a reload can apply is declared per setting (pkg/config); a change to
// a setting read only at start is logged as one warning naming the keys,
// and the running value is kept (so the next reload warns again). Sockets
// are not touched, so no query is dropped.
func (a *Agent) reload() {
	old := a.running()
	cfg, res, err := config.Parse(a.args, false, nil)
	if err == nil {
		err = res.Err()
	}
	for _, w := range res.Warnings {
		a.log.Warn(w) // each names the file
	}
	if err != nil {
		a.log.Error("config reload rejected; keeping the running configuration", "file", old.Path(), "err", err)
		a.reloads.failed(err)
		return
	}
	var live, restart, overridden []string
	var todo []*applier
	for _, s := range config.Settings() {
		if s.OverriddenChange(old, &cfg) {
			overridden = append(overridden, s.Key())
		}
		if !s.Differs(old, &cfg) {
			continue
		}
		if !s.Live() {
			restart = append(restart, s.Key())
			s.CopyFrom(&cfg, old)
			continue
		}
		live = append(live, s.Key())
		for _, class := range s.Applies() {
			if ap := applierOf(class); !containsApplier(todo, ap) {
				todo = append(todo, ap)
			}
		}
	}
	commits := make([]func() error, 0, len(todo))
	for _, ap := range applierOrder {
		if !containsApplier(todo, ap) {
			continue
		}
		commit, err := ap.prepare(a, &cfg)
		if err != nil {
			a.log.Error("config reload rejected; keeping the running configuration", "file", old.Path(), "applying", string(ap.class), "err", err)
			a.reloads.failed(err)
			return
		}
		commits = append(commits, commit)
	}
	for i, commit := range commits {
		if err := commit(); err != nil {
			// Only the first commit can fail (applierOrder): nothing was
			// applied.
			a.log.Error("config reload rejected; keeping the running configuration", "file", old.Path(), "err", err)
			a.reloads.failed(err)
			if i > 0 {
				a.log.Error("config reload partly applied", "keys", live)
			}
			return
		}
	}
	a.live.Store(&cfg)
	if len(overridden) > 0 {
		a.log.Warn("config file changes overridden by command-line flags", "file", cfg.Path(), "keys", strings.Join(overridden, ","))
	}
	if len(restart) > 0 {
		a.log.Warn("config changes need a restart to take effect; running with the old values", "file", cfg.Path(), "keys", strings.Join(restart, ","))
	}
	a.log.Info("configuration reloaded", "file", cfg.Path(), "applied", strings.Join(live, ","))
	a.reloads.succeeded(restart)
}

func containsApplier(list []*applier, ap *applier) bool {
	for _, x := range list {
		if x == ap {
			return true
		}
	}
	return false
}

// running is the configuration in effect: the start configuration, as
// replaced by each reload (restart-only settings keep their start values).
func (a *Agent) running() *config.Config { return a.live.Load() }

// swapForwarder makes fwd the upstream; the old forwarder keeps probing
// until the exchanges it carries are past their budget, then stops.
//
// Answers of the old servers do not outlive the change: the cache drops
// the entries of every name fwd sends elsewhere or otherwise
// (upstream.Moved: the default servers, a stub domain's, a shared
// setting), stale ones included, and stores nothing from the exchanges
// still under way on the old forwarder; the pipeline drops the
// search-path decisions made from the old answers. The entries of zones
// whose servers did not change stay. (CoreDNS and NodeLocal DNSCache start
// an empty cache on every reload.) The log line comes last: the change is
// whole once it is written.
func (a *Agent) swapForwarder(fwd *upstream.Forwarder) {
	old := a.fwd.Load()
	ctx, cancel := context.WithCancel(a.runCtx)
	go fwd.Run(ctx)
	a.cache.SetExchanger(fwd)
	a.fwd.Store(fwd)
	dropped := a.cache.Forget(upstream.Moved(old, fwd))
	a.pipe.Invalidate()
	time.AfterFunc(upstreamBudget, a.stopFwd)
	a.stopFwd = cancel
	a.log.Info("upstreams replaced", "servers", len(fwd.Servers()), "cache_entries_dropped", dropped)
}

// reloadStats are the reload figures: nodedns_config_reloads_total{result}
// and friends, for the "config reload failed" alert.
type reloadStats struct {
	total       *prometheus.CounterVec
	lastOK      prometheus.Gauge
	lastSuccess prometheus.Gauge
	pending     prometheus.Gauge
	// failures counts rejected reloads, for coredns_reload_failed_total.
	failures atomic.Uint64
}

func newReloadStats() *reloadStats {
	r := &reloadStats{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodedns_config_reloads_total",
			Help: "Reloads of the --config file after it changed, by result: success (applied; restart-only changes are kept for the next start), failure (rejected, nothing applied)."},
			[]string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodedns_config_last_reload_successful",
			Help: "1 when the last reload of the --config file was applied (or none happened yet), 0 when it was rejected."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodedns_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last applied reload, or of the start."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodedns_config_restart_pending_keys",
			Help: "Settings changed in the --config file that take effect only at the next start (the log names them)."}),
	}
	r.total.WithLabelValues("success")
	r.total.WithLabelValues("failure")
	r.lastOK.Set(1)
	r.lastSuccess.SetToCurrentTime()
	return r
}

func (r *reloadStats) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.total, r.lastOK, r.lastSuccess, r.pending}
}

func (r *reloadStats) succeeded(restartPending []string) {
	r.total.WithLabelValues("success").Inc()
	r.lastOK.Set(1)
	r.lastSuccess.SetToCurrentTime()
	r.pending.Set(float64(len(restartPending)))
}

func (r *reloadStats) failed(error) {
	r.failures.Add(1)
	r.total.WithLabelValues("failure").Inc()
	r.lastOK.Set(0)
}
