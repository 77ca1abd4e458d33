package k8s

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Index is the agent's authority for the cluster zone. It is fed by
// informers and answers from maps that the informer events keep current.
// Its methods are safe for concurrent use.
//
// Locking: informer handlers are serialized by wmu and own the writer-side
// maps (svcs, slices). They build a service's new records (records.go)
// outside any reader lock and then swap them in, together with the reverse
// and pod indexes, under a short write lock of mu. Lookups hold the read
// lock of mu while they run: a few map reads and, for the colder record
// forms, assembling the answer from immutable records.
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
	// syncPasses counts waitSynced's looks at the informers before the
	// sync, and syncPending is how many it found still to sync the last
	// time (what a test waits on to know the waiter has weighed a change).
	syncPasses  atomic.Uint64
	syncPending atomic.Int32
	zoneMsg     atomic.Pointer[zoneSet]
	// gen moves after every change that may change an answer (Generation);
	// podGen after every change to this node's pods (PodGeneration).
	gen    atomic.Uint64
	podGen atomic.Uint64
	// answers keeps pod and PTR answers assembled per query (memo.go).
	answers *answerMemo
	// podNS is what PodNamespace reads: each address of localPods with
	// the namespace of its newest pod (podtable.go), replaced under wmu
	// when this node's pods change. podNSMap, under wmu, is what it is
	// built from.
	podNS    atomic.Pointer[podTable]
	podNSMap map[netip.Addr]string

	// mcZones are the multicluster zones (Config.MulticlusterZones);
	// mc holds their writer-side state (multicluster.go).
	mcZones []string
	mc      *mcState

	// Writer side: touched only by informer handlers, under wmu.
	wmu        sync.Mutex
	svcStore                                  // the Services and their EndpointSlices
	podByKey   map[string]*pod                // key "ns/name"
	nsCount    int                            // namespaces exposed
	endpoints  int                            // ready addresses indexed
	lastChange time.Time                      // SOA serial source
	syncedAt   time.Time                      // zero until synced
	startedAt  time.Time                      // when Run started the informers
	objCount   [4]int                         // services, slices, namespaces, pods
	counters   struct{ events, rebuilds int } // informer events applied, service records built

	// Reader side: guarded by mu.
	mu         sync.RWMutex
	records    map[string]*svcRecords // key "name.ns": services and their records
	nss        map[string]struct{}    // namespaces that exist and are exposed
	clusterIPs addrIndex[string]      // ClusterIP -> service keys (PTR)
	epIPs      epIndex                // ready endpoint IP -> endpoints (PTR, IP labels)
	podIPs     addrIndex[*pod]        // verified mode: pod IP -> pods, cluster-wide
	localPods  addrIndex[*pod]        // this node's pods (PodNamespace)
	mcRecords  map[string]*svcRecords // key "name.ns": ServiceImports and their records
}

const (
	objServices = iota
	objSlices
	objNamespaces
	objPods
)

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
	if len(c.MulticlusterZones) > 0 && c.Imports == nil && !c.PodsOnly {
		return nil, fmt.Errorf("%w: multicluster zones without a client for ServiceImports", ErrConfig)
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
		svcStore:   newSvcStore(),
		podByKey:   make(map[string]*pod),
		syncCh:     make(chan struct{}),
		records:    make(map[string]*svcRecords),
		nss:        make(map[string]struct{}),
		clusterIPs: make(addrIndex[string]),
		epIPs:      newEPIndex(),
		podIPs:     make(addrIndex[*pod]),
		localPods:  make(addrIndex[*pod]),
		answers:    newAnswerMemo(),
		mcZones:    c.MulticlusterZones,
		mcRecords:  make(map[string]*svcRecords),
	}
	if len(ix.mcZones) > 0 {
		ix.mc = newMCState()
	}
	ix.podNSMap = map[netip.Addr]string{}
	ix.podNS.Store(newPodTable(ix.podNSMap))
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
// something derived from answers (pkg/ndots's search-path shortcuts)
// knows it is still current while Generation has not moved. It says
// nothing about PodNamespace.
func (ix *Index) Generation() uint64 { return ix.gen.Load() }

// PodNamespace returns the namespace of the pod on this node that owns ip.
// Host-network pods are never returned (their address is the node's), nor
// pods that have finished (their address is free for reuse). When a reused
// address is claimed by several pods, the newest pod wins, and removing the
// old pod leaves the new mapping in place.
func (ix *Index) PodNamespace(ip netip.Addr) (string, bool) {
	return ix.podNS.Load().get(ip.Unmap())
}

// PodRef names a pod of this node and the workload that owns it (from its
// controller's ownerReference: Deployment, StatefulSet, DaemonSet, Job, a
// bare ReplicaSet; empty for a bare pod).
type PodRef struct {
	Namespace, Name      string
	OwnerKind, OwnerName string
}

// PodOf returns the pod of this node that owns ip, the one PodNamespace
// answers for, for reports (the search-path report, the busiest pods of a
// namespace). It takes the index's read lock: not for the query path.
func (ix *Index) PodOf(ip netip.Addr) (PodRef, bool) {
	ip = ip.Unmap()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	best := newestPod(ix.localPods[ip])
	if best == nil {
		return PodRef{}, false
	}
	return PodRef{Namespace: best.namespace, Name: best.name, OwnerKind: best.ownerKind, OwnerName: best.ownerName}, true
}

// newestPod is the pod an address belongs to among those claiming it: the
// newest (a reused address is the new pod's), by name when created alike.
func newestPod(pods []*pod) *pod {
	var best *pod
	for _, p := range pods {
		if best == nil || p.created > best.created || (p.created == best.created && p.name > best.name) {
			best = p
		}
	}
	return best
}

// refreshPodNS replaces the table PodNamespace reads with one where the
// addresses ips map to what localPods now says (wmu held).
func (ix *Index) refreshPodNS(ips ...[]netip.Addr) {
	next := ix.podNSMap
	for _, list := range ips {
		for _, ip := range list {
			if best := newestPod(ix.localPods[ip]); best == nil {
				delete(next, ip)
			} else {
				next[ip] = best.namespace
			}
		}
	}
	ix.podNS.Store(newPodTable(next))
}

// Stats is a snapshot of the index for /stats, metrics and logs.
// pkg/observe/metrics reports it as it is: the JSON names are the /stats
// document's informers section (read by `nodedns stats --json`), so fields
// and kinds are added, never renamed.
type Stats struct {
	// Enabled is true in every Stats an Index reports: the zero Stats
	// stands for an agent that serves no cluster zone from informers.
	Enabled bool `json:"enabled"`
	Synced  bool `json:"synced"`
	// Objects counts what the index holds, by kind: ObjServices,
	// ObjEndpointSlices, ObjNamespaces (that exist and are exposed:
	// Config.Namespaces, NamespaceLabels), ObjPods (watched: this node's,
	// or all in verified mode), ObjEndpoints (ready addresses indexed).
	Objects      map[string]int `json:"objects,omitempty"`
	Events       int            `json:"-"` // informer events that changed the index
	Rebuilds     int            `json:"-"` // service records rebuilt
	LastChange   time.Time      `json:"-"` // time of the last change (the SOA serial)
	SyncDuration time.Duration  `json:"-"`
	Zone         string         `json:"-"`
	PodMode      PodMode        `json:"-"`
	// SyncPasses counts the looks at the informers made before the sync;
	// SyncPending is how many informers the last one found still to
	// sync. A test waits on them to know a refusal has been weighed.
	SyncPasses  uint64 `json:"-"`
	SyncPending int    `json:"-"`
}

// The kinds of Stats.Objects.
const (
	ObjServices       = "services"
	ObjEndpointSlices = "endpointslices"
	ObjNamespaces     = "namespaces"
	ObjPods           = "pods"
	ObjEndpoints      = "endpoints"
)

// Stats returns counters of the index.
func (ix *Index) Stats() Stats {
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	st := Stats{
		Enabled: true,
		Synced:  ix.synced.Load(),
		Objects: map[string]int{
			ObjServices:       ix.objCount[objServices],
			ObjEndpointSlices: ix.objCount[objSlices],
			ObjNamespaces:     ix.objCount[objNamespaces],
			ObjPods:           ix.objCount[objPods],
			ObjEndpoints:      ix.endpoints,
		},
		Events:      ix.counters.events,
		Rebuilds:    ix.counters.rebuilds,
		LastChange:  ix.lastChange,
		Zone:        ix.zone,
		PodMode:     ix.cfg.Pods,
		SyncPasses:  ix.syncPasses.Load(),
		SyncPending: int(ix.syncPending.Load()),
	}
	if !ix.syncedAt.IsZero() {
		st.SyncDuration = ix.syncedAt.Sub(ix.startedAt)
	}
	return st
}
