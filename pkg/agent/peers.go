package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/intercept/peers"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
)

// defaultPeersRecheck is how often the check runs again while something
// other than nodedns shares our addresses, so that /ready turns true soon
// after it is gone (otherwise it runs every --sync-interval);
// Options.peersRecheck replaces it in tests.
const defaultPeersRecheck = 5 * time.Second

// checkPeers looks for other processes serving our DNS addresses
// (pkg/intercept/peers), keeps the report for /ready, /stats and metrics, and logs
// what changed since the last check.
func (a *Agent) checkPeers(ctx context.Context) {
	var addrs []netip.AddrPort
	for _, l := range a.cfg.ListenAddrs() {
		addrs = append(addrs, netip.MustParseAddrPort(l)) // validated
	}
	rep, err := peers.Check(ctx, peers.Config{Addrs: addrs})
	if err != nil {
		a.log.Warn("cannot tell whether other processes serve our DNS addresses", "err", err)
		return
	}
	prev := a.peers.Swap(&rep)
	for _, k := range []peers.Kind{peers.Foreign, peers.Unidentified, peers.Agent} {
		now, before := serversOf(&rep, k), serversOf(prev, k)
		if slices.EqualFunc(now, before, func(x, y peers.Server) bool { return x.Addr == y.Addr && x.Proto == y.Proto }) {
			continue // the same addresses: changing evidence is no news
		}
		var desc []string
		for _, s := range now {
			desc = append(desc, s.String())
		}
		servers := strings.Join(desc, "; ")
		switch {
		case k == peers.Foreign && len(now) > 0:
			a.log.Error("another DNS server shares our address (a NodeLocal DNSCache or another resolver left running?): it gets a share of the pods' queries; not ready until it is gone", "servers", servers)
		case k == peers.Foreign:
			a.log.Info("no foreign DNS server shares our addresses any more")
		case k == peers.Unidentified && len(now) > 0:
			a.log.Warn("another process holds sockets on our address and did not answer the identifying probes", "servers", servers)
		case k == peers.Agent && len(now) > 0:
			a.log.Info("another nodedns agent shares our addresses (a rolling update)", "servers", servers)
		}
	}
}

// serversOf returns the servers of kind k in r (nil r: none).
func serversOf(r *peers.Report, k peers.Kind) []peers.Server {
	if r == nil {
		return nil
	}
	var out []peers.Server
	for _, s := range r.Servers {
		if s.Kind == k {
			out = append(out, s)
		}
	}
	return out
}

// watchPeers repeats checkPeers every --sync-interval, and every
// a.peersRecheck while something other than nodedns shares our addresses,
// until ctx is done.
func (a *Agent) watchPeers(ctx context.Context) {
	for {
		wait := time.Duration(a.cfg.SyncInterval)
		if r := a.peers.Load(); r != nil && (r.Count(peers.Foreign) > 0 || r.Count(peers.Unidentified) > 0) {
			wait = min(wait, a.peersRecheck)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if a.draining.Load() {
			return // stopping: no probes into the drain, and /ready is false anyway
		}
		a.checkPeers(ctx)
	}
}

// peersReady is the /ready condition: no foreign DNS server shares our
// addresses. Pods' queries would otherwise be split between it and us.
func (a *Agent) peersReady() admin.Check {
	return admin.Check{Name: "foreign DNS servers", Fn: func() error {
		r := a.peers.Load()
		if r == nil {
			return nil
		}
		var errs []error
		for _, s := range r.Foreign() {
			errs = append(errs, errors.New(s.String()))
		}
		if len(errs) > 0 {
			return fmt.Errorf("another DNS server shares our address: %w", errors.Join(errs...))
		}
		return nil
	}}
}

// peerFigures is the report for /stats and metrics.
func (a *Agent) peerFigures() metrics.PeerFigures {
	r := a.peers.Load()
	if r == nil {
		return metrics.PeerFigures{}
	}
	f := metrics.PeerFigures{Checked: r.Checked}
	for _, s := range r.Servers {
		switch s.Kind {
		case peers.Agent:
			f.Agents = append(f.Agents, s.String())
		case peers.Foreign:
			f.Foreign = append(f.Foreign, s.String())
		default:
			f.Unidentified = append(f.Unidentified, s.String())
		}
	}
	return f
}
