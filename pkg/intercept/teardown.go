package intercept

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/nodedns/nodedns/pkg/intercept/peers"
)

// ShouldTeardown is the one place that decides whether an exiting agent
// removes the interception (Teardown) or leaves it in place. With
// --teardown (the default), the agent (pkg/agent) calls it on exit, after its own
// listeners are closed, and tears down only when it returns true; why is a
// sentence for the log. Call it on a thread in the agent's network
// namespace (any thread, in an agent that never switches namespaces).
//
// The answer is no when nothing was set up (SetupInterface and
// SetupIptables both false) or when another process still serves one of
// the local IPs on port 53: during a rolling restart the new agent binds
// the same addresses with SO_REUSEPORT before the old one exits, and
// removing the link and rules under it would cut off every pod on the node
// until its next sync.
//
// "Another process serves" is read from the kernel, not from a lock file,
// so it also sees an agent in another container or PID namespace: a UDP
// socket, or a listening TCP socket, bound to LOCALIP:53 in this network
// namespace (/proc/thread-self/net/{udp,udp6,tcp,tcp6}) whose inode is not
// one of this process's descriptors (/proc/self/fd). Sockets bound to the
// wildcard address are not counted: a resolver listening on 0.0.0.0:53 does
// not keep the interception meaningful.
//
// Limits: a socket a new agent has not bound yet is not seen, so a
// replacement that starts only after the old agent exits gets a fresh
// setup rather than an inherited one. If /proc cannot be read the answer
// is yes (the behaviour without this check), with the error in why.
func ShouldTeardown(cfg Config) (teardown bool, why string) {
	return shouldTeardown(cfg, "/proc/thread-self/net", "/proc/self/fd")
}

func shouldTeardown(cfg Config, procNet, selfFD string) (bool, string) {
	if !cfg.SetupInterface && !cfg.SetupIptables {
		return false, "this agent set up no link and no rules"
	}
	if len(cfg.LocalIPs) == 0 {
		return false, "no local IPs configured"
	}
	own, err := peers.OwnInodes(selfFD)
	if err != nil {
		return true, fmt.Sprintf("cannot tell whether another agent serves %s (%v); tearing down", describeIPs(cfg.LocalIPs), err)
	}
	want := make(map[netip.AddrPort]bool, len(cfg.LocalIPs))
	for _, ip := range cfg.LocalIPs {
		want[netip.AddrPortFrom(ip.Unmap(), dnsPort)] = true
	}
	socks, err := peers.ReadSockets(procNet)
	if err != nil {
		return true, fmt.Sprintf("cannot tell whether another agent serves %s (%v); tearing down", describeIPs(cfg.LocalIPs), err)
	}
	for _, s := range socks {
		if want[s.Local] && !own[s.Inode] {
			return false, fmt.Sprintf("another process still serves %s/%s (socket inode %d); leaving the interception to it", s.Local, s.Proto, s.Inode)
		}
	}
	return true, fmt.Sprintf("no other process serves %s on port %d", describeIPs(cfg.LocalIPs), dnsPort)
}

// CleanupAfterAgent is `nodedns cleanup`: Cleanup, after waiting (wait > 0)
// until no other process serves cfg.LocalIPs on port 53, so that an
// uninstall does not cut a running agent off from its pods; it fails
// without removing anything if one still does when wait is up.
func CleanupAfterAgent(ctx context.Context, cfg Config, wait time.Duration) error {
	if wait > 0 {
		if len(cfg.LocalIPs) == 0 {
			return errors.New("--wait-for-agent needs --local-ip: the addresses whose server it waits for")
		}
		if err := waitNoAgent(ctx, cfg, wait, time.Second); err != nil {
			return err
		}
	}
	return Cleanup(cfg)
}

// waitNoAgent waits until no other process serves cfg.LocalIPs on port 53
// in this network namespace, polling every poll, for at most d. It asks
// ShouldTeardown, the check an exiting agent makes before it removes the
// interception, with a configuration that set up both.
func waitNoAgent(ctx context.Context, cfg Config, d, poll time.Duration) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg.SetupInterface, cfg.SetupIptables = true, true
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last string
	for {
		free, why := ShouldTeardown(cfg)
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
