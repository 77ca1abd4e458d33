package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Index is the agent's authority for the cluster zone. It is fed by
// informers and answers from maps that the informer events keep current.
// Its methods are safe for concurrent use.
//
// Locking: informer handlers are serialized by wmu and own the writer-side
// maps (svcs, slices). They build a service's new view outside any reader
// lock and then swap it in, together with the reverse and pod indexes,
// under a short write lock of mu. Lookups hold the read lock of mu while
// they run: a few map reads and, for the colder record forms, assembling
// the answer from immutable views.
type Index struct {
	cfg       Config
	zone      string   // primary zone, lower-case FQDN
	zones     []string // every cluster zone, zones[0] == zone
	ttl       uint32
	client    kubernetes.Interface
	log       *slog.Logger
	now       func() time.Time // injectable for exact SOA serials in tests
	dnsSvcKey string           // DNSService as a services-map key: "name.ns"

	started atomic.Bool
	synced  atomic.Bool
	// podsForbidden: the last list of pods was refused (RBAC).
	podsForbidden atomic.Bool
	syncCh        chan struct{} // closed once synced
	zoneMsg       atomic.Pointer[zoneSet]
	// gen moves after every change that may change an answer (Generation).
	gen atomic.Uint64
	// answers keeps pod and PTR answers assembled per query (memo.go).
	answers *answerMemo

	// Writer side: touched only by informer handlers, under wmu.
	wmu        sync.Mutex
	svcs       map[string]*service            // key "name.ns"
	bySvc      map[string][]*endpointSlice    // key "name.ns", sorted by slice name
	sliceByKey map[string]*endpointSlice      // key "ns/name"
	podByKey   map[string]*pod                // key "ns/name"
	nsCount    int                            // namespaces exposed
	endpoints  int                            // ready addresses indexed
	lastChange time.Time                      // SOA serial source
	syncedAt   time.Time                      // zero until synced
	startedAt  time.Time                      // when Run started the informers
	objCount   [4]int                         // services, slices, namespaces, pods
	counters   struct{ events, rebuilds int } // informer events applied, views built

	// Reader side: guarded by mu.
	mu         sync.RWMutex
	views      map[string]*svcView // key "name.ns": services and their records
	nss        map[string]struct{} // namespaces that exist and are exposed
	clusterIPs addrIndex[string]   // ClusterIP -> service keys (PTR)
	epIPs      epIndex             // ready endpoint IP -> endpoints (PTR, IP labels)
	podIPs     addrIndex[*pod]     // verified mode: pod IP -> pods, cluster-wide
	localPods  addrIndex[*pod]     // this node's pods (PodNamespace)
}

const (
	objServices = iota
	objSlices
	objNamespaces
	objPods
)

// epRef names one ready endpoint address: eps[i] of a slice.
type epRef struct {
	sl *endpointSlice
	i  int32
}

// addrIndex maps an address to the objects that claim it. Claims are rare
// to collide (IP reuse, transitions), so each value is a short slice.
type addrIndex[T comparable] map[netip.Addr][]T

func (m addrIndex[T]) add(a netip.Addr, v T) {
	m[a] = append(m[a], v)
}

func (m addrIndex[T]) remove(a netip.Addr, v T) {
	s := m[a]
	i := slices.Index(s, v)
	if i < 0 {
		return
	}
	if len(s) == 1 {
		delete(m, a)
		return
	}
	m[a] = slices.Delete(s, i, i+1)
}

// epIndex maps endpoint addresses to endpoints. It is the index with one
// entry per endpoint address (100k in a large cluster), so it is laid out
// for size: the first endpoint of an address inline, keyed by 4 bytes for
// IPv4 (24 bytes a slot), the rare further claimants of an address in a
// second map.
type epIndex struct {
	v4   map[[4]byte]epRef
	v6   map[[16]byte]epRef
	more map[netip.Addr][]epRef
}

func newEPIndex() epIndex {
	return epIndex{v4: make(map[[4]byte]epRef), v6: make(map[[16]byte]epRef), more: make(map[netip.Addr][]epRef)}
}

func (x epIndex) first(a netip.Addr) (epRef, bool) {
	if a.Is4() {
		r, ok := x.v4[a.As4()]
		return r, ok
	}
	r, ok := x.v6[a.As16()]
	return r, ok
}

func (x epIndex) setFirst(a netip.Addr, r epRef) {
	if a.Is4() {
		x.v4[a.As4()] = r
	} else {
		x.v6[a.As16()] = r
	}
}

func (x epIndex) add(a netip.Addr, r epRef) {
	if _, ok := x.first(a); !ok {
		x.setFirst(a, r)
		return
	}
	x.more[a] = append(x.more[a], r)
}

func (x epIndex) remove(a netip.Addr, r epRef) {
	more := x.more[a]
	if f, ok := x.first(a); ok && f == r {
		if len(more) == 0 {
			if a.Is4() {
				delete(x.v4, a.As4())
			} else {
				delete(x.v6, a.As16())
			}
			return
		}
		x.setFirst(a, more[0])
		more = more[1:]
	} else if i := slices.Index(more, r); i >= 0 {
		more = slices.Delete(slices.Clone(more), i, i+1)
	} else {
		return
	}
	if len(more) == 0 {
		delete(x.more, a)
	} else {
		x.more[a] = more
	}
}

// get appends the endpoints of a to buf.
func (x epIndex) get(a netip.Addr, buf []epRef) []epRef {
	r, ok := x.first(a)
	if !ok {
		return buf
	}
	return append(append(buf, r), x.more[a]...)
}

// New returns an Index for client. It validates cfg and returns an error
// naming the bad value. Nothing is started until Run.
func New(client kubernetes.Interface, cfg Config) (*Index, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil kubernetes client", ErrConfig)
	}
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(c.DNSService, "/")
	ix := &Index{
		cfg:        c,
		zone:       c.Zone,
		zones:      c.Zones,
		ttl:        c.TTL,
		client:     client,
		log:        c.Logger.With("component", "k8s"),
		now:        time.Now,
		dnsSvcKey:  name + "." + ns,
		svcs:       make(map[string]*service),
		bySvc:      make(map[string][]*endpointSlice),
		sliceByKey: make(map[string]*endpointSlice),
		podByKey:   make(map[string]*pod),
		syncCh:     make(chan struct{}),
		views:      make(map[string]*svcView),
		nss:        make(map[string]struct{}),
		clusterIPs: make(addrIndex[string]),
		epIPs:      newEPIndex(),
		podIPs:     make(addrIndex[*pod]),
		localPods:  make(addrIndex[*pod]),
		answers:    newAnswerMemo(),
	}
	ix.wmu.Lock()
	ix.rebuildZone()
	ix.wmu.Unlock()
	return ix, nil
}

// Zone returns the primary cluster domain as a lower-case FQDN
// ("cluster.local."): the zone of PTR targets and of the search-path walk.
func (ix *Index) Zone() string { return ix.zone }

// Zones returns every cluster domain the index answers, the primary first.
func (ix *Index) Zones() []string { return slices.Clone(ix.zones) }

// Synced reports whether every informer has delivered its initial list.
// It never goes back to false: after an API server outage the last state is
// served while client-go relists.
func (ix *Index) Synced() bool { return ix.synced.Load() }

// SyncedCh is closed once Synced is true, for callers that wait for it.
func (ix *Index) SyncedCh() <-chan struct{} { return ix.syncCh }

// Generation is a counter that moves after every change to the index that
// may change an answer of Lookup (a Service, EndpointSlice, Namespace or,
// in verified mode, Pod event, and the sync). A caller that keeps
// something derived from answers (the server's search-path shortcuts)
// knows it is still current while Generation has not moved. It says
// nothing about PodNamespace.
func (ix *Index) Generation() uint64 { return ix.gen.Load() }

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
				resource: "namespaces", rc: core, transform: namespaceTransform(ix.cfg.nsSel != nil), log: ix.log,
				decode: namespaceDecoder(ix.cfg.nsSel != nil),
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
	ix.log.Info("starting informers", "zones", ix.zones, "pods", string(ix.cfg.Pods), "node", ix.cfg.NodeName,
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
		all := true
		for _, c := range ctrls {
			if !c.HasSynced() && !skip(c) {
				all = false
				break
			}
		}
		if all {
			ix.wmu.Lock()
			ix.syncedAt = ix.now()
			took := ix.syncedAt.Sub(ix.startedAt)
			ix.touch(true)
			ix.wmu.Unlock()
			ix.synced.Store(true)
			ix.gen.Add(1)
			close(ix.syncCh)
			st := ix.Stats()
			ix.log.Info("cluster zone synced", "took", took, "services", st.Services,
				"endpointslices", st.EndpointSlices, "endpoints", st.Endpoints,
				"namespaces", st.Namespaces, "pods", st.Pods)
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
	ix.views = sized(ix.views, n)
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

// touch records a change: the SOA serial is the Unix time of the last
// change, as in CoreDNS. The shared negative answers carry the SOA, so they
// are rebuilt when the serial moves (at most once a second) or when force
// is set (the NS data changed). Called with wmu held.
func (ix *Index) touch(force bool) {
	// After the change is in place: a reader that built an answer from the
	// old state read the old generation first (Generation).
	ix.gen.Add(1)
	ix.counters.events++
	ix.lastChange = ix.now()
	if force || uint32(ix.lastChange.Unix()) != ix.zoneMsg.Load().serial {
		ix.rebuildZone()
	}
}

// onService applies a Service event (old nil: add; cur nil: delete).
func (ix *Index) onService(old, cur any) {
	s, _ := cur.(*service)
	o, _ := old.(*service)
	if s != nil && o != nil && s.equal(o) {
		return
	}
	ref := s
	if ref == nil {
		ref = o
	}
	if ref == nil {
		return
	}
	key := ref.name + "." + ref.namespace
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	prev := ix.svcs[key]
	if s != nil {
		ix.svcs[key] = s
	} else {
		delete(ix.svcs, key)
	}
	ix.objCount[objServices] = len(ix.svcs)
	var view *svcView
	if s != nil {
		view = ix.buildView(s, ix.bySvc[key], nil)
	}
	ix.mu.Lock()
	if prev != nil {
		for _, ip := range prev.ips {
			ix.clusterIPs.remove(ip, key)
		}
	}
	if view != nil {
		for _, ip := range s.ips {
			ix.clusterIPs.add(ip, key)
		}
		ix.views[key] = view
	} else {
		delete(ix.views, key)
	}
	ix.mu.Unlock()
	ix.touch(key == ix.dnsSvcKey)
}

// onSlice applies an EndpointSlice event.
func (ix *Index) onSlice(old, cur any) {
	e, _ := cur.(*endpointSlice)
	o, _ := old.(*endpointSlice)
	if e != nil && o != nil && e.equal(o) {
		return
	}
	ref := e
	if ref == nil {
		ref = o
	}
	if ref == nil {
		return
	}
	skey := ref.namespace + "/" + ref.name
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	// The stored slice, not the event's old object, is what the indexes
	// hold: they may differ after a missed event and a relist.
	prev := ix.sliceByKey[skey]
	if e != nil {
		ix.sliceByKey[skey] = e
	} else {
		delete(ix.sliceByKey, skey)
	}
	ix.objCount[objSlices] = len(ix.sliceByKey)

	// Service keys whose slice sets change.
	var keys [2]string
	if prev != nil && prev.service != "" {
		k := prev.service + "." + prev.namespace
		ix.bySvc[k] = removeSlice(ix.bySvc[k], prev)
		if len(ix.bySvc[k]) == 0 {
			delete(ix.bySvc, k)
		}
		keys[0] = k
	}
	if e != nil && e.service != "" {
		k := e.service + "." + e.namespace
		ix.bySvc[k] = insertSlice(ix.bySvc[k], e)
		if k != keys[0] {
			keys[1] = k
		}
	}
	var views [2]*svcView
	for i, k := range keys {
		if s := ix.svcs[k]; k != "" && s != nil {
			views[i] = ix.buildView(s, ix.bySvc[k], ix.peekView(k))
		}
	}

	ix.mu.Lock()
	if prev != nil && prev.service != "" {
		for i := range prev.len() {
			ix.epIPs.remove(prev.ip(i), epRef{prev, int32(i)})
		}
		ix.endpoints -= prev.len()
	}
	if e != nil && e.service != "" {
		for i := range e.len() {
			ix.epIPs.add(e.ip(i), epRef{e, int32(i)})
		}
		ix.endpoints += e.len()
	}
	for i, k := range keys {
		if views[i] != nil {
			ix.views[k] = views[i]
		}
	}
	ix.mu.Unlock()
	ix.touch(false)
}

// peekView returns the published view of key. Called with wmu held: only
// writers publish, so no read lock is needed against them.
func (ix *Index) peekView(key string) *svcView {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.views[key]
}

func insertSlice(s []*endpointSlice, e *endpointSlice) []*endpointSlice {
	i, _ := slices.BinarySearchFunc(s, e, func(a, b *endpointSlice) int { return cmp.Compare(a.name, b.name) })
	return slices.Insert(slices.Clip(s), i, e)
}

func removeSlice(s []*endpointSlice, e *endpointSlice) []*endpointSlice {
	// Copy: published views share the old slice.
	out := make([]*endpointSlice, 0, len(s))
	for _, x := range s {
		if x != e {
			out = append(out, x)
		}
	}
	return out
}

// onNamespace applies a Namespace event. Whether a namespace exists and
// is exposed (Namespaces, NamespaceLabels) decides between NXDOMAIN and an
// answer at query time, so nothing is rebuilt.
func (ix *Index) onNamespace(old, cur any) {
	n, _ := cur.(*namespace)
	o, _ := old.(*namespace)
	if n != nil && o != nil && ix.cfg.nsSel == nil {
		return // only existence matters; labels are not kept
	}
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	ix.mu.Lock()
	if n != nil && ix.cfg.exposes(n.name, n.labels) {
		ix.nss[n.name] = struct{}{}
	} else if n != nil {
		delete(ix.nss, n.name) // its labels no longer match
	} else if o != nil {
		delete(ix.nss, o.name)
	}
	ix.nsCount = len(ix.nss)
	ix.mu.Unlock()
	ix.objCount[objNamespaces] = ix.nsCount
	ix.touch(false)
}

// onPod applies a Pod event to the node-local index (PodNamespace) and, in
// verified mode, to the cluster-wide pod-record index.
func (ix *Index) onPod(old, cur any) {
	p, _ := cur.(*pod)
	o, _ := old.(*pod)
	if p != nil && o != nil && p.equal(o) {
		return
	}
	verified := ix.cfg.Pods == PodsVerified
	if p != nil && !p.local && !verified {
		// The field selector keeps other nodes' pods out; this guards
		// against servers (and fakes) that ignore it.
		p = nil
	}
	ref := p
	if ref == nil {
		ref = o
	}
	if ref == nil {
		return
	}
	key := ref.namespace + "/" + ref.name
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	prev := ix.podByKey[key]
	if p != nil {
		ix.podByKey[key] = p
	} else {
		delete(ix.podByKey, key)
	}
	ix.objCount[objPods] = len(ix.podByKey)
	ix.mu.Lock()
	if prev != nil {
		for _, ip := range prev.ips {
			ix.localPods.remove(ip, prev)
			ix.podIPs.remove(ip, prev)
		}
	}
	if p != nil {
		for _, ip := range p.ips {
			// A finished pod's address may already be a new pod's, and a
			// host-network pod's address is the node's: neither says which
			// namespace a query comes from.
			if p.local && !p.hostNetwork && !p.done {
				ix.localPods.add(ip, p)
			}
			// CoreDNS drops terminating pods from verified answers; we also
			// drop finished ones, whose address is released (CoreDNS keeps
			// them until they are deleted).
			if verified && !p.deleting && !p.done {
				ix.podIPs.add(ip, p)
			}
		}
	}
	ix.mu.Unlock()
	if verified {
		ix.touch(false)
	}
}

// PodNamespace returns the namespace of the pod on this node that owns ip.
// Host-network pods are never returned (their address is the node's), nor
// pods that have finished (their address is free for reuse). When a reused
// address is claimed by several pods, the newest pod wins, and removing the
// old pod leaves the new mapping in place.
func (ix *Index) PodNamespace(ip netip.Addr) (string, bool) {
	ip = ip.Unmap()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var best *pod
	for _, p := range ix.localPods[ip] {
		if best == nil || p.created > best.created || (p.created == best.created && p.name > best.name) {
			best = p
		}
	}
	if best == nil {
		return "", false
	}
	return best.namespace, true
}

// Stats is a snapshot of the index for /stats and logs.
type Stats struct {
	Synced         bool
	Services       int
	EndpointSlices int
	Namespaces     int       // namespaces that exist and are exposed (Config.Namespaces, NamespaceLabels)
	Pods           int       // pods watched (this node's, or all in verified mode)
	Endpoints      int       // ready endpoint addresses indexed
	Events         int       // informer events that changed the index
	Rebuilds       int       // service views rebuilt
	LastChange     time.Time // time of the last change (the SOA serial)
	SyncDuration   time.Duration
	Zone           string
	PodMode        PodMode
}

// Stats returns counters of the index.
func (ix *Index) Stats() Stats {
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	st := Stats{
		Synced:         ix.synced.Load(),
		Services:       ix.objCount[objServices],
		EndpointSlices: ix.objCount[objSlices],
		Namespaces:     ix.objCount[objNamespaces],
		Pods:           ix.objCount[objPods],
		Endpoints:      ix.endpoints,
		Events:         ix.counters.events,
		Rebuilds:       ix.counters.rebuilds,
		LastChange:     ix.lastChange,
		Zone:           ix.zone,
		PodMode:        ix.cfg.Pods,
	}
	if !ix.syncedAt.IsZero() {
		st.SyncDuration = ix.syncedAt.Sub(ix.startedAt)
	}
	return st
}

// zoneMsgs are the answers shared by one zone. They carry the SOA, whose
// serial moves with every change, so they are rebuilt together and
// swapped atomically as a zoneSet.
type zoneMsgs struct {
	zone             string // lower-case FQDN
	idx              int    // position in Index.zones
	nxdomain, nodata *dns.Msg
	soa, ns, txt     *dns.Msg
	nsA, nsAAAA      *dns.Msg // ns.dns.<zone> A/AAAA, nil: NODATA
}

// zoneSet holds the shared answers of every zone.
type zoneSet struct {
	serial uint32
	z      []*zoneMsgs // as Index.zones
	// revNX are the NXDOMAIN answers of the reverse zones (in-addr.arpa.,
	// ip6.arpa.), with their SOA, for PTR queries that do not fall
	// through.
	revNX [len(reverseZones)]*dns.Msg
	// revNoData answer other names of the reverse zones that exist (their
	// apexes).
	revNoData [len(reverseZones)]*dns.Msg
}

// dnsVersion is the Kubernetes DNS schema version the zone follows, served
// as TXT at dns-version.<zone>.
const dnsVersion = "1.1.0"

// rebuildZone rebuilds the zone-wide answers. Called with wmu held.
func (ix *Index) rebuildZone() {
	serial := uint32(ix.lastChange.Unix())
	if ix.lastChange.IsZero() {
		serial = 0
	}
	zs := &zoneSet{serial: serial, z: make([]*zoneMsgs, len(ix.zones))}
	for i, z := range ix.zones {
		zs.z[i] = ix.buildZoneMsgs(z, i, serial)
	}
	for i, z := range reverseZones {
		soa := ix.soa(z, serial)
		zs.revNX[i] = &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}}
		zs.revNoData[i] = &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Ns: []dns.RR{soa}}
	}
	ix.zoneMsg.Store(zs)
}

// soa is the SOA record of zone, as CoreDNS writes it.
func (ix *Index) soa(zone string, serial uint32) *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: min(ix.ttl, 300)},
		Ns:      "ns.dns." + zone,
		Mbox:    "hostmaster." + zone,
		Serial:  serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  ix.ttl,
	}
}

func (ix *Index) buildZoneMsgs(zone string, idx int, serial uint32) *zoneMsgs {
	soa := ix.soa(zone, serial)
	zm := &zoneMsgs{
		zone:     zone,
		idx:      idx,
		nxdomain: &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true, Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}},
		nodata:   &dns.Msg{MsgHdr: dns.MsgHdr{Authoritative: true}, Ns: []dns.RR{soa}},
		soa:      ix.answer([]dns.RR{soa}, nil),
		txt: ix.answer([]dns.RR{&dns.TXT{
			Hdr: dns.RR_Header{Name: "dns-version." + zone, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 28800},
			Txt: []string{dnsVersion},
		}}, nil),
	}

	// NS: the cluster DNS Service by name with its ClusterIPs as glue, as
	// CoreDNS answers with its own Service; without that Service,
	// ns.dns.<zone> with the configured addresses. The target is in the
	// zone asked, as in CoreDNS.
	target, addrs := "ns.dns."+zone, ix.cfg.NSAddrs
	if s := ix.svcs[ix.dnsSvcKey]; s != nil && s.kind == kindClusterIP && len(s.ips) > 0 {
		target, addrs = s.name+"."+s.namespace+".svc."+zone, s.ips
	}
	ns := &dns.NS{Hdr: ix.hdr(zone, dns.TypeNS), Ns: target}
	var glue, a, aaaa []dns.RR
	for _, ip := range addrs {
		glue = append(glue, ix.addrRR(target, ip))
		if ip.Is4() {
			a = append(a, ix.addrRR("ns.dns."+zone, ip))
		} else {
			aaaa = append(aaaa, ix.addrRR("ns.dns."+zone, ip))
		}
	}
	zm.ns = ix.answer([]dns.RR{ns}, glue)
	if len(a) > 0 {
		zm.nsA = ix.answer(a, nil)
	}
	if len(aaaa) > 0 {
		zm.nsAAAA = ix.answer(aaaa, nil)
	}
	return zm
}

// sized returns a copy of m with room for n entries.
func sized[M ~map[K]V, K comparable, V any](m M, n int) M {
	out := make(M, max(n, len(m)))
	for k, v := range m {
		out[k] = v
	}
	return out
}
