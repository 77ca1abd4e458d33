package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/pkg/cluster/k8s"
	"github.com/nodedns/nodedns/pkg/cluster/kubedns"
	"github.com/nodedns/nodedns/pkg/node/intercept"
	"github.com/nodedns/nodedns/pkg/node/peers"
	"github.com/nodedns/nodedns/pkg/node/resolvconf"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/errlog"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/autopath"
	"github.com/nodedns/nodedns/pkg/query/cache"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/upstream"
	"github.com/nodedns/nodedns/pkg/query/zoneroute"
)

// agent holds the wired parts of a running agent.
type agent struct {
	cfg      Config
	args     []string // the command line, re-applied over the file on reload
	log      *slog.Logger
	level    *slog.LevelVar
	fwd      atomic.Pointer[upstream.Forwarder]
	cache    *cache.Cache
	srv      *server.Server
	admin    *admin.Server
	ix       *k8s.Index
	rec      *metrics.Recorder
	ic       interceptor // nil: no interception
	icfg     intercept.Config
	started  time.Time
	draining atomic.Bool
	// panics is the one count of recovered panics: server, cache and
	// forwarder (a reload's new forwarder too) share it.
	panics *recovery.Counter
	// live is the running configuration: cfg as replaced by each reload
	// (see running); reloads counts them.
	live    atomic.Pointer[Config]
	reloads *reloadStats
	// peers is the last report of other processes serving our
	// addresses (peers.go).
	peers atomic.Pointer[peers.Report]
	// runCtx is run's context; stopFwd stops the current forwarder's
	// probes (both used by the reload goroutine only, after run set them).
	runCtx  context.Context
	stopFwd context.CancelFunc
	// failures limits the warn lines written for failures (SERVFAILs sent,
	// upstream exchanges failed); upLog is the logger upstream forwarders
	// get, limited per message by it.
	failures *errlog.Limiter
	upLog    *slog.Logger
	// hosts holds the static records (none when the key is absent); a
	// reload replaces them.
	hosts *hosts.Hosts
	// clusterFwd asks --cluster-dns; clusterCache keeps its answers in
	// forward mode (forward.go). Both nil when unused.
	clusterFwd   *upstream.Forwarder
	clusterCache *cache.Cache
	router       *zoneroute.Router
	// kd is the kube-dns ConfigMap directory's state (kubedns.go).
	kd *kubeDNSState
}

// serve is `nodedns serve`. A configuration it refuses is reported as one
// plain line (the log format is not known yet); from then on everything,
// the error that ends the agent included, goes through the configured
// logger.
func serve(args []string, stderr io.Writer) error {
	cfg, res, err := load(args, false, stderr)
	if err == nil {
		err = res.err()
	}
	if err != nil {
		return err
	}
	log, level, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	useLogger(log)
	for _, w := range res.warnings {
		log.Warn(w) // each names the file
	}
	if err := serveWith(cfg, args, log, level); err != nil {
		log.Error("nodedns serve exiting", "err", err)
		return reportedError{err}
	}
	return nil
}

func serveWith(cfg Config, args []string, log *slog.Logger, level *slog.LevelVar) error {
	// The runtime's own choice honours a container CPU limit; the agent's
	// does not lower Ps to it (schedulerProcs says why). Both are logged.
	runtimeDefault := runtime.GOMAXPROCS(0)
	if n := cfg.schedulerProcs(); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := build(cfg, log)
	if err != nil {
		return err
	}
	log.Info("scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "runtimeDefault", runtimeDefault, "cpus", runtime.NumCPU())
	a.args, a.level = args, level
	return a.run(ctx)
}

// listenAddrs is --listen, or port 53 of every --local-ip.
func listenAddrs(cfg Config) []string {
	if len(cfg.Listen) > 0 {
		return cfg.Listen
	}
	var out []string
	for _, ip := range cfg.LocalIP {
		out = append(out, netip.AddrPortFrom(netip.MustParseAddr(ip), 53).String())
	}
	return out
}

// upstreams resolves the upstream list: --upstream, else the nameservers
// of /etc/resolv.conf. Our own addresses are refused in the first case
// (a configuration error) and dropped in the second (the node's
// resolv.conf may well name us).
func upstreams(cfg Config, listen []string, log *slog.Logger) ([]string, error) {
	own := map[netip.Addr]map[uint16]bool{}
	for _, l := range listen {
		ap := netip.MustParseAddrPort(l)
		if own[ap.Addr()] == nil {
			own[ap.Addr()] = map[uint16]bool{}
		}
		own[ap.Addr()][ap.Port()] = true
	}
	for _, ip := range cfg.LocalIP {
		a := netip.MustParseAddr(ip)
		if own[a] == nil {
			own[a] = map[uint16]bool{}
		}
		own[a][53] = true
	}
	isOwn := func(s string) bool {
		ap := netip.MustParseAddrPort(s)
		ports := own[ap.Addr()]
		if ports == nil && ap.Addr().IsUnspecified() {
			return false
		}
		return ports[ap.Port()]
	}
	if len(cfg.Upstream) > 0 {
		var out []string
		for _, u := range cfg.Upstream {
			sp, err := upstream.ParseServer(u)
			if err != nil {
				return nil, fmt.Errorf("--upstream: %w", err)
			}
			if !sp.ByName() && isOwn(sp.Addr.String()) {
				return nil, fmt.Errorf("--upstream %s is one of this agent's own addresses: that is a forwarding loop", u)
			}
			out = append(out, u)
		}
		return out, nil
	}
	rc, err := readResolvConf(cfg.ResolvConf, log)
	if err != nil {
		return nil, fmt.Errorf("no --upstream and %w", err)
	}
	var out []string
	for _, ip := range rc.Nameservers {
		n := netip.AddrPortFrom(ip, 53).String()
		if isOwn(n) {
			log.Info("dropping our own address from resolv.conf upstreams", "server", n, "file", cfg.ResolvConf)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no --upstream and %s names no usable nameserver (%d skipped as malformed, %d of this agent's own)",
			cfg.ResolvConf, len(rc.Problems), len(rc.Nameservers))
	}
	return out, nil
}

// readResolvConf reads the node's resolver configuration; every line
// skipped as malformed is logged as a warning naming the file and line.
func readResolvConf(path string, log *slog.Logger) (resolvconf.File, error) {
	rc, err := resolvconf.ReadFile(path)
	if err != nil {
		return rc, err
	}
	for _, p := range rc.Problems {
		log.Warn("skipping a malformed line of resolv.conf", "file", path, "line", p.Line, "text", p.Text, "err", p.Err)
	}
	return rc, nil
}

// searchDomains is --search, else the node's own search domains from
// resolv.conf (those after the cluster's).
func searchDomains(cfg Config, zone string) []string {
	if cfg.isGiven("search") {
		return autopath.Search(cfg.Search, zone)
	}
	rc, err := resolvconf.ReadFile(cfg.ResolvConf)
	if err != nil {
		return nil
	}
	return autopath.Search(rc.Search, zone)
}

// newForwarder builds the upstream forwarder of cfg, with the kube-dns
// ConfigMap's settings under it; its failures are logged through the
// rate limiter and its recovered panics count with the agent's.
func (a *agent) newForwarder(cfg Config, kd kubedns.Config) (*upstream.Forwarder, error) {
	var ups []string
	var err error
	if len(cfg.Upstream) == 0 && len(kd.UpstreamNameservers) > 0 {
		// The ConfigMap's upstreams replace the node's resolvers.
		c := cfg
		c.Upstream = kd.UpstreamNameservers
		if ups, err = upstreams(c, listenAddrs(cfg), a.upLog); err != nil {
			return nil, fmt.Errorf("kube-dns config %s: %w", kubedns.UpstreamNameserversKey, err)
		}
	} else if ups, err = upstreams(cfg, listenAddrs(cfg), a.upLog); err != nil {
		return nil, err
	}
	res := indexResolver{ix: func() *k8s.Index { return a.ix }}
	fc := forwarderConfig(cfg, ups, kd, res, a.upLog)
	fc.Panics = a.panics
	return upstream.New(fc)
}

// cacheConfig maps cfg onto the cache's settings (0 disables prefetch and
// serve-stale on the command line; the cache spells that -1).
func cacheConfig(cfg Config, log *slog.Logger) cache.Config {
	prefetch := cfg.Prefetch
	if prefetch == 0 {
		prefetch = -1
	}
	stale := time.Duration(cfg.ServeStale)
	if stale == 0 {
		stale = -1
	}
	return cache.Config{Size: cfg.CacheSize, MaxBytes: int64(cfg.CacheMaxBytes), MinTTL: time.Duration(cfg.MinTTL), MaxTTL: time.Duration(cfg.MaxTTL),
		MaxNegativeTTL: time.Duration(cfg.MaxNegativeTTL), StaleFor: stale, PrefetchHits: prefetch, Logger: log}
}

func build(cfg Config, log *slog.Logger) (*agent, error) {
	a := &agent{cfg: cfg, log: log, started: time.Now(), reloads: newReloadStats(), panics: new(recovery.Counter),
		kd: newKubeDNSState(cfg.KubeDNSConfig)}
	a.live.Store(&cfg)
	a.failures = errlog.New(log, errlog.Config{})
	a.upLog = slog.New(a.failures.Handler(log.Handler()))
	kd, _ := a.kd.poll(cfg, log)
	fwd, err := a.newForwarder(cfg, kd)
	if err != nil {
		if kd.Empty() {
			return nil, err
		}
		log.Warn("kube-dns config not applied; starting without it", "dir", cfg.KubeDNSConfig, "err", err)
		if fwd, err = a.newForwarder(cfg, kubedns.Config{}); err != nil {
			return nil, err
		}
		kd = kubedns.Config{}
	}
	a.kd.applied = kd
	a.fwd.Store(fwd)
	ccfg := cacheConfig(cfg, log)
	ccfg.Panics = a.panics
	a.cache, err = cache.New(ccfg, fwd)
	if err != nil {
		return nil, err
	}
	hc := hostsConfig(cfg.Hosts)
	hc.Logger = log
	if a.hosts, err = hosts.New(hc); err != nil {
		return nil, err
	}
	rw, err := newRewriter(cfg.Rewrite)
	if err != nil {
		return nil, err
	}
	listen := listenAddrs(cfg)
	scfg := server.Config{Panics: a.panics, Failures: a.failures, Hosts: a.hosts, LoadBalance: cfg.LoadBalance == loadBalanceRoundRobin, Listen: listen, Resolver: a.cache, HitCache: a.cache, Autopath: cfg.Autopath,
		MaxInflight: cfg.MaxInflight, MaxClientInflight: cfg.MaxClientInflight, MaxTCPConns: cfg.MaxTCPConns, MaxUDPSize: cfg.MaxUDPSize, UDPReaders: cfg.UDPReaders, SocketsPerAddr: cfg.udpSockets(), Logger: log}
	if err := a.wireCluster(&scfg); err != nil {
		return nil, err
	}
	// After wireCluster: the plugins the recorder reports depend on it.
	if a.rec, err = a.newRecorder(); err != nil {
		return nil, err
	}
	for _, c := range a.reloads.collectors() {
		if err := a.rec.Register(c); err != nil {
			return nil, err
		}
	}
	scfg.Observer = a.rec
	if rw != nil {
		scfg.Rewriter = rw
	}
	if a.ix == nil && hasNamedServers(cfg.Upstream) {
		return nil, fmt.Errorf("--upstream names a server of the cluster zone, which needs the cluster index (--kubeconfig, or running in a pod)")
	}
	for _, z := range cfg.Stubs.sortedZones() {
		if a.ix == nil && hasNamedServers(cfg.Stubs[z].Servers) {
			return nil, fmt.Errorf("stub domain %q names a server of the cluster zone, which needs the cluster index (--kubeconfig, or running in a pod)", z)
		}
	}
	a.srv, err = server.New(scfg)
	if err != nil {
		return nil, err
	}
	if icfg, ok := interceptConfig(cfg, log); ok {
		a.icfg = icfg
		ic, err := intercept.New(icfg)
		if err != nil {
			return nil, err
		}
		a.ic = ic
	}
	return a, nil
}

func (a *agent) run(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.runCtx = ctx
	fctx, fcancel := context.WithCancel(ctx)
	a.stopFwd = fcancel
	go a.fwd.Load().Run(fctx)
	defer a.cache.Close()
	hup, stopHUP := notifyHUP()
	defer stopHUP()
	go a.watchConfig(ctx, hup)
	go a.rec.Run(ctx)
	go a.failures.Run(ctx)
	go a.hosts.Run(ctx)
	if a.clusterFwd != nil {
		go a.clusterFwd.Run(ctx)
	}
	if a.clusterCache != nil {
		defer a.clusterCache.Close()
	}
	a.startCluster(ctx)

	// Until the agent serves, a failure removes the interception it put
	// in place (undoIntercept).
	serving := false
	defer func() {
		if err != nil && !serving {
			a.undoIntercept(err)
		}
	}()
	// The link first (the addresses must exist to be bound), then the
	// listeners, and only then the rules that send traffic to them.
	if a.ic != nil {
		if err := a.ic.EnsureLink(); err != nil {
			return err
		}
	}
	a.awaitClusterSync(ctx)
	if err := a.srv.Listen(); err != nil {
		return err
	}
	a.srv.Serve()
	// Who else serves our addresses, before /ready can say yes.
	a.checkPeers(ctx)
	if a.ic != nil {
		if err := a.ic.EnsureRules(); err != nil {
			_ = a.srv.Shutdown(context.Background())
			return err
		}
	}
	if a.cfg.Admin != "" || a.cfg.AdminSocket != "" {
		var err error
		a.admin, err = admin.New(admin.Config{Addr: a.cfg.Admin, Socket: a.cfg.AdminSocket, Pprof: a.cfg.Pprof, Health: a.healthChecks(), Ready: a.readyChecks(), Logger: a.log,
			Stats: func() any { return a.rec.Stats() }, Metrics: a.rec.Handler()}, a.draining.Load)
		if err != nil {
			_ = a.srv.Shutdown(context.Background())
			return err
		}
		go func() {
			if err := a.admin.Serve(); err != nil {
				a.log.Error("admin endpoint stopped", "err", err)
			}
		}()
	}
	serving = true
	if a.ic != nil {
		go a.ic.Run(ctx)
	}
	go a.watchPeers(ctx)
	a.log.Info("serving DNS", "listen", listenAddrs(a.cfg), "upstreams", len(a.fwd.Load().Servers()), "version", version)
	if a.cfg.LoopCheck {
		go func() {
			if err := a.srv.CheckLoop(ctx, 3*time.Second); err != nil {
				cancel(err)
			}
		}()
	}

	<-ctx.Done()
	cause := context.Cause(ctx)
	if errors.Is(cause, context.Canceled) {
		cause = nil
	}
	a.shutdown(cause == nil)
	return cause
}

// shutdown drains: /ready goes false at once, queries are still answered
// for the lameduck period (so that endpoints and a surge pod can take
// over), then the sockets close.
func (a *agent) shutdown(lameduck bool) {
	a.draining.Store(true)
	// Read now: a reload may have changed it since the start.
	if d := a.running().Lameduck; lameduck && d > 0 {
		a.log.Info("lameduck: not ready, still answering", "for", d.String())
		time.Sleep(time.Duration(d))
	}
	// Let the sockets' queues empty before they close (see Server.Drain).
	a.srv.Drain(200 * time.Millisecond)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(sctx); err != nil {
		a.log.Warn("server shutdown", "err", err)
	}
	if a.admin != nil {
		_ = a.admin.Shutdown(sctx)
	}
	a.teardownIntercept()
	a.log.Info("stopped")
}

// healthChecks are the liveness conditions: what the agent cannot repair
// by itself, so that kubelet restarts it.
func (a *agent) healthChecks() []admin.Check {
	return []admin.Check{{Name: "udp readers", Fn: a.srv.ReadersHealthy}}
}

func (a *agent) readyChecks() []admin.Check {
	return []admin.Check{{Name: "listeners", Fn: func() error {
		if !a.srv.Bound() {
			return errors.New("not bound")
		}
		return nil
	}}, a.clusterReady(), a.interceptReady(), a.peersReady()}
}
