package pbdecode

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The field structs: what DNS reads of each kind, as the API types hold it
// (a field the protobuf leaves out reads as the API type's Unmarshal has
// it: empty, zero, or not set for an optional one). A Decoder fills them
// from an item's protobuf bytes; ServiceOf, EndpointSliceOf, NamespaceOf
// and PodOf fill them from the decoded API types. Nothing here says what
// the fields mean for DNS: the caller builds its objects from either alike.

// Text is the type of the field structs' text: []byte as a Decoder reads
// it, pointing into the item's bytes; string as ServiceOf and the others
// take it from a decoded API object, without copying.
type Text interface{ string | []byte }

// Port is what DNS reads of a core/v1 ServicePort or a discovery/v1
// EndpointPort: name 1, protocol 2 and port 3 in both.
type Port[S Text] struct {
	Name, Protocol S
	Port           int32
	// HasPort: the port is set. A ServicePort's always is (its port is
	// required: missing, it reads 0); an EndpointPort's is optional.
	HasPort bool
}

// Service is what DNS reads of a core/v1 Service.
type Service[S Text] struct {
	Name, Namespace S
	Type            S   // spec.type
	ClusterIP       S   // spec.clusterIP
	ClusterIPs      []S // spec.clusterIPs
	ExternalName    S   // spec.externalName
	Ports           []Port[S]
	// External are spec.externalIPs, then each status.loadBalancer
	// ingress's ip, or its hostname when it has none (what CoreDNS's
	// k8s_external answers, in its order).
	External []S
}

// EndpointSlice is what DNS reads of a discovery/v1 EndpointSlice.
type EndpointSlice[S Text] struct {
	Name, Namespace S
	ServiceName     S // the kubernetes.io/service-name label
	AddressType     S
	Endpoints       []Endpoint[S]
	Ports           []Port[S]
}

// Endpoint is what DNS reads of a discovery/v1 Endpoint.
type Endpoint[S Text] struct {
	Addresses []S
	// Ready is conditions.ready, true when it is not set (unknown, which
	// consumers take as ready).
	Ready    bool
	Hostname S // "" when not set
	// TargetRef: the endpoint has a targetRef, of name TargetRefName.
	// A Decoder reads them only when asked (Decoder.EndpointSlice).
	TargetRef     bool
	TargetRefName S
}

// Namespace is what DNS reads of a core/v1 Namespace.
type Namespace[S Text] struct {
	Name S
	// Labels are all its labels; a Decoder reads them only when asked
	// (Decoder.Namespace).
	Labels map[string]string
}

// Pod is what DNS reads of a core/v1 Pod.
type Pod[S Text] struct {
	Name, Namespace S
	Created         time.Time // creationTimestamp
	Deleting        bool      // deletionTimestamp is set
	// Controller is the kind and name of the pod's controller
	// ownerReference (the first with controller: true, as
	// metav1.GetControllerOf picks it) when HasController.
	Controller    Owner[S]
	HasController bool
	TemplateHash  S // the pod-template-hash label
	NodeName      S // spec.nodeName
	HostNetwork   bool
	Phase         S   // status.phase
	PodIP         S   // status.podIP
	PodIPs        []S // status.podIPs[].ip
}

// Owner is an ownerReference's kind and name.
type Owner[S Text] struct {
	Kind, Name S
}

// ServiceOf reads the fields of a decoded Service.
func ServiceOf(o *corev1.Service) Service[string] {
	f := Service[string]{
		Name: o.Name, Namespace: o.Namespace,
		Type: string(o.Spec.Type), ClusterIP: o.Spec.ClusterIP, ClusterIPs: o.Spec.ClusterIPs,
		ExternalName: o.Spec.ExternalName,
	}
	if n := len(o.Spec.ExternalIPs) + len(o.Status.LoadBalancer.Ingress); n > 0 {
		f.External = make([]string, 0, n)
		f.External = append(f.External, o.Spec.ExternalIPs...)
		for _, in := range o.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				f.External = append(f.External, in.IP)
			} else {
				f.External = append(f.External, in.Hostname)
			}
		}
	}
	if len(o.Spec.Ports) > 0 {
		f.Ports = make([]Port[string], len(o.Spec.Ports))
		for i, p := range o.Spec.Ports {
			f.Ports[i] = Port[string]{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port, HasPort: true}
		}
	}
	return f
}

// EndpointSliceOf reads the fields of a decoded EndpointSlice.
func EndpointSliceOf(o *discoveryv1.EndpointSlice) EndpointSlice[string] {
	f := EndpointSlice[string]{
		Name: o.Name, Namespace: o.Namespace, ServiceName: o.Labels[discoveryv1.LabelServiceName],
		AddressType: string(o.AddressType),
	}
	if len(o.Endpoints) > 0 {
		f.Endpoints = make([]Endpoint[string], len(o.Endpoints))
		for i := range o.Endpoints {
			ep := &o.Endpoints[i]
			e := Endpoint[string]{Addresses: ep.Addresses, Ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready}
			if ep.Hostname != nil {
				e.Hostname = *ep.Hostname
			}
			if ep.TargetRef != nil {
				e.TargetRef, e.TargetRefName = true, ep.TargetRef.Name
			}
			f.Endpoints[i] = e
		}
	}
	if len(o.Ports) > 0 {
		f.Ports = make([]Port[string], len(o.Ports))
		for i, p := range o.Ports {
			var fp Port[string]
			if p.Name != nil {
				fp.Name = *p.Name
			}
			if p.Protocol != nil {
				fp.Protocol = string(*p.Protocol)
			}
			if p.Port != nil {
				fp.Port, fp.HasPort = *p.Port, true
			}
			f.Ports[i] = fp
		}
	}
	return f
}

// NamespaceOf reads the fields of a decoded Namespace.
func NamespaceOf(o *corev1.Namespace) Namespace[string] {
	return Namespace[string]{Name: o.Name, Labels: o.Labels}
}

// PodOf reads the fields of a decoded Pod.
func PodOf(o *corev1.Pod) Pod[string] {
	f := Pod[string]{
		Name: o.Name, Namespace: o.Namespace,
		Created: o.CreationTimestamp.Time, Deleting: o.DeletionTimestamp != nil,
		TemplateHash: o.Labels[appsv1.DefaultDeploymentUniqueLabelKey],
		NodeName:     o.Spec.NodeName, HostNetwork: o.Spec.HostNetwork,
		Phase: string(o.Status.Phase), PodIP: o.Status.PodIP,
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		f.Controller, f.HasController = Owner[string]{Kind: ref.Kind, Name: ref.Name}, true
	}
	if len(o.Status.PodIPs) > 0 {
		f.PodIPs = make([]string, len(o.Status.PodIPs))
		for i, ip := range o.Status.PodIPs {
			f.PodIPs[i] = ip.IP
		}
	}
	return f
}
