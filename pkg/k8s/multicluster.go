package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// Multi-Cluster Services (KEP-1645, sigs.k8s.io/mcs-api), as CoreDNS's
// kubernetes plugin answers them with `multicluster ZONES` (CoreDNS 1.15:
// plugin/kubernetes controller.go, kubernetes.go
// findMultiClusterServices, parse.go, object/serviceimport.go,
// object/multicluster_endpoint.go):
//
//   - A multicluster zone (clusterset.local) is answered from the
//     ServiceImports of multicluster.x-k8s.io/v1alpha1 and the
//     EndpointSlices labelled multicluster.kubernetes.io/service-name
//     (the imported endpoints, one slice per source cluster, named by the
//     multicluster.kubernetes.io/source-cluster label). Services are not
//     visible there, nor ServiceImports in the cluster zone.
//   - Names have the cluster zone's grammar (the apex, dns-version,
//     ns.dns, <ns>.svc, pods), with the imports in place of the Services
//     and one more form: <endpoint>.<cluster>.<svc>.<ns>.svc.<zone> (two
//     labels left of the service, neither starting with '_'; with an '_'
//     they are _port._proto). <endpoint>.<svc>.<ns>.svc.<zone> names the
//     endpoints of slices without a source cluster.
//   - A ClusterSetIP import answers with its spec.ips, one record per
//     port and IP: an import without ports is NXDOMAIN (a Service always
//     has a port); SRV targets the import's name. A Headless import
//     answers with the ready endpoints of every cluster; SRV targets
//     <endpoint>.<cluster>.<svc>... The namespace must exist in this
//     cluster (and be exposed) as for Services.
//   - Neither spec.ips nor the imported endpoints get PTR records
//     (CoreDNS indexes Services and their own slices only).
//   - The SOA serial is the time of the last multicluster change.
//   - With namespace-labels set, CoreDNS lists ServiceImports with that
//     selector (on the imports' own labels, as well as the namespace's);
//     so does this.
//
// Imports are custom resources, which the API server serves as JSON only:
// they are listed and watched through a dynamic client and stripped to the
// fields above (name, namespace, type, ips, ports) by the transform. The
// imported slices go through the EndpointSlice transform (the typed list:
// they are few). Where this departs from CoreDNS: a missing
// ServiceImport CRD is no imports (logged once; the list is tried again
// with client-go's backoff), where CoreDNS never syncs.

// The Multi-Cluster Services API's names (sigs.k8s.io/mcs-api
// pkg/apis/v1alpha1, which CoreDNS 1.15 reads at v0.5.2).
const (
	mcsLabelServiceName   = "multicluster.kubernetes.io/service-name"
	mcsLabelSourceCluster = "multicluster.kubernetes.io/source-cluster"
	mcsHeadless           = "Headless"
)

// ServiceImportResource is the resource nodedns lists ServiceImports from.
var ServiceImportResource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceimports"}

// mcState is the writer side of the multicluster zones, under Index.wmu:
// the ServiceImports (svcs) and their EndpointSlices.
type mcState struct {
	svcStore
	lastChange time.Time // the multicluster zones' SOA serial
	// missing: the last list of ServiceImports found no such resource
	// (the CRD is not installed), said once until it is.
	missing atomic.Bool
}

func newMCState() *mcState {
	return &mcState{svcStore: newSvcStore()}
}

// transformImport strips a ServiceImport (unstructured, from the dynamic
// client) to a service: kind headless for type Headless, else ClusterIP
// (CoreDNS treats anything but Headless as ClusterSetIP), the spec's ips
// and ports. An import keeps no sentinel port: without ports it has no
// records.
func transformImport(obj any) (any, error) {
	switch o := obj.(type) {
	case *service:
		return o, nil
	case *unstructured.Unstructured:
		return newImport(o)
	}
	return nil, fmt.Errorf("serviceimport transform: unexpected %T", obj)
}

func newImport(o *unstructured.Unstructured) (*service, error) {
	s := &service{name: o.GetName(), namespace: o.GetNamespace(), kind: kindClusterIP}
	spec, _, _ := unstructured.NestedMap(o.Object, "spec")
	if t, _ := spec["type"].(string); t == mcsHeadless {
		s.kind = kindHeadless
	}
	ips, _ := spec["ips"].([]any)
	for _, x := range ips {
		str, _ := x.(string)
		if a, err := netip.ParseAddr(str); err == nil {
			s.ips = append(s.ips, a.Unmap())
		}
	}
	ports, _ := spec["ports"].([]any)
	for _, x := range ports {
		p, _ := x.(map[string]any)
		if p == nil {
			continue
		}
		name, _ := p["name"].(string)
		proto, _ := p["protocol"].(string)
		var num int64
		switch v := p["port"].(type) {
		case int64:
			num = v
		case float64:
			num = int64(v)
		}
		if num < 0 || num > 65535 {
			continue // the CRD's schema refuses it; a port past 16 bits has no SRV form
		}
		s.ports = append(s.ports, port{name: strings.ToLower(name), proto: protoName(proto), port: int32(num)})
	}
	return s, nil
}

// mcSliceTransform returns the transform of the imported EndpointSlices:
// the EndpointSlice transform, with the service and the cluster taken
// from the multicluster labels.
func mcSliceTransform(podNames bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *endpointSlice:
			return o, nil
		case *discoveryv1.EndpointSlice:
			e := newEndpointSlice(pbdecode.EndpointSliceOf(o), podNames)
			e.service = o.Labels[mcsLabelServiceName]
			e.cluster = strings.ToLower(o.Labels[mcsLabelSourceCluster])
			return e, nil
		}
		return nil, fmt.Errorf("multicluster endpointslice transform: unexpected %T", obj)
	}
}

// mcControllers are the informers of the multicluster zones.
func (ix *Index) mcControllers() []cache.Controller {
	cl, dyn := ix.client, ix.cfg.Imports
	sel := strings.TrimSpace(ix.cfg.NamespaceLabels)
	imports := ix.informer(&unstructured.Unstructured{}, ix.onImport, listSpec{
		resource: "serviceimports", transform: transformImport, log: ix.log,
		opts: func(o *metav1.ListOptions) {
			if sel != "" {
				o.LabelSelector = sel // as CoreDNS: see above
			}
		},
		typed: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := dyn.Resource(ServiceImportResource).List(ctx, o)
			if apierrors.IsNotFound(err) {
				if ix.mc.missing.CompareAndSwap(false, true) {
					ix.log.Warn("no ServiceImport resource in the API server (the Multi-Cluster Services CRDs of sigs.k8s.io/mcs-api are not installed): the multicluster zones have no services until it is",
						"resource", ServiceImportResource.String(), "zones", ix.mcZones)
				}
				return &unstructured.UnstructuredList{}, nil
			}
			if err == nil && ix.mc.missing.CompareAndSwap(true, false) {
				ix.log.Info("ServiceImports listed", "resource", ServiceImportResource.String())
			}
			return l, err
		},
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return dyn.Resource(ServiceImportResource).Watch(ctx, o)
	})
	slices := ix.informer(&discoveryv1.EndpointSlice{}, ix.onMCSlice, listSpec{
		resource: "endpointslices", transform: mcSliceTransform(ix.cfg.EndpointPodNames), log: ix.log,
		opts: func(o *metav1.ListOptions) { o.LabelSelector = mcsLabelServiceName },
		typed: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cl.DiscoveryV1().EndpointSlices("").List(ctx, o)
		},
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cl.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
	})
	if ix.cfg.NoEndpoints {
		// CoreDNS's noendpoints stops only the Service slices' watch.
		ix.log.Info("no-endpoints leaves the imported EndpointSlices watched, as CoreDNS does")
	}
	return []cache.Controller{imports, slices}
}

// touchMC records a multicluster change (wmu held): a new generation, and
// the multicluster zones' SOA serial.
func (ix *Index) touchMC() {
	ix.changed(&ix.mc.lastChange, ix.zoneMsg.Load().mcSerial, false)
}

// onImport applies a ServiceImport event.
func (ix *Index) onImport(old, cur any) {
	ix.serviceEvent(&ix.mc.svcStore, old, cur, func(key string, s, _ *service) {
		var recs *svcRecords
		if s != nil {
			recs = ix.buildImportRecords(s, ix.mc.bySvc[key])
		}
		ix.mu.Lock()
		setRecords(ix.mcRecords, key, recs)
		ix.mu.Unlock()
		ix.touchMC()
	})
}

// onMCSlice applies an event of an imported EndpointSlice.
func (ix *Index) onMCSlice(old, cur any) {
	ix.sliceEvent(&ix.mc.svcStore, old, cur, func(_, _ *endpointSlice, keys [2]string) {
		recs := ix.mc.recordsFor(keys, func(_ string, s *service, sl []*endpointSlice) *svcRecords {
			return ix.buildImportRecords(s, sl)
		})
		ix.mu.Lock()
		publish(ix.mcRecords, keys, recs)
		ix.mu.Unlock()
		ix.touchMC()
	})
}

// buildImportRecords builds the records of an import with its slices, its
// names and bare-name answers in every multicluster zone (wmu held).
// hosts holds every ready endpoint by its name label (hostname, pod name
// with endpoint-pod-names, else the address with dashes), to be matched
// with its cluster (resolveMCEndpoint).
func (ix *Index) buildImportRecords(s *service, sl []*endpointSlice) *svcRecords {
	ix.counters.rebuilds++
	v := &svcRecords{svc: s, slices: sl}
	if len(ix.mcZones) > 1 {
		v.more = make([]zoneRecords, len(ix.mcZones)-1)
	}
	var ready []netip.Addr
	seen := map[netip.Addr]struct{}{}
	for _, e := range sl {
		for i := range e.len() {
			if v.hosts == nil {
				v.hosts = make(map[string][]epRef)
			}
			l := e.label(i)
			v.hosts[l] = append(v.hosts[l], epRef{e, int32(i)})
			ip := e.ip(i)
			if _, dup := seen[ip]; !dup {
				seen[ip] = struct{}{}
				ready = append(ready, ip)
			}
		}
	}
	ips := s.ips
	if s.kind == kindHeadless {
		v.exists = len(ready) > 0
		ips = ready
	} else {
		// CoreDNS's ignore empty_service counts the ready addresses of
		// the import's slices, as for a Service's.
		v.exists = len(ready) > 0 || !ix.cfg.IgnoreEmptyService
	}
	for zi, zone := range ix.mcZones {
		zr := v.in(zi)
		zr.fqdn = s.name + "." + s.namespace + ".svc." + zone
		zr.a, zr.aaaa = ix.addrAnswers(zr.fqdn, ips)
	}
	return v
}

// resolveMCEndpoint answers <endpoint>.<cluster>.<svc>.<ns>.svc (cluster
// "": <endpoint>.<svc>.<ns>.svc) in a multicluster zone, for headless and
// ClusterSetIP imports alike: the ready endpoints of that name label in
// slices of that source cluster.
func (ix *Index) resolveMCEndpoint(zm *zoneMsgs, v *svcRecords, name, label, cluster string, qtype uint16) *dns.Msg {
	var buf [4]epRef
	refs := buf[:0]
	for _, r := range v.hosts[label] {
		if r.sl.cluster == cluster && len(refs) < maxAnswerSRV {
			refs = append(refs, r)
		}
	}
	return ix.endpointAnswer(zm, name, qtype, refs)
}
