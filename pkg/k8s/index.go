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
	"k8s.io/apimachinery/pkg/api/meta"
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
	zoneMsg atomic.Pointer[zoneSet]

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
		views:      make(map[string]*svcView),
		nss:        make(map[string]struct{}),
		clusterIPs: make(addrIndex[string]),
		epIPs:      newEPIndex(),
		podIPs:     make(addrIndex[*pod]),
		localPods:  make(addrIndex[*pod]),
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
	var ctrls []cache.Controller
	if !ix.cfg.PodsOnly {
		ctrls = ix.zoneInformers()
	}
	if watchPods, clusterWide := ix.watchesPods(); watchPods {
		sel := ""
		if !clusterWide {
			sel = fields.OneTermEqualSelector("spec.nodeName", ix.cfg.NodeName).String()
		}
		ctrls = append(ctrls, ix.informer(&corev1.Pod{}, podTransform(ix.cfg.NodeName), ix.onPod,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return cl.CoreV1().Pods("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return cl.CoreV1().Pods("").Watch(ctx, o)
			}))
	}
	if ix.cfg.PodsOnly {
		ix.log.Info("starting the pod informer only: the cluster zone is not answered here", "node", ix.cfg.NodeName)
	} else {
		ix.logOptions()
	}

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
		ix.waitSynced(ctx, ctrls)
	}()
	<-ctx.Done()
	wg.Wait()
	ix.log.Info("informers stopped")
	return nil
}

// logOptions reports the zone's options as the informers start.
func (ix *Index) logOptions() {
	if ix.cfg.IgnoreEmptyService && ix.cfg.NoEndpoints {
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
}

// zoneInformers are the informers the zone's records come from: Services,
// Namespaces and (unless NoEndpoints) EndpointSlices.
func (ix *Index) zoneInformers() []cache.Controller {
	cl := ix.client
	ctrls := []cache.Controller{
		ix.informer(&corev1.Service{}, transformService, ix.onService,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cl.CoreV1().Services("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cl.CoreV1().Services("").Watch(ctx, o)
			}),
		ix.informer(&corev1.Namespace{}, namespaceTransform(ix.cfg.nsSel != nil), ix.onNamespace,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cl.CoreV1().Namespaces().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cl.CoreV1().Namespaces().Watch(ctx, o)
			}),
	}
	if !ix.cfg.NoEndpoints {
		// Only slices that belong to a Service: the label is how CoreDNS
		// ties a slice to its service, and unlabelled slices cannot be
		// named. With NoEndpoints there is no slice watch at all, as with
		// CoreDNS's noendpoints.
		ctrls = append(ctrls, ix.informer(&discoveryv1.EndpointSlice{}, endpointSliceTransform(ix.cfg.EndpointPodNames), ix.onSlice,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = discoveryv1.LabelServiceName
				return cl.DiscoveryV1().EndpointSlices("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = discoveryv1.LabelServiceName
				return cl.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
			}))
	}
	return ctrls
}

// waitSynced flips Synced once every informer has handled its initial list.
func (ix *Index) waitSynced(ctx context.Context, ctrls []cache.Controller) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	lastLog := ix.now()
	for {
		all := true
		for _, c := range ctrls {
			if !c.HasSynced() {
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

func (ix *Index) informer(objType runtime.Object, transform cache.TransformFunc, handle func(old, cur any),
	list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) cache.Controller {
	_, c := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &cache.ListWatch{ListWithContextFunc: strippedLister(list, transform), WatchFuncWithContext: watchFn},
		ObjectType:    objType,
		Transform:     transform,
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

// touch records a change: the SOA serial is the Unix time of the last
// change, as in CoreDNS. The shared negative answers carry the SOA, so they
// are rebuilt when the serial moves (at most once a second) or when force
// is set (the NS data changed). Called with wmu held.
func (ix *Index) touch(force bool) {
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

// strippedLister wraps a List call so that each page is stripped before it
// is returned. client-go's pager gathers all pages of a list before the
// informer sees any; with the API types that is every Service and every
// EndpointSlice of the cluster decoded at once, several times the size of
// the index and the agent's peak memory. Stripped pages make the peak one
// decoded page.
//
// That only helps if the list is paged: the API server ignores limit for
// resourceVersion "0" (a list served whole from its watch cache), which is
// what a reflector asks first. So the first list asks for the most recent
// version instead (""), which pages. Since Kubernetes 1.31 such consistent
// lists are served from the watch cache too (ConsistentListFromCache, and
// paged from it with ListFromCacheSnapshot in 1.33+), so a fleet of agents
// starting at once does not turn into a storm of etcd range reads. Relists
// keep the version the reflector asks for.
func strippedLister(list cache.ListWithContextFunc, transform cache.TransformFunc) cache.ListWithContextFunc {
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		if opts.ResourceVersion == "0" && opts.Continue == "" {
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
			opts.Limit = listPage
		} else if opts.Continue != "" {
			opts.Limit = listPage
		}
		obj, err := list(ctx, opts)
		if err != nil {
			return nil, err
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return nil, fmt.Errorf("list result %T: %w", obj, err)
		}
		items, err := meta.ExtractList(obj)
		if err != nil {
			return nil, fmt.Errorf("list result %T: %w", obj, err)
		}
		out := &strippedList{Items: make([]runtime.Object, 0, len(items))}
		out.ResourceVersion, out.Continue = lm.GetResourceVersion(), lm.GetContinue()
		out.RemainingItemCount = lm.GetRemainingItemCount()
		for _, it := range items {
			s, err := transform(it)
			if err != nil {
				return nil, err
			}
			out.Items = append(out.Items, s.(runtime.Object))
		}
		return out, nil
	}
}

// listPage is the page size of paged lists, client-go's default. Measured
// with 10,000 Services and EndpointSlices: pages of 2000 start the agent
// about 0.5 s sooner but raise its peak RSS by 10 MiB.
const listPage = 500

// strippedList is a page of stripped objects with the list's metadata.
type strippedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

func (l *strippedList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = slices.Clone(l.Items)
	return &c
}
