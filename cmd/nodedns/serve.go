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
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/admin"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/metrics"
	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/server"
	"github.com/nodedns/nodedns/pkg/upstream"
)

const resolvConf = "/etc/resolv.conf"

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
	ic       *intercept.Interceptor
	icfg     intercept.Config
	started  time.Time
	draining atomic.Bool
	// runCtx is run's context; stopFwd stops the current forwarder's
	// probes (both used by the reload goroutine only, after run set them).
	runCtx  context.Context
	stopFwd context.CancelFunc
}

// serve is `nodedns serve`. A configuration it refuses is reported as one
// plain line (the log format is not known yet); from then on everything,
// the error that ends the agent included, goes through the configured
// logger.
func serve(args []string, stderr io.Writer) error {
	cfg, err := loadConfig(args, stderr)
	if err != nil {
		return err
	}
	log, level, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	useLogger(log)
	if err := serveWith(cfg, args, log, level); err != nil {
		log.Error("nodedns serve exiting", "err", err)
		return reportedError{err}
	}
	return nil
}

func serveWith(cfg Config, args []string, log *slog.Logger, level *slog.LevelVar) error {
	if n := cfg.schedulerProcs(); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := build(cfg, log)
	if err != nil {
		return err
	}
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
			n, err := upstream.NormalizeAddr(u)
			if err != nil {
				return nil, fmt.Errorf("--upstream: %w", err)
			}
			if isOwn(n) {
				return nil, fmt.Errorf("--upstream %s is one of this agent's own addresses: that is a forwarding loop", u)
			}
			out = append(out, n)
		}
		return out, nil
	}
	rc, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("no --upstream and reading %s: %w", resolvConf, err)
	}
	var out []string
	for _, s := range rc.Servers {
		n, err := upstream.NormalizeAddr(netip.AddrPortFrom(netip.MustParseAddr(strings.Trim(s, "[]")), 53).String())
		if err != nil {
			log.Warn("ignoring nameserver from resolv.conf", "server", s, "err", err)
			continue
		}
		if isOwn(n) {
			log.Info("dropping our own address from resolv.conf upstreams", "server", n)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no --upstream and %s names no usable nameserver", resolvConf)
	}
	return out, nil
}

// searchDomains is --search, else the node's own search domains from
// resolv.conf (those after the cluster's).
func searchDomains(cfg Config, zone string) []string {
	if cfg.searchSet {
		return ndots.Search(cfg.Search, zone)
	}
	rc, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil
	}
	return ndots.Search(rc.Search, zone)
}

// newForwarder builds the upstream forwarder of cfg.
func newForwarder(cfg Config, log *slog.Logger) (*upstream.Forwarder, error) {
	ups, err := upstreams(cfg, listenAddrs(cfg), log)
	if err != nil {
		return nil, err
	}
	return upstream.New(upstream.Config{Servers: ups, Stubs: cfg.Stubs, Policy: upstream.Policy(cfg.Policy), Logger: log})
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
	return cache.Config{Size: cfg.CacheSize, MinTTL: time.Duration(cfg.MinTTL), MaxTTL: time.Duration(cfg.MaxTTL),
		MaxNegativeTTL: time.Duration(cfg.MaxNegativeTTL), StaleFor: stale, PrefetchHits: prefetch, Logger: log}
}

func build(cfg Config, log *slog.Logger) (*agent, error) {
	a := &agent{cfg: cfg, log: log, started: time.Now()}
	fwd, err := newForwarder(cfg, log)
	if err != nil {
		return nil, err
	}
	a.fwd.Store(fwd)
	a.cache, err = cache.New(cacheConfig(cfg, log), fwd)
	if err != nil {
		return nil, err
	}
	if a.rec, err = a.newRecorder(); err != nil {
		return nil, err
	}
	listen := listenAddrs(cfg)
	scfg := server.Config{Observer: a.rec, Listen: listen, Resolver: a.cache, HitCache: a.cache, Autopath: cfg.Autopath,
		MaxInflight: cfg.MaxInflight, MaxClientInflight: cfg.MaxClientInflight, MaxTCPConns: cfg.MaxTCPConns, MaxUDPSize: cfg.MaxUDPSize, UDPReaders: cfg.UDPReaders, SocketsPerAddr: cfg.udpSockets(), Logger: log}
	if err := a.wireCluster(&scfg); err != nil {
		return nil, err
	}
	a.srv, err = server.New(scfg)
	if err != nil {
		return nil, err
	}
	if icfg, ok := interceptConfig(cfg, log); ok {
		a.icfg = icfg
		if a.ic, err = intercept.New(icfg); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *agent) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.runCtx = ctx
	fctx, fcancel := context.WithCancel(ctx)
	a.stopFwd = fcancel
	go a.fwd.Load().Run(fctx)
	defer a.cache.Close()
	go a.watchConfig(ctx)
	go a.rec.Run(ctx)
	a.startCluster(ctx)

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
	if a.ic != nil {
		if err := a.ic.EnsureRules(); err != nil {
			_ = a.srv.Shutdown(context.Background())
			return err
		}
		go a.ic.Run(ctx)
	}
	a.log.Info("serving DNS", "listen", listenAddrs(a.cfg), "upstreams", len(a.fwd.Load().Servers()), "version", version)

	if a.cfg.Admin != "" || a.cfg.AdminSocket != "" {
		var err error
		a.admin, err = admin.New(admin.Config{Addr: a.cfg.Admin, Socket: a.cfg.AdminSocket, Pprof: a.cfg.Pprof, Ready: a.readyChecks(), Logger: a.log,
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
	if lameduck && a.cfg.Lameduck > 0 {
		a.log.Info("lameduck: not ready, still answering", "for", a.cfg.Lameduck.String())
		time.Sleep(time.Duration(a.cfg.Lameduck))
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

func (a *agent) readyChecks() []admin.Check {
	return []admin.Check{{Name: "listeners", Fn: func() error {
		if !a.srv.Bound() {
			return errors.New("not bound")
		}
		return nil
	}}, a.clusterReady(), a.interceptReady()}
}
