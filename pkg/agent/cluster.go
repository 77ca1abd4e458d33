package agent

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// wireCluster connects the Kubernetes index when a kubeconfig (or the
// in-cluster config) is available; without one the agent is a plain caching
// forwarder and says so.
func (a *Agent) wireCluster(pcfg *pipeline.Config) error {
	if a.cfg.ClusterZone == config.ClusterZoneForward {
		return a.wireForward(pcfg)
	}
	rc, err := k8s.RESTConfigContext(a.cfg.Kubeconfig, a.cfg.KubeconfigContext)
	if err != nil {
		return err
	}
	if rc == nil {
		a.log.Warn("no --kubeconfig and not running in a pod: cluster zone off, forwarding everything")
		return nil
	}
	rc.UserAgent = "nodedns/" + a.version
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating Kubernetes client: %w", err)
	}
	kc := a.cfg.ClusterSettings()
	kc.Logger = a.log
	if len(kc.MulticlusterZones) > 0 {
		// ServiceImports are custom resources: JSON only, through the
		// dynamic client (which asks for JSON whatever rc says).
		if kc.Imports, err = dynamic.NewForConfig(rc); err != nil {
			return fmt.Errorf("creating the Kubernetes client for ServiceImports: %w", err)
		}
	}
	a.ix, err = k8s.New(client, kc)
	if err != nil {
		return err
	}
	pcfg.Cluster = a.ix
	pcfg.Search = searchDomains(a.cfg, a.ix.Zone())
	// This node's pods: the search-path walk's, and the per-namespace
	// figures' (a reload may turn the walk on).
	switch {
	case a.cfg.NodeName != "":
		pcfg.Pods = a.ix
	case a.cfg.Autopath:
		a.log.Warn("autopath needs --node-name (or $NODE_NAME) to know this node's pods: search-path walk off")
	}
	if a.cfg.ClusterDNS != "" {
		fwd, err := clusterDNSForwarder(a.cfg, a.upLog, a.upstreamTap())
		if err != nil {
			return err
		}
		a.clusterFwd = fwd
		pcfg.ClusterDNS = fwd
	}
	return nil
}

// startCluster runs the informers until ctx is done.
//
// Until the index has synced the Go GC runs at GOGC 50 instead of 100: the
// first lists are a burst of garbage (the streamed bodies, client-go's
// queues, the records built twice) beside a live heap that grows to its
// full size, and at the default target the heap may double that live data,
// so the start-up, not the steady state, set the agent's peak RSS (10,000
// Services and 100,000 addresses: 57-58 MiB instead of 59-62, for some 50
// ms more to sync; bench/RESULTS.md). A GOGC given in the environment is
// left alone.
func (a *Agent) startCluster(ctx context.Context) {
	if a.ix == nil {
		return
	}
	if os.Getenv("GOGC") == "" {
		prev := debug.SetGCPercent(50)
		go func() {
			select {
			case <-a.ix.SyncedCh():
			case <-ctx.Done():
			}
			debug.SetGCPercent(prev)
		}()
	}
	go func() {
		if err := a.ix.Run(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("cluster index stopped", "err", err)
		}
	}()
}

// awaitClusterSync holds the listeners back until the cluster index has
// synced, so that a socket of this agent never answers a cluster name with
// SERVFAIL for want of the index:
//   - When another server already answers on our addresses (the agent this
//     one replaces in a rolling update; its sockets share the port), it
//     carries the traffic meanwhile: wait for the sync however long it
//     takes. Until then /ready is false and the rollout does not proceed.
//   - Otherwise nobody answers pods yet: wait at most --cluster-sync-wait
//     (CoreDNS's kubernetes plugin also delays serving up to 5 s), then
//     serve external names and answer cluster names SERVFAIL (or from
//     --cluster-dns) until the sync.
func (a *Agent) awaitClusterSync(ctx context.Context) {
	if a.ix == nil || a.ix.Synced() || a.cfg.ClusterZone == config.ClusterZoneForward {
		// Forwarded, the zone's answers need nothing from the API server.
		return
	}
	start := time.Now()
	// Whether another server answers is asked alongside the sync: a sync
	// that ends first needs no answer (a replaced supervised process syncs
	// in well under the probe's timeout, which nobody answering takes
	// whole).
	type probed struct {
		other string
		busy  bool
	}
	probe := make(chan probed, 1)
	go func() {
		other, busy := server.Answering(ctx, a.cfg.ListenAddrs(), 300*time.Millisecond)
		probe <- probed{other, busy}
	}()
	var p *probed
	limit := time.Duration(a.cfg.ClusterSyncWait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	nextLog := start.Add(10 * time.Second)
	for !a.ix.Synced() {
		if p != nil && (limit > 0 && time.Since(start) >= limit || limit == 0 && !p.busy) {
			a.log.Warn("serving before the cluster index synced: cluster names get SERVFAIL (or the answer of --cluster-dns) until it does",
				"waited", time.Since(start).Round(time.Millisecond).String())
			return
		}
		if now := time.Now(); now.After(nextLog) {
			a.log.Warn("still waiting for the cluster index to sync before serving", "waited", now.Sub(start).Round(time.Second).String())
			nextLog = now.Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case r := <-probe:
			p = &r
			if r.busy {
				a.log.Info("another DNS server answers on our address: waiting for the cluster index before sharing its traffic", "addr", r.other)
				limit = 0
			}
		case <-a.ix.SyncedCh():
		case <-tick.C:
		}
	}
	a.log.Info("cluster index synced before serving", "waited", time.Since(start).Round(time.Millisecond).String())
}

// clusterReady is the /ready condition for the cluster zone: synced once.
// It stays true through a later API-server outage: the agent keeps
// answering from the last known state, which is what pods need; turning
// not-ready would only take a working DNS server out of rotation.
func (a *Agent) clusterReady() admin.Check {
	return admin.Check{Name: "informers", Fn: func() error {
		if a.ix == nil || a.ix.Synced() || a.cfg.ClusterZone == config.ClusterZoneForward {
			return nil
		}
		return fmt.Errorf("cluster index not synced yet")
	}}
}
