package k8s

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// The informer stores hold these stripped objects instead of the API types:
// the transform functions below run before an object enters a store, so a
// decoded Service, EndpointSlice, Namespace or Pod is garbage as soon as its
// event is handled. Each keeps only what an answer needs. The index refers
// to these same objects, so nothing is stored twice. They are immutable
// once built.
//
// Each kind has one constructor (newService, newEndpointSlice,
// newNamespace, newPod), which makes the object from the fields DNS reads
// of it (package pbdecode's field structs) and holds every rule of what
// they mean: the informer transform reads those fields from the decoded
// API object, the list path from the item's protobuf bytes (list.go), and
// both get the same objects.

// svcKind is how a Service is answered.
type svcKind uint8

const (
	kindClusterIP svcKind = iota // A/AAAA from spec.clusterIPs (also NodePort, LoadBalancer)
	kindHeadless                 // A/AAAA from ready endpoints
	kindExternal                 // CNAME to spec.externalName
)

// port is a service or EndpointSlice port. Names and protocols are stored
// lower-case because query names arrive lower-case.
type port struct {
	name  string
	proto string
	port  int32 // -1 when the object declares no ports (CoreDNS's sentinel)
}

// noPorts stands for an object without ports: such a service or endpoint
// still has address records, and counts once in an SRV weight, but yields
// no SRV record.
var noPorts = []port{{port: -1}}

type service struct {
	objStub
	name, namespace string
	ips             []netip.Addr // ClusterIPs, primary family first
	external        string       // ExternalName target, lower-case FQDN
	ports           []port
	// ext are the external addresses k8s_external answers (external.go):
	// spec.externalIPs, then the load balancer's ingress IPs or
	// hostnames; nil for most Services. A pointer, and kind and
	// externalIsIP side by side: the struct stays in the 112-byte size
	// class it had without it (bench/RESULTS.md, "k8s_external memory").
	ext          *extAddrs
	kind         svcKind
	externalIsIP bool // ExternalName holds an IP: the name does not exist (CoreDNS)
}

// extAddrs are a Service's external addresses, in CoreDNS's order.
type extAddrs struct{ addrs []string }

// extList returns s's external addresses (nil: none).
func (s *service) extList() []string {
	if s.ext == nil {
		return nil
	}
	return s.ext.addrs
}

// endpointSlice holds the ready addresses of a slice, one entry per
// address: an endpoint with several addresses becomes several entries
// sharing the hostname, as in CoreDNS (the API defines no meaning for
// addresses after the first). Endpoint addresses are most of a large
// cluster, so they are packed: a slice has one address family, and most
// have no hostnames, so an IPv4 entry costs 4 bytes.
//
// hosts holds each entry's name label when it has one: the endpoint's
// hostname or, with Config.EndpointPodNames, the name of the pod in its
// targetRef. An entry without one is named by its address.
type endpointSlice struct {
	objStub
	name, namespace string
	service         string   // kubernetes.io/service-name label; "" = not ours
	cluster         string   // multicluster slices: the source cluster, lower-case (multicluster.go)
	ports           []port   // noPorts when the slice lists none
	v6              bool     // addressType IPv6: 16 bytes an entry, else 4
	ips             []byte   // the entries' addresses, packed
	hosts           []string // the entries' name labels; nil when none has one
	total           int      // addresses in the slice, ready or not (stats)
}

// len is the number of entries (ready addresses).
func (e *endpointSlice) len() int {
	if e.v6 {
		return len(e.ips) / 16
	}
	return len(e.ips) / 4
}

func (e *endpointSlice) ip(i int) netip.Addr {
	if e.v6 {
		return netip.AddrFrom16([16]byte(e.ips[16*i:])).Unmap()
	}
	return netip.AddrFrom4([4]byte(e.ips[4*i:]))
}

func (e *endpointSlice) host(i int) string {
	if e.hosts == nil {
		return ""
	}
	return e.hosts[i]
}

// label is entry i's first label in names: its hostname, else its address
// with dashes.
func (e *endpointSlice) label(i int) string {
	if h := e.host(i); h != "" {
		return h
	}
	return dashIP(e.ip(i))
}

type namespace struct {
	objStub
	name   string
	labels map[string]string // those Config.NamespaceLabels reads (labelKeys)
}

type pod struct {
	objStub
	name, namespace string
	ips             []netip.Addr
	created         int64 // creationTimestamp, Unix nanoseconds: newest pod wins an IP
	local           bool  // spec.nodeName is this node
	hostNetwork     bool
	// done means the pod's IPs are free for reuse: phase Succeeded or
	// Failed. Such pods keep status.podIPs, but the address may already
	// belong to a new pod.
	done bool
	// deleting is set once deletionTimestamp is: CoreDNS stops answering
	// for terminating pods in verified mode, though the pod still runs and
	// still queries (so PodNamespace keeps it).
	deleting bool
	// ownerKind and ownerName are the workload of a pod of this node, from
	// its controller's ownerReference (workload): what the search-path
	// report names, so that an operator knows what to fix. Empty for other
	// nodes' pods and for bare pods.
	ownerKind, ownerName string
}

// workload names the workload a pod's controller ownerReference (kind,
// name) stands for: a Deployment for a ReplicaSet named after it with the
// pod's template hash (the pod-template-hash label a Deployment's
// ReplicaSets put on their pods; the ReplicaSet's name is the
// Deployment's and "-" and the hash), else the owner itself (StatefulSet,
// DaemonSet, Job, a bare ReplicaSet, ...).
func workload(kind, name, hash string) (string, string) {
	if kind == "ReplicaSet" && hash != "" && strings.HasSuffix(name, "-"+hash) && len(name) > len(hash)+1 {
		return "Deployment", name[:len(name)-len(hash)-1]
	}
	return ownerKindName(kind), name
}

// ownerKindName shares the strings of the common kinds, so that a node's
// pods hold one copy of each.
func ownerKindName(kind string) string {
	for _, k := range [...]string{"ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Deployment", "Node"} {
		if kind == k {
			return k
		}
	}
	return kind
}

func (s *service) GetName() string                      { return s.name }
func (s *service) GetNamespace() string                 { return s.namespace }
func (s *service) DeepCopyObject() runtime.Object       { return s }
func (e *endpointSlice) GetName() string                { return e.name }
func (e *endpointSlice) GetNamespace() string           { return e.namespace }
func (e *endpointSlice) DeepCopyObject() runtime.Object { return e }
func (n *namespace) GetName() string                    { return n.name }
func (n *namespace) DeepCopyObject() runtime.Object     { return n }
func (p *pod) GetName() string                          { return p.name }
func (p *pod) GetNamespace() string                     { return p.namespace }
func (p *pod) DeepCopyObject() runtime.Object           { return p }

// transformService is the informer transform for Services. Like every
// transform here it is idempotent: client-go may hand it an object it has
// already transformed.
func transformService(obj any) (any, error) {
	switch o := obj.(type) {
	case *service:
		return o, nil
	case *corev1.Service:
		return newService(pbdecode.ServiceOf(o)), nil
	}
	return nil, fmt.Errorf("service transform: unexpected %T", obj)
}

// newService makes the stripped Service from the fields DNS reads of it.
// Past maxServicePorts only the first ports are kept.
func newService[S pbdecode.Text](f pbdecode.Service[S]) *service {
	s := &service{
		name: string(f.Name), namespace: string(f.Namespace),
		ports: newPorts(f.Ports[:min(len(f.Ports), maxServicePorts)]),
	}
	if len(f.External) > 0 {
		n := min(len(f.External), maxServiceExternal)
		s.ext = &extAddrs{addrs: make([]string, n)}
		for i, a := range f.External[:n] {
			s.ext.addrs[i] = string(a)
		}
	}
	switch {
	case string(f.Type) == string(corev1.ServiceTypeExternalName):
		s.kind = kindExternal
		target := strings.ToLower(strings.TrimSuffix(string(f.ExternalName), "."))
		if _, err := netip.ParseAddr(target); err == nil || target == "" {
			s.externalIsIP = true
		} else {
			s.external = target + "."
		}
	case isHeadless(f.ClusterIP, f.ClusterIPs):
		s.kind = kindHeadless
	default:
		s.kind = kindClusterIP
		ips := f.ClusterIPs
		if len(ips) == 0 && len(f.ClusterIP) > 0 {
			ips = []S{f.ClusterIP}
		}
		for _, ip := range ips {
			if a, ok := parseAddr(ip); ok {
				s.ips = append(s.ips, a.Unmap())
			}
		}
	}
	return s
}

// isHeadless reports whether a Service's ClusterIP is "None": its first
// ClusterIPs entry, or its ClusterIP when it has none.
func isHeadless[S pbdecode.Text](clusterIP S, clusterIPs []S) bool {
	if len(clusterIPs) > 0 {
		return string(clusterIPs[0]) == corev1.ClusterIPNone
	}
	return string(clusterIP) == corev1.ClusterIPNone
}

// newPorts makes the ports of a Service or an EndpointSlice: names and
// protocols lower-case, a port without a number -1 (an EndpointPort's is
// optional); noPorts for none.
func newPorts[S pbdecode.Text](ps []pbdecode.Port[S]) []port {
	if len(ps) == 0 {
		return noPorts
	}
	out := make([]port, len(ps))
	for i, p := range ps {
		out[i] = port{name: strings.ToLower(string(p.Name)), proto: protoName(p.Protocol), port: -1}
		if p.HasPort {
			out[i].port = p.Port
		}
	}
	return out
}

func (s *service) equal(o *service) bool {
	return s.name == o.name && s.namespace == o.namespace && s.kind == o.kind &&
		s.external == o.external && s.externalIsIP == o.externalIsIP &&
		slices.Equal(s.ips, o.ips) && slices.Equal(s.ports, o.ports) && slices.Equal(s.extList(), o.extList())
}

// endpointSliceTransform returns the transform for EndpointSlices;
// podNames names endpoints without a hostname after their targetRef.
func endpointSliceTransform(podNames bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *endpointSlice:
			return o, nil
		case *discoveryv1.EndpointSlice:
			return newEndpointSlice(pbdecode.EndpointSliceOf(o), podNames), nil
		}
		return nil, fmt.Errorf("endpointslice transform: unexpected %T", obj)
	}
}

// newEndpointSlice makes the stripped EndpointSlice from the fields DNS
// reads of it; podNames names endpoints without a hostname after their
// targetRef (endpointName).
func newEndpointSlice[S pbdecode.Text](f pbdecode.EndpointSlice[S], podNames bool) *endpointSlice {
	e := &endpointSlice{
		name: string(f.Name), namespace: string(f.Namespace), service: string(f.ServiceName),
		ports: newPorts(f.Ports),
	}
	// FQDN slices are skipped: their addresses are names, and DNS for them
	// is not defined by the Kubernetes DNS specification.
	v4 := string(f.AddressType) == string(discoveryv1.AddressTypeIPv4)
	if !v4 && string(f.AddressType) != string(discoveryv1.AddressTypeIPv6) {
		return e
	}
	e.v6 = !v4
	// A first pass counts the ready addresses and whether one of them has
	// a name, to size the packed arrays once; a second fills them.
	// publishNotReadyAddresses reaches us through the ready condition too
	// (the controller sets ready=true). serving and terminating are
	// ignored, as in CoreDNS.
	n, hosts := 0, false
	for i := range f.Endpoints {
		ep := &f.Endpoints[i]
		e.total += len(ep.Addresses)
		if ep.Ready {
			n += len(ep.Addresses)
			hosts = hosts || len(endpointName(ep, podNames)) > 0
		}
	}
	if n == 0 {
		return e
	}
	e.reserve(n, hosts)
	for i := range f.Endpoints {
		ep := &f.Endpoints[i]
		if !ep.Ready {
			continue
		}
		host := strings.ToLower(string(endpointName(ep, podNames)))
		for _, a := range ep.Addresses {
			if ip, ok := parseAddr(a); ok {
				e.add(ip, host)
			}
		}
	}
	return e
}

// endpointName is the text of an endpoint's name label (the label once
// lower-cased), empty when it is named by its address: its hostname, else
// with podNames the name of its targetRef (CoreDNS's endpoint_pod_names
// takes the targetRef whatever its kind). CoreDNS skips names longer than
// 63 bytes; we also skip names that are not one DNS label (a pod name may
// hold dots): CoreDNS would use them and give SRV and PTR targets that do
// not resolve.
func endpointName[S pbdecode.Text](ep *pbdecode.Endpoint[S], podNames bool) S {
	if len(ep.Hostname) > 0 {
		return ep.Hostname
	}
	if podNames && ep.TargetRef && isLabel(ep.TargetRefName) {
		return ep.TargetRefName
	}
	var none S
	return none
}

// reserve makes room for n ready addresses, and for their name labels
// when one of them has a label (hosts). n is not 0.
func (e *endpointSlice) reserve(n int, hosts bool) {
	size := 4
	if e.v6 {
		size = 16
	}
	e.ips = make([]byte, 0, n*size)
	if hosts {
		e.hosts = make([]string, 0, n)
	}
}

// add appends a ready address, and its name label when the slice keeps
// labels (reserve). An address with a zone, or not of the slice's family,
// is skipped.
func (e *endpointSlice) add(ip netip.Addr, host string) {
	if ip.Zone() != "" {
		return
	}
	if e.v6 {
		b := ip.As16()
		e.ips = append(e.ips, b[:]...)
	} else {
		if ip = ip.Unmap(); !ip.Is4() {
			return // not an IPv4 address in an IPv4 slice
		}
		b := ip.As4()
		e.ips = append(e.ips, b[:]...)
	}
	if e.hosts != nil {
		e.hosts = append(e.hosts, host)
	}
}

func (e *endpointSlice) equal(o *endpointSlice) bool {
	return e.name == o.name && e.namespace == o.namespace && e.service == o.service && e.cluster == o.cluster &&
		e.total == o.total && e.v6 == o.v6 && slices.Equal(e.ports, o.ports) &&
		bytes.Equal(e.ips, o.ips) && slices.Equal(e.hosts, o.hosts)
}

// namespaceTransform returns the transform for Namespaces; keys are the
// labels kept (those NamespaceLabels is matched against).
func namespaceTransform(keys labelKeys) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *namespace:
			return o, nil
		case *corev1.Namespace:
			return newNamespace(pbdecode.NamespaceOf(o), keys), nil
		}
		return nil, fmt.Errorf("namespace transform: unexpected %T", obj)
	}
}

// newNamespace makes the stripped Namespace from the fields DNS reads of
// it, with the labels of keys.
func newNamespace[S pbdecode.Text](f pbdecode.Namespace[S], keys labelKeys) *namespace {
	return &namespace{name: string(f.Name), labels: keys.keep(f.Labels)}
}

// labelKeys are the label keys of namespaces the index keeps: those a
// NamespaceLabels selector reads. A namespace may carry any number of
// labels (whoever may label namespaces chooses), and every namespace is
// kept, so keeping them all would let their labels take the node's memory;
// the selector's keys bound what is kept. nil: none.
type labelKeys map[string]bool

// selectorKeys returns the keys sel reads; nil without a selector.
func selectorKeys(sel labels.Selector) labelKeys {
	if sel == nil {
		return nil
	}
	reqs, _ := sel.Requirements()
	keys := make(labelKeys, len(reqs))
	for _, r := range reqs {
		keys[r.Key()] = true
	}
	return keys
}

// keep returns the labels of lbl whose keys are in k; nil when none.
func (k labelKeys) keep(lbl map[string]string) map[string]string {
	var out map[string]string
	for key := range k {
		if v, ok := lbl[key]; ok {
			if out == nil {
				out = make(map[string]string, len(k))
			}
			out[key] = v
		}
	}
	return out
}

// podTransform returns the transform for Pods; node is this node's name.
func podTransform(node string) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *pod:
			return o, nil
		case *corev1.Pod:
			return newPod(pbdecode.PodOf(o), node), nil
		}
		return nil, fmt.Errorf("pod transform: unexpected %T", obj)
	}
}

// newPod makes the stripped Pod from the fields DNS reads of it; node is
// this node's name. Only this node's pods keep their workload.
func newPod[S pbdecode.Text](f pbdecode.Pod[S], node string) *pod {
	p := &pod{
		name: string(f.Name), namespace: string(f.Namespace),
		created:     f.Created.UnixNano(),
		local:       node != "" && string(f.NodeName) == node,
		hostNetwork: f.HostNetwork,
		done:        string(f.Phase) == string(corev1.PodSucceeded) || string(f.Phase) == string(corev1.PodFailed),
		deleting:    f.Deleting,
	}
	ips := f.PodIPs
	if len(ips) == 0 && len(f.PodIP) > 0 {
		ips = []S{f.PodIP}
	}
	for _, ip := range ips {
		if a, ok := parseAddr(ip); ok {
			p.ips = append(p.ips, a.Unmap())
		}
	}
	if p.local && f.HasController {
		p.ownerKind, p.ownerName = workload(string(f.Controller.Kind), string(f.Controller.Name), string(f.TemplateHash))
	}
	return p
}

func (p *pod) equal(o *pod) bool {
	return p.name == o.name && p.namespace == o.namespace && p.created == o.created &&
		p.local == o.local && p.hostNetwork == o.hostNetwork && p.done == o.done &&
		p.deleting == o.deleting && p.ownerKind == o.ownerKind && p.ownerName == o.ownerName &&
		slices.Equal(p.ips, o.ips)
}

// objStub makes the stripped objects metav1.Objects, which the informer
// stores need for their keys (namespace/name). Each type overrides the
// getters it has; the rest are inert. A zero-size field costs nothing.
type objStub struct{}

func (objStub) GetObjectKind() schema.ObjectKind              { return schema.EmptyObjectKind }
func (objStub) GetNamespace() string                          { return "" }
func (objStub) SetNamespace(string)                           {}
func (objStub) GetName() string                               { return "" }
func (objStub) SetName(string)                                {}
func (objStub) GetGenerateName() string                       { return "" }
func (objStub) SetGenerateName(string)                        {}
func (objStub) GetUID() types.UID                             { return "" }
func (objStub) SetUID(types.UID)                              {}
func (objStub) GetResourceVersion() string                    { return "" }
func (objStub) SetResourceVersion(string)                     {}
func (objStub) GetGeneration() int64                          { return 0 }
func (objStub) SetGeneration(int64)                           {}
func (objStub) GetSelfLink() string                           { return "" }
func (objStub) SetSelfLink(string)                            {}
func (objStub) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (objStub) SetCreationTimestamp(metav1.Time)              {}
func (objStub) GetDeletionTimestamp() *metav1.Time            { return nil }
func (objStub) SetDeletionTimestamp(*metav1.Time)             {}
func (objStub) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (objStub) SetDeletionGracePeriodSeconds(*int64)          {}
func (objStub) GetLabels() map[string]string                  { return nil }
func (objStub) SetLabels(map[string]string)                   {}
func (objStub) GetAnnotations() map[string]string             { return nil }
func (objStub) SetAnnotations(map[string]string)              {}
func (objStub) GetFinalizers() []string                       { return nil }
func (objStub) SetFinalizers([]string)                        {}
func (objStub) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (objStub) SetOwnerReferences([]metav1.OwnerReference)    {}
func (objStub) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (objStub) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

var (
	_ metav1.Object  = (*service)(nil)
	_ runtime.Object = (*service)(nil)
	_ metav1.Object  = (*endpointSlice)(nil)
	_ metav1.Object  = (*namespace)(nil)
	_ metav1.Object  = (*pod)(nil)
	_ runtime.Object = (*pod)(nil)
)
