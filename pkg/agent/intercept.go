package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/observe/admin"
)

// interceptConfig maps the serve configuration onto pkg/intercept's. ok is
// false when interception is off (no --local-ip, or --network-mode pod):
// then nothing on the host is touched, at start, on exit or after a
// supervised stop.
func interceptConfig(cfg config.Config, log *slog.Logger) (intercept.Config, bool) {
	if !cfg.Intercepts() {
		return intercept.Config{}, false
	}
	ic := intercept.Config{Interface: cfg.Interface, SetupInterface: cfg.SetupInterface, SetupIptables: cfg.SetupIptables,
		SyncInterval: time.Duration(cfg.SyncInterval), Logger: log}
	for _, s := range cfg.LocalIP {
		ic.LocalIPs = append(ic.LocalIPs, netip.MustParseAddr(s))
	}
	// kubelet's probes reach an admin endpoint on a local IP: keep them out
	// of conntrack too.
	if ap, err := netip.ParseAddrPort(cfg.Admin); err == nil {
		for _, ip := range ic.LocalIPs {
			if ip == ap.Addr().Unmap() {
				ic.AdminPort = ap.Port()
			}
		}
	}
	return ic, true
}

// interceptor is what the agent needs of pkg/intercept's Interceptor (a
// fake in unit tests).
type interceptor interface {
	EnsureLink() error
	EnsureRules() error
	Run(ctx context.Context)
	Teardown() error
	RulesPresent() bool
	Status() intercept.Status
	SetFallback(intercept.Fallback) error
}

// undoIntercept runs when the start fails once the link or the rules may
// be in place (a listener that cannot bind, rules that cannot be
// installed, an admin endpoint that cannot bind): it removes them unless
// another agent serves the addresses, so that a crash loop does not leave
// pods sending DNS to an address nobody answers (and, with the kube-dns
// ClusterIP among --local-ip, gives them kube-proxy's path back). It does
// so whatever --teardown says: that flag hands the interception over to
// the next agent on exit, and here no agent serves it.
//
// With the DNS fallback on and its targets known, the interception stays
// instead, its rules put in place if they are not: with no socket bound,
// the fallback sends the pods' queries to the central DNS, which removing
// the link would not (their queries would go nowhere).
func (a *Agent) undoIntercept(cause error) {
	if a.ic == nil {
		return
	}
	ok, why := intercept.ShouldTeardown(a.icfg)
	if !ok {
		a.log.Info("start failed; leaving the interception in place", "why", why, "err", cause)
		return
	}
	if st := a.ic.Status(); st.Fallback == intercept.FallbackOn && len(st.FallbackTargets4)+len(st.FallbackTargets6) > 0 {
		err := a.ic.EnsureRules()
		if err == nil {
			a.log.Warn("start failed: leaving the interception in place, the DNS fallback sends the pods' queries to its targets until an agent serves",
				"ipv4", st.FallbackTargets4, "ipv6", st.FallbackTargets6, "err", cause)
			return
		}
		a.log.Error("start failed, and the DNS fallback's rules cannot be put in place", "err", err)
	}
	a.log.Warn("start failed: removing the link and rules, so pods do not send DNS to an address nobody answers", "why", why, "err", cause)
	if err := a.ic.Teardown(); err != nil {
		a.log.Error("removing the interception after a failed start", "err", err)
	}
}

// interceptReady is the /ready condition for interception: the rules are in
// place when this agent manages them, the DNS fallback's included once its
// targets can be known (the index synced: the fallback loop sets them
// within fallbackPoll).
func (a *Agent) interceptReady() admin.Check {
	return admin.Check{Name: "interception", Fn: func() error {
		if a.ic == nil || !a.cfg.SetupIptables {
			return nil
		}
		if !a.ic.RulesPresent() {
			return fmt.Errorf("rules missing: %s", a.ic.Status().LastError)
		}
		if a.ic.Status().Fallback == intercept.FallbackWaiting && (a.ix == nil || a.ix.Synced()) {
			return fmt.Errorf("the DNS fallback's targets are not set yet")
		}
		return nil
	}}
}

// teardownIntercept removes the link and rules on exit when --teardown is
// set and intercept.ShouldTeardown agrees (no other agent serves the
// addresses, e.g. the new pod of a rolling update).
func (a *Agent) teardownIntercept() {
	if a.ic == nil {
		return
	}
	if a.sup != nil {
		// Only the supervisor knows whether another serving process
		// takes over: a stop (the pod's end) or a death to be replaced.
		// Its own copies of the sockets are closed by now (Draining).
		st, err := a.sup.Status()
		if err != nil || !st.Stopping {
			a.log.Info("leaving interception in place: the supervisor starts another serving process", "err", err)
			return
		}
	}
	if !a.running().Teardown { // a reload may have changed it
		a.log.Info("leaving interception in place (--teardown=false)")
		return
	}
	ok, why := intercept.ShouldTeardown(a.icfg)
	if !ok {
		a.log.Info("leaving interception in place", "why", why)
		return
	}
	a.log.Info("tearing down interception", "why", why)
	if err := a.ic.Teardown(); err != nil {
		a.log.Error("teardown failed", "err", err)
	}
}
