package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/intercept/peers"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
	"github.com/nodedns/nodedns/pkg/observe/errlog"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/hosts"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/zonefile"
	"github.com/nodedns/nodedns/pkg/supervisor"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Options are what the agent takes besides its configuration.
type Options struct {
	// Log is the agent's logger (default: slog's); Level, when set, is
	// its level, which a reload of log-level changes.
	Log   *slog.Logger
	Level *slog.LevelVar
	// Args is the command line the configuration was loaded from: a
	// reload reads the --config file again and applies these flags over
	// it, as at start.
	Args []string
	// Version names the build in the log, the metrics and the user agent
	// the API server sees; Revision is its VCS revision, in the metrics.
	Version  string
	Revision string
	// Supervisor, when set, makes this the serving process of
	// pkg/supervisor: the sockets come from it (supervised.go).
	Supervisor *supervisor.Client

	// reloadPoll replaces defaultReloadPoll and peersRecheck
	// defaultPeersRecheck (test knobs: tests see a change in
	// milliseconds); zero: the default.
	reloadPoll, peersRecheck time.Duration
	// cacheClock is the caches' clock (cache.Config.Clock; a test knob:
	// tests let TTLs pass without waiting); nil: the runtime's.
	cacheClock func() time.Duration
}

// Agent holds the wired parts of an agent: Build wires them, Run runs
// them until its context is done.
type Agent struct {
	cfg      config.Config
	args     []string // the command line, re-applied over the file on reload
	version  string
	revision string
	log      *slog.Logger
	level    *slog.LevelVar
	fwd      atomic.Pointer[upstream.Forwarder]
	cache    *cache.Cache
	pipe     *pipeline.Pipeline
	srv      *server.Server
	admin    *admin.Server
	ix       *k8s.Index
	rec      *metrics.Recorder
	ic       interceptor // nil: no interception
	icfg     intercept.Config
	started  time.Time
	draining atomic.Bool
	// panics is the one count of recovered panics: server, cache and
	// forwarder (a reload's new forwarder too) share it; its stack lines
	// go through failures.
	panics *recovery.Counter
	// live is the running configuration: cfg as replaced by each reload
	// (see running); reloads counts them.
	live    atomic.Pointer[config.Config]
	reloads *reloadStats
	// peers is the last report of other processes serving our
	// addresses (peers.go).
	peers atomic.Pointer[peers.Report]
	// runCtx is run's context; stopFwd stops the current forwarder's
	// probes (both used by the reload goroutine only, after Run set them).
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
	// zones are the zones of the zone files (CoreDNS file); empty when
	// the key is absent.
	zones *zonefile.Files
	// clusterFwd asks --cluster-dns; clusterCache keeps its answers in
	// forward mode (forward.go). Both nil when unused.
	clusterFwd   *upstream.Forwarder
	clusterCache *cache.Cache
	// kd is the kube-dns ConfigMap directory's state (kubedns.go).
	kd *kubeDNSState
	// taps are the dnstap collectors (dnstap.go), logging through upLog
	// (a collector that stays away is a line a while, not one per retry);
	// nil: none.
	taps *dnstap.Set
	// views are the views' forwarders and caches (views.go).
	views []agentView
	// hurry is closed when the lameduck is to end at once (a second
	// SIGTERM or SIGINT, see Serve); nil: it always runs its course.
	hurry <-chan struct{}
	// sup is the supervisor's control socket; nil when unsupervised.
	sup *supervisor.Client
	// reloadPoll is how often the config file is read (reload.go);
	// configPolls counts the reads done. peersRecheck: peers.go.
	reloadPoll, peersRecheck time.Duration
	configPolls              atomic.Uint64
	// cacheClock: Options.cacheClock.
	cacheClock func() time.Duration
	// fb is the DNS fallback loop's state (fallback.go).
	fb *fallbackState
}

// Serve is `nodedns serve` once the configuration is loaded and the
// logger made: it sets the scheduler's Ps, builds the agent and runs it
// until SIGINT or SIGTERM (lameduck, drain, teardown) or a fatal error.
// A second SIGINT or SIGTERM ends the lameduck at once (an operator, or a
// kubelet whose grace period is shorter, should not have to wait it out or
// SIGKILL the agent, which would skip the drain and the teardown); after
// it, a third has the default action: the process ends at once.
func Serve(cfg config.Config, opts Options) error {
	// The runtime's own choice honours a container CPU limit; the agent's
	// does not lower Ps to it (Config.SchedulerProcs says why). Both are
	// logged.
	runtimeDefault := runtime.GOMAXPROCS(0)
	if n := cfg.SchedulerProcs(); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	// Caught from now on: a signal during Build waits in the channel.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if opts.Supervisor != nil {
		log := opts.Log
		if log == nil {
			log = slog.Default()
		}
		adj, err := supervisor.PreferOOMKill()
		if err != nil {
			log.Warn("the serving process could not volunteer for the OOM killer; at the memory limit the kernel may pick the supervisor", "err", err)
		} else {
			log.Debug("oom_score_adj raised", "to", adj)
		}
	}
	a, err := Build(cfg, opts)
	if err != nil {
		return err
	}
	a.log.Info("scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "runtimeDefault", runtimeDefault, "cpus", runtime.NumCPU())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hurry, done := make(chan struct{}), make(chan struct{})
	defer close(done)
	a.hurry = hurry
	go a.watchSignals(sigs, cancel, hurry, done)
	return a.Run(ctx)
}

// watchSignals turns the first SIGINT or SIGTERM into the end of Run
// (cancel) and the second into the end of the lameduck (hurry), until done.
func (a *Agent) watchSignals(sigs chan os.Signal, cancel context.CancelFunc, hurry chan<- struct{}, done <-chan struct{}) {
	var first os.Signal
	select {
	case first = <-sigs:
		a.log.Info("signal received: stopping", "signal", first.String())
		cancel()
	case <-done:
		return
	}
	select {
	case s := <-sigs:
		// From now on the default action: a third signal ends the
		// process at once.
		signal.Stop(sigs)
		a.log.Warn("second signal: lameduck cut short, draining and stopping now; a third signal ends the process at once", "signal", s.String())
		close(hurry)
	case <-done:
	}
}

// Build wires the agent of cfg: the forwarder, cache, static records,
// rewrites, cluster zone, metrics, server and interception. Nothing is
// bound or changed on the host until Run.
func Build(cfg config.Config, opts Options) (*Agent, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	level := opts.Level
	if level == nil {
		level = new(slog.LevelVar)
	}
	a := &Agent{cfg: cfg, args: opts.Args, version: opts.Version, revision: opts.Revision, log: log, level: level, started: time.Now(),
		reloads: newReloadStats(), kd: newKubeDNSState(cfg.KubeDNSConfig), sup: opts.Supervisor, fb: newFallbackState(),
		reloadPoll: opts.reloadPoll, peersRecheck: opts.peersRecheck, cacheClock: opts.cacheClock}
	if a.reloadPoll <= 0 {
		a.reloadPoll = defaultReloadPoll
	}
	if a.peersRecheck <= 0 {
		a.peersRecheck = defaultPeersRecheck
	}
	a.live.Store(&cfg)
	a.failures = errlog.New(log, errlog.Config{})
	// A stack per panic, limited as the failure lines are: a query that
	// panics, asked again and again, cannot decide how much is logged.
	a.panics = recovery.NewCounter(a.failures)
	a.upLog = slog.New(a.failures.Handler(log.Handler()))
	var err error
	if a.taps, err = cfg.DnstapTaps("nodedns-"+a.version, a.upLog); err != nil {
		return nil, err
	}
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
	ccfg.Clock = a.cacheClock
	a.cache, err = cache.New(ccfg, fwd)
	if err != nil {
		return nil, err
	}
	hc := cfg.HostsSettings()
	hc.Logger = log
	if a.hosts, err = hosts.New(hc); err != nil {
		return nil, err
	}
	if a.zones, err = newZoneFiles(cfg, a); err != nil {
		return nil, err
	}
	rw, err := cfg.Rewriter()
	if err != nil {
		return nil, err
	}
	listen := cfg.ListenAddrs()
	pcfg := pipeline.Config{Panics: a.panics, Failures: a.failures, Hosts: a.hosts, Files: a.zones, LoadBalance: cfg.LoadBalance == config.LoadBalanceRoundRobin, Resolver: a.cache, Autopath: cfg.Autopath,
		MaxUDPSize: cfg.MaxUDPSize, ClientNamespaces: cfg.MetricsNamespaces > 0, Logger: log}
	scfg := server.Config{Panics: a.panics, Listen: listen, MaxInflight: cfg.MaxInflight, MaxClientInflight: cfg.MaxClientInflight, MaxTCPConns: cfg.MaxTCPConns,
		UDPReaders: cfg.UDPReaders, SocketsPerAddr: cfg.SocketsPerAddr(), Logger: log}
	if a.sup != nil {
		scfg.Sockets = a.sup
	}
	if err := a.wireCluster(&pcfg); err != nil {
		return nil, err
	}
	// After wireCluster: the plugins the recorder reports depend on it.
	if a.rec, err = a.newRecorder(); err != nil {
		return nil, err
	}
	for _, c := range append(a.reloads.collectors(), zoneFileCollectors(a.zones)...) {
		if err := a.rec.Register(c); err != nil {
			return nil, err
		}
	}
	if a.sup != nil {
		if err := a.rec.Register(metrics.SupervisorCollector(a.supervisorFigures)); err != nil {
			return nil, err
		}
	}
	pcfg.Observer = a.rec
	if rw != nil {
		pcfg.Rewriter = rw
	}
	if pcfg.Plugins, err = a.buildPlugins(cfg); err != nil {
		return nil, err
	}
	pcfg.MinimalResponses = cfg.MinimalResponses
	if a.taps != nil {
		pcfg.Tap = a.taps
	}
	if pcfg.Views, err = a.buildViews(cfg); err != nil {
		return nil, err
	}
	// Zones of blocks without a view: a view of a less specific zone does
	// not take their names.
	pcfg.PlainZones = append(stubZones(cfg), kd.Zones()...)
	if pcfg.Route != nil {
		pcfg.PlainZones = append(pcfg.PlainZones, pcfg.Route.Zones...)
	}
	// Names outside the cluster zone are resolved through the node's
	// resolvers (or --upstream-resolver), index or not.
	if named := cfg.ClusterNamedServers(cfg.ClusterZones()); a.ix == nil && len(named) > 0 {
		return nil, fmt.Errorf("upstream %s names a server of the cluster zone, which needs the cluster index (--kubeconfig, or running in a pod)", strings.Join(named, ", "))
	}
	if a.pipe, err = pipeline.New(pcfg); err != nil {
		return nil, err
	}
	scfg.Handler = a.pipe
	a.srv, err = server.New(scfg)
	if err != nil {
		return nil, err
	}
	if cfg.Intercepts() && a.ix == nil && cfg.HasFallbackServices() {
		return nil, fmt.Errorf("--fallback-dns names a Service, which needs the cluster index (--kubeconfig, or running in a pod, with --cluster-zone local)")
	}
	if icfg, ok := interceptConfig(cfg, log); ok {
		icfg.Fallback, _ = fallbackOn(cfg, a.ix != nil)
		a.icfg = icfg
		ic, err := intercept.New(icfg)
		if err != nil {
			return nil, err
		}
		a.ic = ic
	}
	return a, nil
}

// Run starts the agent and serves until ctx is done (then it drains:
// lameduck, sockets closed, interception torn down when it should be) or
// a fatal error, returned. A start that fails once the interception may be
// in place removes it, unless another agent serves the addresses.
func (a *Agent) Run(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.runCtx = ctx
	// The taps outlive ctx: the lameduck's answers are logged too.
	defer a.runTaps()()
	fctx, fcancel := context.WithCancel(ctx)
	a.stopFwd = fcancel
	go a.fwd.Load().Run(fctx)
	defer a.cache.Close()
	defer a.runViews(ctx)()
	hup, stopHUP := notifyHUP()
	defer stopHUP()
	go a.watchConfig(ctx, hup)
	go a.rec.Run(ctx)
	go a.failures.Run(ctx)
	go a.hosts.Run(ctx)
	go a.zones.Run(ctx)
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
	// The fallback's targets, when they are known already (the index
	// synced, or addresses only): they go in with the rules, and a start
	// that fails from here on leaves them to answer (undoIntercept).
	a.updateFallback()
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
		a.admin, err = admin.New(admin.Config{Addr: a.cfg.Admin, Socket: a.cfg.AdminSocket, Pprof: a.cfg.Pprof, SocketOnly: a.socketHooks(), Health: a.healthChecks(), Ready: a.readyChecks(), Logger: a.log,
			Stats: func() any { return a.rec.Stats() }, Metrics: a.rec.Handler()}, a.draining.Load)
		if err != nil {
			_ = a.srv.Shutdown(context.Background())
			return err
		}
		if a.cfg.Admin != "" {
			for _, c := range adminCollectors(a.admin) {
				if err := a.rec.Register(c); err != nil {
					a.log.Warn("admin endpoint figures not exported", "err", err)
				}
			}
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
		go a.runFallback(ctx)
	}
	go a.watchPeers(ctx)
	a.log.Info("serving DNS", "listen", a.cfg.ListenAddrs(), "network_mode", a.cfg.NetworkMode, "upstreams", len(a.fwd.Load().Servers()), "version", a.version, "supervised", a.sup != nil)
	if a.sup != nil {
		if err := a.sup.Serving(); err != nil {
			a.log.Warn("telling the supervisor this process serves", "err", err)
		}
	}
	if a.cfg.LoopCheck {
		go func() {
			if err := a.pipe.CheckLoop(ctx, a.srv.Addrs()[0], 3*time.Second); err != nil {
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
func (a *Agent) shutdown(lameduck bool) {
	a.draining.Store(true)
	// Read now: a reload may have changed it since the start.
	if d := a.running().Lameduck; lameduck && d > 0 {
		a.log.Info("lameduck: not ready, still answering", "for", d.String())
		t := time.NewTimer(time.Duration(d))
		select {
		case <-t.C:
		case <-a.hurry:
			t.Stop()
			a.log.Info("lameduck cut short by a second signal")
		}
	}
	// Let the sockets' queues empty before they close (see Server.Drain).
	// The supervisor must not hand sockets connected to themselves to
	// another serving process.
	if a.sup != nil {
		if err := a.sup.Draining(); err != nil {
			a.log.Warn("telling the supervisor this process drains", "err", err)
		}
	}
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
func (a *Agent) healthChecks() []admin.Check {
	return []admin.Check{{Name: "udp readers", Fn: a.srv.ReadersHealthy}}
}

func (a *Agent) readyChecks() []admin.Check {
	return []admin.Check{{Name: "listeners", Fn: func() error {
		if !a.srv.Bound() {
			return errors.New("not bound")
		}
		return nil
	}}, a.clusterReady(), a.interceptReady(), a.peersReady()}
}
