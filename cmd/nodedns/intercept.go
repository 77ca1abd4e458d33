package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/pkg/node/intercept"
	"github.com/nodedns/nodedns/pkg/observe/admin"
)

// interceptConfig maps the serve configuration onto pkg/intercept's. ok is
// false when interception is off (no --local-ip): then nothing on the host
// is touched.
func interceptConfig(cfg Config, log *slog.Logger) (intercept.Config, bool) {
	if len(cfg.LocalIP) == 0 {
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
}

// undoIntercept runs when the start fails once the link or the rules may
// be in place (a listener that cannot bind, rules that cannot be
// installed, an admin endpoint that cannot bind): it removes them unless
// another agent serves the addresses, so that a crash loop does not leave
// pods sending DNS to an address nobody answers (and, with the kube-dns
// ClusterIP among --local-ip, gives them kube-proxy's path back). It does
// so whatever --teardown says: that flag hands the interception over to
// the next agent on exit, and here no agent serves it.
func (a *agent) undoIntercept(cause error) {
	if a.ic == nil {
		return
	}
	ok, why := intercept.ShouldTeardown(a.icfg)
	if !ok {
		a.log.Info("start failed; leaving the interception in place", "why", why, "err", cause)
		return
	}
	a.log.Warn("start failed: removing the link and rules, so pods do not send DNS to an address nobody answers", "why", why, "err", cause)
	if err := a.ic.Teardown(); err != nil {
		a.log.Error("removing the interception after a failed start", "err", err)
	}
}

// interceptReady is the /ready condition for interception: the rules are in
// place when this agent manages them.
func (a *agent) interceptReady() admin.Check {
	return admin.Check{Name: "interception", Fn: func() error {
		if a.ic == nil || !a.cfg.SetupIptables || a.ic.RulesPresent() {
			return nil
		}
		return fmt.Errorf("rules missing: %s", a.ic.Status().LastError)
	}}
}

// teardownIntercept removes the link and rules on exit when --teardown is
// set and intercept.ShouldTeardown agrees (no other agent serves the
// addresses, e.g. the new pod of a rolling update).
func (a *agent) teardownIntercept() {
	if a.ic == nil {
		return
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

// cleanup is `nodedns cleanup`: remove every rule nodedns installs (all
// copies, both iptables backends) and the link. With --wait-for-agent it
// first waits until no other process serves the local IPs on port 53 (an
// agent still running would be cut off from its pods), and fails if one
// still does when the time is up. With --hold it then stays running until
// SIGTERM: the Helm chart's uninstall hook shows each node's finished
// cleanup as a Ready pod.
func cleanup(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ips List
	fs.Var(&ips, "local-ip", "comma-separated local IPs (removed from the link if it is not one nodedns created)")
	iface := fs.String("interface", "nodelocaldns", "link to remove")
	wait := fs.Duration("wait-for-agent", 0, "first wait up to this long until no process serves the --local-ip addresses on port 53; fail if one still does (0: do not check)")
	hold := fs.Bool("hold", false, "after cleaning up, keep running until SIGTERM or SIGINT")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log, _, err := newLogger(*level, *format, stderr)
	if err != nil {
		return err
	}
	cfg := intercept.Config{Interface: *iface, Logger: log}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("--local-ip %q: want an IP address", s)
		}
		cfg.LocalIPs = append(cfg.LocalIPs, ip)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *wait > 0 {
		if len(cfg.LocalIPs) == 0 {
			return errors.New("--wait-for-agent needs --local-ip: the addresses whose server it waits for")
		}
		if err := waitNoAgent(ctx, cfg, *wait, time.Second, log); err != nil {
			return err
		}
	}
	if err := intercept.Cleanup(cfg); err != nil {
		return err
	}
	log.Info("cleanup done", "interface", cfg.Interface, "local_ips", ips.String())
	if *hold {
		<-ctx.Done()
	}
	return nil
}

// waitNoAgent waits until no other process serves cfg.LocalIPs on port 53
// in this network namespace, polling every poll, for at most d. It asks
// intercept.ShouldTeardown, the check an exiting agent makes before it
// removes the interception, with a configuration that set up both.
func waitNoAgent(ctx context.Context, cfg intercept.Config, d, poll time.Duration, log *slog.Logger) error {
	cfg.SetupInterface, cfg.SetupIptables = true, true
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last string
	for {
		free, why := intercept.ShouldTeardown(cfg)
		if free {
			return nil
		}
		if why != last {
			log.Info("waiting for the agent on this node to exit", "why", why)
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not cleaning up under a running server after %s: %s", d, why)
		case <-time.After(poll):
		}
	}
}
