package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
)

// The DNS fallback (fallback-dns): while no process holds the agent's
// sockets, the kernel sends pods' queries to other DNS servers
// (pkg/intercept, fallback.go there). This file decides whether it is
// on and keeps its targets current: the addresses of fallback-dns, and the
// servers of the Services it names (by default the cluster DNS Service) as
// the cluster index knows them. The targets are computed again whenever
// the index changes (at most once per fallbackPoll) and on a reload; the
// interception rewrites its chains only when they changed. While no agent
// runs, the chains keep the last targets written.

// fallbackPoll is how often the index's generations are compared with
// those of the last computation; a burst of changes within it costs one.
var fallbackPoll = time.Second

// fallbackState is what the fallback loop keeps between computations.
type fallbackState struct {
	// kick asks for a computation now (a reload changed fallback-dns).
	kick chan struct{}
	// warned holds the fallback-dns addresses already warned about as
	// ClusterIPs, and the reasons already logged, so a computation per
	// index change does not repeat them.
	warned map[string]bool
}

func newFallbackState() *fallbackState {
	return &fallbackState{kick: make(chan struct{}, 1), warned: map[string]bool{}}
}

// fallbackOn reports whether the fallback of cfg can be on, and why not.
// It needs the rules (setup-iptables), something to send queries to
// (fallback-dns not empty; its default, the cluster DNS Service, needs the
// cluster index), and a listener bound to port 53 of each local IP itself:
// the socket match ignores wildcard listeners, so with one every query
// would go to the fallback while the agent serves.
func fallbackOn(cfg config.Config, haveIndex bool) (on bool, why string) {
	entries, unset := cfg.FallbackEntries()
	switch {
	case !cfg.Intercepts() || !cfg.SetupIptables:
		return false, "the agent manages no rules"
	case unset && !haveIndex:
		return false, "no cluster index, so no cluster DNS Service to fall back to: give fallback-dns addresses for one"
	case !unset && len(entries) == 0:
		return false, "fallback-dns is empty"
	}
	var listen []netip.AddrPort
	for _, s := range cfg.ListenAddrs() {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			listen = append(listen, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	for _, s := range cfg.LocalIP {
		ip := netip.MustParseAddr(s).Unmap()
		if !slices.Contains(listen, netip.AddrPortFrom(ip, 53)) {
			return false, fmt.Sprintf("no listener bound to %s:53 itself (the socket match ignores wildcard listeners): add it to listen", ip)
		}
	}
	return true, ""
}

// fallbackFor computes the fallback of cfg. ready is false while it
// depends on the cluster index and the index has not synced: the
// interception then keeps what it has (at start, the chains an earlier
// agent left).
func (a *Agent) fallbackFor(cfg config.Config) (fb intercept.Fallback, ready bool) {
	on, why := fallbackOn(cfg, a.ix != nil)
	if !on {
		a.logFallbackOnce("off: "+why, "DNS fallback off", "why", why)
		return intercept.Fallback{Off: true}, true
	}
	entries, unset := cfg.FallbackEntries()
	if unset {
		ns, name, _ := strings.Cut(a.ix.DNSService(), "/")
		entries = []config.FallbackEntry{{Namespace: ns, Name: name}}
	}
	if a.ix != nil && !a.ix.Synced() {
		return intercept.Fallback{}, false
	}
	var targets [2][]intercept.Target
	add := func(t intercept.Target) {
		fi := 0
		if t.Addr.Is6() {
			fi = 1
		}
		if slices.ContainsFunc(targets[fi], func(x intercept.Target) bool { return x.Addr == t.Addr }) {
			return
		}
		if len(targets[fi]) == intercept.MaxFallbackTargets {
			a.logFallbackOnce("cut: "+t.Addr.String(), "more DNS fallback targets than the bound: the first are used",
				"bound", intercept.MaxFallbackTargets, "left_out", t.Addr.String())
			return
		}
		targets[fi] = append(targets[fi], t)
	}
	for _, e := range entries {
		if e.Name == "" {
			ip, port := e.Addr.Addr(), e.Addr.Port()
			if a.ix != nil && a.ix.IsClusterIP(ip) {
				a.logFallbackOnce("clusterip: "+ip.String(),
					"a fallback-dns address is a Service ClusterIP: with kube-proxy in iptables or nftables mode the fallback's DNAT bypasses kube-proxy's, so queries sent there are lost; name the Service (namespace/name) instead",
					"address", e.String())
			}
			add(intercept.Target{Addr: ip, UDPPort: port, TCPPort: port})
			continue
		}
		v4, v6, found := a.ix.ServiceServers(e.Namespace, e.Name, intercept.MaxFallbackTargets)
		if !found {
			a.logFallbackOnce("missing: "+e.String(), "the DNS fallback's Service does not exist (yet): no targets from it", "service", e.String())
			continue
		}
		for _, s := range append(v4, v6...) {
			add(intercept.Target{Addr: s.Addr, UDPPort: s.UDPPort, TCPPort: s.TCPPort})
		}
	}
	fb.Targets = append(targets[0], targets[1]...)
	if a.ix != nil {
		for _, ip := range a.icfg.LocalIPs {
			if a.ix.IsClusterIP(ip) {
				fb.ClusterIPs = append(fb.ClusterIPs, ip)
			}
		}
	}
	return fb, true
}

// logFallbackOnce logs msg at warn level (info for "off: " keys) the first
// time key is seen.
func (a *Agent) logFallbackOnce(key, msg string, args ...any) {
	if a.fb.warned[key] {
		return
	}
	a.fb.warned[key] = true
	if strings.HasPrefix(key, "off: ") {
		a.log.Info(msg, args...)
		return
	}
	a.log.Warn(msg, args...)
}

// updateFallback computes the fallback of the running configuration and
// hands it to the interception (which changes the rules only if it
// changed). Only the fallback loop calls it once Run has started it.
func (a *Agent) updateFallback() {
	if a.ic == nil {
		return
	}
	fb, ready := a.fallbackFor(*a.running())
	if !ready {
		return
	}
	if err := a.ic.SetFallback(fb); err != nil {
		a.log.Error("setting the DNS fallback", "err", err)
	}
}

// runFallback keeps the fallback current until ctx is done: a computation
// whenever the cluster index's generations moved (Services, EndpointSlices,
// this node's pods), at most once per fallbackPoll, and at once when a
// reload asks (kick).
func (a *Agent) runFallback(ctx context.Context) {
	if a.ic == nil {
		return
	}
	t := time.NewTicker(fallbackPoll)
	defer t.Stop()
	var gen, podGen uint64
	synced := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.fb.kick:
		case <-t.C:
			if a.ix == nil {
				continue
			}
			g, pg, s := a.ix.Generation(), a.ix.PodGeneration(), a.ix.Synced()
			if g == gen && pg == podGen && s == synced {
				continue
			}
			gen, podGen, synced = g, pg, s
		}
		a.updateFallback()
	}
}

// kickFallback asks the fallback loop for a computation (a reload).
func (a *Agent) kickFallback() {
	select {
	case a.fb.kick <- struct{}{}:
	default: // one pending covers this one
	}
}
