package k8s

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// watchesPods says which pods are watched: all of them in verified mode
// (pod records must be checked against every pod of the cluster, as CoreDNS
// does), else only this node's when NodeName is set (for PodNamespace),
// else none.
func (ix *Index) watchesPods() (watch, clusterWide bool) {
	if ix.cfg.Pods == PodsVerified && !ix.cfg.PodsOnly {
		return true, true
	}
	return ix.cfg.NodeName != "", false
}

// Run starts the informers and blocks until ctx is done. client-go's
// reflectors relist and rewatch on their own when the API server goes away;
// meanwhile the index keeps answering from the last state it saw. Run may
// be called once.
func (ix *Index) Run(ctx context.Context) error {
	if !ix.started.CompareAndSwap(false, true) {
		return errors.New("k8s index: Run called twice")
	}
	ix.wmu.Lock()
	ix.startedAt = ix.now()
	ix.wmu.Unlock()

	cl := ix.client
	core, disc := cl.CoreV1().RESTClient(), cl.DiscoveryV1().RESTClient()
	var ctrls []cache.Controller
	// PodsOnly (--cluster-zone forward): the zone is answered elsewhere;
	// only this node's pods are watched, for the search-path walk.
	if !ix.cfg.PodsOnly {
		ctrls = []cache.Controller{
			ix.informer(&corev1.Service{}, ix.onService, listSpec{
				resource: "services", rc: core, transform: transformService, log: ix.log,
				decode: decodeService, sized: ix.reserveServices,
				typed: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cl.CoreV1().Services("").List(ctx, o)
				},
			}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cl.CoreV1().Services("").Watch(ctx, o)
			}),
			ix.informer(&corev1.Namespace{}, ix.onNamespace, listSpec{
				resource: "namespaces", rc: core, transform: namespaceTransform(selectorKeys(ix.cfg.nsSel)), log: ix.log,
				decode: namespaceDecoder(selectorKeys(ix.cfg.nsSel)),
				typed: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cl.CoreV1().Namespaces().List(ctx, o)
				},
			}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cl.CoreV1().Namespaces().Watch(ctx, o)
			}),
		}
		if !ix.cfg.NoEndpoints {
			// Only slices that belong to a Service: the label is how CoreDNS
			// ties a slice to its service, and unlabelled slices cannot be
			// named. With NoEndpoints there is no slice watch at all, as with
			// CoreDNS's noendpoints.
			ctrls = append(ctrls, ix.informer(&discoveryv1.EndpointSlice{}, ix.onSlice, listSpec{
				resource: "endpointslices", rc: disc, transform: endpointSliceTransform(ix.cfg.EndpointPodNames), log: ix.log,
				decode: endpointSliceDecoder(ix.cfg.EndpointPodNames), sized: ix.reserveSlices,
				opts: func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName },
				typed: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cl.DiscoveryV1().EndpointSlices("").List(ctx, o)
				},
			}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cl.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
			}))
		}
	}
	if !ix.cfg.PodsOnly && ix.mc != nil {
		ctrls = append(ctrls, ix.mcControllers()...)
	}
	var podCtrl cache.Controller
	if watchPods, clusterWide := ix.watchesPods(); watchPods {
		sel := ""
		if !clusterWide {
			// This node's pods only: the API server serves this from its
			// watch cache's spec.nodeName index, as it does for kubelet.
			sel = fields.OneTermEqualSelector("spec.nodeName", ix.cfg.NodeName).String()
		}
		tr := podTransform(ix.cfg.NodeName)
		podCtrl = ix.informer(&corev1.Pod{}, ix.onPod, listSpec{
			resource: "pods", rc: core, transform: tr, log: ix.log,
			decode: podDecoder(ix.cfg.NodeName),
			opts:   func(o *metav1.ListOptions) { o.FieldSelector = sel },
			failed: ix.podListFailed, sized: func([]runtime.Object) { ix.podListed() },
			typed: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cl.CoreV1().Pods("").List(ctx, o)
			},
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cl.CoreV1().Pods("").Watch(ctx, o)
		})
		ctrls = append(ctrls, podCtrl)
	}
	if ix.cfg.PodsOnly {
		ix.log.Info("starting the pod informer only: the cluster zone is not answered here", "node", ix.cfg.NodeName)
	}
	if ix.cfg.IgnoreEmptyService && ix.cfg.NoEndpoints && !ix.cfg.PodsOnly {
		ix.log.Warn("ignore-empty-service with no-endpoints: no Service has endpoints, so every ClusterIP Service is NXDOMAIN (as in CoreDNS)")
	}
	for _, z := range reverseZones {
		if !ix.fallsThrough(z) {
			ix.log.Info("fallthrough does not cover all of a reverse zone: PTR queries there for addresses the cluster does not know get NXDOMAIN", "zone", z, "fallthrough", ix.cfg.Fallthrough)
		}
	}
	ix.log.Info("starting informers", "zones", ix.zones, "multiclusterZones", ix.mcZones, "pods", string(ix.cfg.Pods), "node", ix.cfg.NodeName,
		"endpoints", !ix.cfg.NoEndpoints, "endpointPodNames", ix.cfg.EndpointPodNames,
		"ignoreEmptyService", ix.cfg.IgnoreEmptyService, "namespaces", ix.cfg.Namespaces,
		"namespaceLabels", ix.cfg.NamespaceLabels, "fallthrough", ix.cfg.Fallthrough)

	var wg sync.WaitGroup
	for _, c := range ctrls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.RunWithContext(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		ix.waitSynced(ctx, ctrls, func(c cache.Controller) bool {
			// This node's pods only feed the search-path walk, which
			// does without them; a ClusterRole without pods must not keep
			// the zone from syncing. Verified pod records need them.
			return c == podCtrl && ix.cfg.Pods != PodsVerified && ix.podsForbidden.Load()
		})
	}()
	<-ctx.Done()
	wg.Wait()
	ix.log.Info("informers stopped")
	return nil
}

// waitSynced flips Synced once every informer has handled its initial list
// (but those for which skip says they need not). client-go has no callback
// for that, so it polls; often, because the listeners of a starting agent
// wait for it.
func (ix *Index) waitSynced(ctx context.Context, ctrls []cache.Controller, skip func(cache.Controller) bool) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	lastLog := ix.now()
	for {
		pending := int32(0)
		for _, c := range ctrls {
			if !c.HasSynced() && !skip(c) {
				pending++
			}
		}
		ix.syncPending.Store(pending)
		ix.syncPasses.Add(1)
		if pending == 0 {
			ix.wmu.Lock()
			ix.syncedAt = ix.now()
			took := ix.syncedAt.Sub(ix.startedAt)
			ix.touch(true)
			ix.wmu.Unlock()
			ix.synced.Store(true)
			ix.gen.Add(1)
			close(ix.syncCh)
			st := ix.Stats()
			ix.log.Info("cluster zone synced", "took", took, ObjServices, st.Objects[ObjServices],
				ObjEndpointSlices, st.Objects[ObjEndpointSlices], ObjEndpoints, st.Objects[ObjEndpoints],
				ObjNamespaces, st.Objects[ObjNamespaces], ObjPods, st.Objects[ObjPods])
			return
		}
		if now := ix.now(); now.Sub(lastLog) >= 5*time.Second {
			lastLog = now
			ix.log.Warn("waiting for the Kubernetes API; cluster names are not answered yet")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (ix *Index) informer(objType runtime.Object, handle func(old, cur any), ls listSpec, watchFn cache.WatchFuncWithContext) cache.Controller {
	_, c := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &cache.ListWatch{
			ListWithContextFunc: ls.lister(),
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				if ls.opts != nil {
					ls.opts(&o)
				}
				return watchFn(ctx, o)
			},
		},
		ObjectType: objType,
		Transform:  ls.transform,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { handle(nil, obj) },
			UpdateFunc: func(old, cur any) { handle(old, cur) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				handle(obj, nil)
			},
		},
	})
	return c
}

// podListFailed is told every failed list of pods. A Forbidden one means
// the ServiceAccount may not list pods (a ClusterRole without them): that
// is said once, with what it costs.
func (ix *Index) podListFailed(err error) {
	if !apierrors.IsForbidden(err) || !ix.podsForbidden.CompareAndSwap(false, true) {
		return
	}
	if ix.cfg.Pods == PodsVerified {
		ix.log.Error("listing pods is forbidden: pods verified needs list and watch on pods (deploy/daemonset.yaml's ClusterRole); the cluster zone is not answered until then", "err", err)
		return
	}
	ix.log.Warn("listing this node's pods is forbidden: the search-path walk (autopath) is off until the ServiceAccount may list and watch pods (deploy/daemonset.yaml's ClusterRole); cluster names are answered", "err", err)
}

// podListed is told every successful list of pods.
func (ix *Index) podListed() {
	if ix.podsForbidden.CompareAndSwap(true, false) {
		ix.log.Info("listing pods allowed again")
	}
}

// reserveServices sizes the service maps for a list of items before the
// informer hands them over one by one. Growing maps of 10,000 services and
// 100,000 endpoint addresses doubling by doubling was a tenth of the
// start-up; relists find them sized already.
func (ix *Index) reserveServices(items []runtime.Object) {
	n := len(items)
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	if n <= 2*len(ix.svcs)+1024 {
		return
	}
	ix.svcs = sized(ix.svcs, n)
	ix.mu.Lock()
	ix.records = sized(ix.records, n)
	ix.clusterIPs = sized(ix.clusterIPs, n)
	ix.mu.Unlock()
}

// reserveSlices is reserveServices for EndpointSlices and their addresses.
func (ix *Index) reserveSlices(items []runtime.Object) {
	var v4, v6 int
	for _, it := range items {
		if e, ok := it.(*endpointSlice); ok && e.service != "" {
			if e.v6 {
				v6 += e.len()
			} else {
				v4 += e.len()
			}
		}
	}
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	if n := len(items); n > 2*len(ix.sliceByKey)+1024 {
		ix.sliceByKey = sized(ix.sliceByKey, n)
		ix.bySvc = sized(ix.bySvc, n)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if v4 > 2*len(ix.epIPs.v4)+1024 {
		ix.epIPs.v4 = sized(ix.epIPs.v4, v4)
	}
	if v6 > 2*len(ix.epIPs.v6)+1024 {
		ix.epIPs.v6 = sized(ix.epIPs.v6, v6)
	}
}

// sized returns a copy of m with room for n entries.
func sized[M ~map[K]V, K comparable, V any](m M, n int) M {
	out := make(M, max(n, len(m)))
	for k, v := range m {
		out[k] = v
	}
	return out
}
