package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/resolvconf"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// upstreams resolves the upstream list: --upstream, else the nameservers
// of /etc/resolv.conf. Our own addresses are refused in the first case
// (a configuration error) and dropped in the second (the node's
// resolv.conf may well name us).
func upstreams(cfg config.Config, listen []string, log *slog.Logger) ([]string, error) {
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
	// Pod mode: the redirect's frontends (169.254.20.10 whatever
	// local-ip says) lead back here; a node whose resolv.conf names one
	// must not make the agent its own upstream.
	for _, a := range cfg.RedirectedAddrs() {
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
			cfg.ResolvConf, len(rc.Problems)+rc.MoreProblems, len(rc.Nameservers))
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
	if rc.MoreProblems > 0 {
		log.Warn("more malformed lines of resolv.conf skipped, not listed", "file", path, "count", rc.MoreProblems)
	}
	return rc, nil
}

// searchDomains is --search, else the node's own search domains from
// resolv.conf (those after the cluster's).
func searchDomains(cfg config.Config, zone string) []string {
	if cfg.IsGiven("search") {
		return ndots.Search(cfg.Search, zone)
	}
	rc, err := resolvconf.ReadFile(cfg.ResolvConf)
	if err != nil {
		return nil
	}
	return ndots.Search(rc.Search, zone)
}

// newForwarder builds the upstream forwarder of cfg, with the kube-dns
// ConfigMap's settings under it; its failures are logged through the
// rate limiter and its recovered panics count with the agent's.
func (a *Agent) newForwarder(cfg config.Config, kd kubedns.Config) (*upstream.Forwarder, error) {
	var ups []string
	var err error
	if len(cfg.Upstream) == 0 && len(kd.UpstreamNameservers) > 0 {
		// The ConfigMap's upstreams replace the node's resolvers.
		c := cfg
		c.Upstream = kd.UpstreamNameservers
		if ups, err = upstreams(c, cfg.ListenAddrs(), a.upLog); err != nil {
			return nil, fmt.Errorf("kube-dns config %s: %w", kubedns.UpstreamNameserversKey, err)
		}
	} else if ups, err = upstreams(cfg, cfg.ListenAddrs(), a.upLog); err != nil {
		return nil, err
	}
	res := indexResolver{ix: func() *k8s.Index { return a.ix }}
	fc := forwarderConfig(cfg, ups, kd, res, a.upLog)
	fc.Panics = a.panics
	fc.Tap = a.upstreamTap()
	if fc.NameServers, err = nameResolvers(cfg, a.upLog); err != nil {
		return nil, err
	}
	return upstream.New(fc)
}

// nameResolvers are the resolvers of upstreams given by names outside the
// cluster zone: --upstream-resolver, else the node's resolvers (those of
// resolv.conf, minus our own addresses), read only when such a name is
// configured.
func nameResolvers(cfg config.Config, log *slog.Logger) ([]string, error) {
	if len(cfg.UpstreamResolver) > 0 {
		return cfg.UpstreamResolver, nil
	}
	named := cfg.NamedServers(cfg.ClusterZones())
	if len(named) == 0 {
		return nil, nil
	}
	c := cfg
	c.Upstream = nil
	rs, err := upstreams(c, cfg.ListenAddrs(), log)
	if err != nil {
		return nil, fmt.Errorf("upstreams given by name (%s) need resolvers: --upstream-resolver, or %w", strings.Join(named, ", "), err)
	}
	return rs, nil
}

// cacheConfig maps cfg onto the cache's settings (0 disables prefetch and
// serve-stale on the command line; the cache spells that -1).
func cacheConfig(cfg config.Config, log *slog.Logger) cache.Config {
	prefetch := cfg.Prefetch
	if prefetch == 0 {
		prefetch = -1
	}
	stale := time.Duration(cfg.ServeStale)
	if stale == 0 {
		stale = -1
	}
	cc := cache.Config{Size: cfg.CacheSize, MaxBytes: int64(cfg.CacheMaxBytes), MinTTL: time.Duration(cfg.MinTTL), MaxTTL: time.Duration(cfg.MaxTTL),
		MaxNegativeTTL: time.Duration(cfg.MaxNegativeTTL), StaleFor: stale, PrefetchHits: prefetch, Logger: log}
	cacheOptions(&cc, cfg)
	return cc
}

// cacheOptions maps CoreDNS's other cache options onto cc. A 0s the
// settings give on purpose (no SERVFAIL caching, no verify timer, TTL 0,
// no recheck period) the cache spells negative: its 0 is its default.
func cacheOptions(cc *cache.Config, cfg config.Config) {
	orOff := func(d config.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return time.Duration(d)
	}
	cc.MinNegativeTTL = time.Duration(cfg.MinNegativeTTL)
	cc.ServfailTTL = orOff(cfg.ServfailTTL)
	cc.KeepTTL = cfg.CacheKeepTTL
	cc.StaleImmediate = cfg.ServeStaleMode == config.ServeStaleImmediate
	cc.StaleAnswerAfter = orOff(cfg.ServeStaleTimeout)
	cc.StaleTTL = orOff(cfg.ServeStaleTTL)
	cc.StaleRetry = orOff(cfg.ServeStaleRecheck)
	cc.StalePreferPositive = cfg.ServeStalePolicy == config.ServeStalePreferPositive
	cc.PrefetchWindow = time.Duration(cfg.PrefetchWindow)
	cc.PrefetchPercent = cfg.PrefetchPercent
	cc.DisableSuccess = cfg.CacheDisableSuccess.Zones()
	cc.DisableDenial = cfg.CacheDisableDenial.Zones()
	// header { query clear rd }: the upstream is asked without RD (the
	// key was validated).
	_, _, cc.ClearRD, _ = cfg.HeaderMasks()
}

// forwarderConfig maps cfg, the default upstreams resolved for it and the
// kube-dns ConfigMap onto the forwarder's settings. The ConfigMap sits
// under the agent's own settings: its upstreamNameservers apply when the
// agent names no upstream (the caller resolved ups so), its stubDomains
// for the zones the agent does not forward itself.
func forwarderConfig(cfg config.Config, ups []string, kd kubedns.Config, res upstream.Resolver, log *slog.Logger) upstream.Config {
	stubs := map[string][]string{}
	opts := map[string]upstream.GroupOptions{}
	own := map[string]bool{}
	for _, z := range cfg.Stubs.SortedZones() {
		sd := cfg.Stubs[z]
		stubs[z] = sd.Servers
		opts[z] = sd.GroupOptions("")
		own[dnsname.Canonical(z)] = true
	}
	for _, z := range kd.Zones() {
		if own[dnsname.Canonical(z)] {
			continue
		}
		stubs[z] = kd.StubDomains[z]
	}
	return upstream.Config{
		Servers:      ups,
		Stubs:        stubs,
		StubOptions:  opts,
		Options:      cfg.DefaultGroupOptions(),
		Policy:       upstream.Policy(cfg.Policy),
		CAFile:       cfg.UpstreamCA,
		Resolver:     res,
		ClusterZones: cfg.ClusterZones(),
		Logger:       log,
	}
}

// indexResolver resolves upstreams given by name from the cluster index
// (the index may be wired after the forwarder is built).
type indexResolver struct{ ix func() *k8s.Index }

// ResolveServer returns the A and AAAA addresses of name in the index.
func (r indexResolver) ResolveServer(name string) ([]netip.Addr, bool) {
	ix := r.ix()
	if ix == nil || !ix.Synced() {
		return nil, false
	}
	var out []netip.Addr
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		res, ok := ix.Lookup(name, t)
		if !ok || res.NotSynced || res.Msg == nil {
			continue
		}
		for _, rr := range res.Msg.Answer {
			switch v := rr.(type) {
			case *dns.A:
				if a, ok := netip.AddrFromSlice(v.A); ok {
					out = append(out, a.Unmap())
				}
			case *dns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA); ok {
					out = append(out, a)
				}
			}
		}
	}
	return out, true
}
