package pbdecode

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// A Decoder reads list items into the field structs. It keeps its memory
// from one item to the next: what it returns points into the item's bytes
// and into the Decoder, and is valid until its next call while the item's
// bytes are unchanged; the caller copies what it keeps. The zero Decoder
// is ready to use; it is not for concurrent use.
//
// Field numbers are those of k8s.io/api's generated.proto (core/v1,
// discovery/v1) and of k8s.io/apimachinery's meta/v1 (ObjectMeta,
// OwnerReference, Time).
type Decoder struct {
	ports []Port[[]byte]
	text  [][]byte // repeated strings: clusterIPs, podIPs, endpoint addresses
	ext   [][]byte // a Service's external addresses
	eps   []Endpoint[[]byte]
}

// Service reads a core/v1 Service.
func (d *Decoder) Service(b []byte) (Service[[]byte], error) {
	var (
		f Service[[]byte]
		m meta
	)
	d.ports, d.text = d.ports[:0], d.text[:0]
	var ingress [][]byte // status.loadBalancer.ingress, after the spec's externalIPs
	d.ext = d.ext[:0]
	it := fieldIter{b: b}
	for it.next() {
		switch {
		case it.is(1, wireBytes): // metadata
			if err := readMeta(it.data, &m, 0); err != nil {
				return Service[[]byte]{}, err
			}
		case it.is(3, wireBytes): // status
			var err error
			if ingress, err = readIngress(it.data, ingress); err != nil {
				return Service[[]byte]{}, err
			}
		case it.is(2, wireBytes): // spec
			sp := it.sub()
			for sp.next() {
				switch {
				case sp.is(1, wireBytes): // ports
					p, err := readPort(sp.data, true)
					if err != nil {
						return Service[[]byte]{}, err
					}
					d.ports = append(d.ports, p)
				case sp.is(3, wireBytes):
					f.ClusterIP = sp.data
				case sp.is(4, wireBytes):
					f.Type = sp.data
				case sp.is(10, wireBytes):
					f.ExternalName = sp.data
				case sp.is(18, wireBytes):
					d.text = append(d.text, sp.data) // clusterIPs
				case sp.is(5, wireBytes):
					d.ext = append(d.ext, sp.data) // externalIPs
				}
			}
			if sp.err != nil {
				return Service[[]byte]{}, sp.err
			}
		}
	}
	if it.err != nil {
		return Service[[]byte]{}, it.err
	}
	f.Name, f.Namespace = m.name, m.namespace
	f.ClusterIPs, f.Ports = d.text, d.ports
	if d.ext = append(d.ext, ingress...); len(d.ext) > 0 {
		f.External = d.ext
	}
	return f, nil
}

// readIngress appends to out each status.loadBalancer.ingress (ServiceStatus
// 1, LoadBalancerStatus 1) of a ServiceStatus: its ip (1), or its hostname
// (2) when it has no ip.
func readIngress(status []byte, out [][]byte) ([][]byte, error) {
	st := fieldIter{b: status}
	for st.next() {
		if !st.is(1, wireBytes) { // loadBalancer
			continue
		}
		lb := st.sub()
		for lb.next() {
			if !lb.is(1, wireBytes) { // ingress
				continue
			}
			var ip, host []byte
			in := lb.sub()
			for in.next() {
				switch {
				case in.is(1, wireBytes):
					ip = in.data
				case in.is(2, wireBytes):
					host = in.data
				}
			}
			if in.err != nil {
				return out, in.err
			}
			if len(ip) > 0 {
				out = append(out, ip)
			} else {
				out = append(out, host)
			}
		}
		if lb.err != nil {
			return out, lb.err
		}
	}
	return out, st.err
}

// readPort reads a ServicePort or an EndpointPort, which share their
// first fields: name 1, protocol 2, port 3. required says the port is a
// ServicePort's, which is set even when field 3 is missing (0, as the
// API type's Unmarshal leaves it).
func readPort(data []byte, required bool) (Port[[]byte], error) {
	p := Port[[]byte]{HasPort: required}
	it := fieldIter{b: data}
	for it.next() {
		switch {
		case it.is(1, wireBytes):
			p.Name = it.data
		case it.is(2, wireBytes):
			p.Protocol = it.data
		case it.is(3, wireVarint):
			p.Port, p.HasPort = int32(it.v), true
		}
	}
	return p, it.err
}

// EndpointSlice reads a discovery/v1 EndpointSlice. The endpoints'
// targetRefs are read only with targetRefs; without it they are skipped
// unchecked.
func (d *Decoder) EndpointSlice(b []byte, targetRefs bool) (EndpointSlice[[]byte], error) {
	var (
		f EndpointSlice[[]byte]
		m meta
	)
	d.ports, d.text, d.eps = d.ports[:0], d.text[:0], d.eps[:0]
	it := fieldIter{b: b}
	for it.next() {
		switch {
		case it.is(1, wireBytes): // metadata
			if err := readMeta(it.data, &m, metaServiceName); err != nil {
				return EndpointSlice[[]byte]{}, err
			}
		case it.is(2, wireBytes): // endpoints
			ep, err := d.readEndpoint(it.data, targetRefs)
			if err != nil {
				return EndpointSlice[[]byte]{}, err
			}
			d.eps = append(d.eps, ep)
		case it.is(3, wireBytes): // ports
			p, err := readPort(it.data, false)
			if err != nil {
				return EndpointSlice[[]byte]{}, err
			}
			d.ports = append(d.ports, p)
		case it.is(4, wireBytes):
			f.AddressType = it.data
		}
	}
	if it.err != nil {
		return EndpointSlice[[]byte]{}, it.err
	}
	// Each endpoint's addresses were appended to d.text in turn, and
	// d.text may have moved as it grew: only their number is right yet.
	// They are sliced from where d.text ended.
	off := 0
	for i := range d.eps {
		n := len(d.eps[i].Addresses)
		d.eps[i].Addresses = d.text[off : off+n : off+n]
		off += n
	}
	f.Name, f.Namespace, f.ServiceName = m.name, m.namespace, m.serviceName
	f.Endpoints, f.Ports = d.eps, d.ports
	return f, nil
}

// readEndpoint reads an Endpoint: addresses 1 (repeated, appended to
// d.text), conditions 2 (ready 1), hostname 3, targetRef 4 (name 3).
func (d *Decoder) readEndpoint(data []byte, targetRefs bool) (Endpoint[[]byte], error) {
	ep := Endpoint[[]byte]{Ready: true}
	start := len(d.text)
	it := fieldIter{b: data}
	for it.next() {
		switch {
		case it.is(1, wireBytes):
			d.text = append(d.text, it.data)
		case it.is(2, wireBytes):
			c := it.sub()
			for c.next() {
				if c.is(1, wireVarint) {
					ep.Ready = c.v != 0
				}
			}
			if c.err != nil {
				return ep, c.err
			}
		case it.is(3, wireBytes):
			ep.Hostname = it.data
		case targetRefs && it.is(4, wireBytes):
			ep.TargetRef = true
			ref := it.sub()
			for ref.next() {
				if ref.is(3, wireBytes) {
					ep.TargetRefName = ref.data
				}
			}
			if ref.err != nil {
				return ep, ref.err
			}
		}
	}
	ep.Addresses = d.text[start:]
	return ep, it.err
}

// Namespace reads a core/v1 Namespace. Its labels are read only with
// labels; without it they are skipped unchecked.
func (d *Decoder) Namespace(b []byte, labels bool) (Namespace[[]byte], error) {
	what := 0
	if labels {
		what = metaLabels
	}
	var m meta
	it := fieldIter{b: b}
	for it.next() {
		if it.is(1, wireBytes) { // metadata
			if err := readMeta(it.data, &m, what); err != nil {
				return Namespace[[]byte]{}, err
			}
		}
	}
	if it.err != nil {
		return Namespace[[]byte]{}, it.err
	}
	return Namespace[[]byte]{Name: m.name, Labels: m.labels}, nil
}

// Pod reads a core/v1 Pod.
func (d *Decoder) Pod(b []byte) (Pod[[]byte], error) {
	var (
		f Pod[[]byte]
		m meta
	)
	d.text = d.text[:0]
	it := fieldIter{b: b}
	for it.next() {
		switch {
		case it.is(1, wireBytes): // metadata
			if err := readMeta(it.data, &m, metaTimes|metaOwner); err != nil {
				return Pod[[]byte]{}, err
			}
		case it.is(2, wireBytes): // spec
			sp := it.sub()
			for sp.next() {
				switch {
				case sp.is(10, wireBytes):
					f.NodeName = sp.data
				case sp.is(11, wireVarint):
					f.HostNetwork = sp.v != 0
				}
			}
			if sp.err != nil {
				return Pod[[]byte]{}, sp.err
			}
		case it.is(3, wireBytes): // status
			st := it.sub()
			for st.next() {
				switch {
				case st.is(1, wireBytes):
					f.Phase = st.data
				case st.is(6, wireBytes):
					f.PodIP = st.data
				case st.is(12, wireBytes): // podIPs: PodIP, ip 1
					ipf := st.sub()
					var ip []byte
					for ipf.next() {
						if ipf.is(1, wireBytes) {
							ip = ipf.data
						}
					}
					if ipf.err != nil {
						return Pod[[]byte]{}, ipf.err
					}
					d.text = append(d.text, ip)
				}
			}
			if st.err != nil {
				return Pod[[]byte]{}, st.err
			}
		}
	}
	if it.err != nil {
		return Pod[[]byte]{}, it.err
	}
	f.Name, f.Namespace = m.name, m.namespace
	f.Created, f.Deleting = m.created, m.deleting
	f.Controller, f.HasController, f.TemplateHash = m.owner, m.owned, m.templateHash
	f.PodIPs = d.text
	return f, nil
}

// meta is what the decoders read of an ObjectMeta.
type meta struct {
	name, namespace []byte
	serviceName     []byte            // the kubernetes.io/service-name label (metaServiceName)
	labels          map[string]string // every label (metaLabels)
	created         time.Time         // creationTimestamp (metaTimes)
	deleting        bool              // deletionTimestamp is set (metaTimes)
	// owner is the controller ownerReference, when owned, and
	// templateHash the pod-template-hash label (metaOwner).
	owner        Owner[[]byte]
	owned        bool
	templateHash []byte
}

// What readMeta reads besides the name and namespace.
const (
	metaServiceName = 1 << iota // the kubernetes.io/service-name label
	metaLabels                  // every label
	metaTimes                   // creation and deletion timestamps
	metaOwner                   // the controller ownerReference and the pod-template-hash label
)

// readMeta reads an ObjectMeta occurrence into m (merging): name 1,
// namespace 3, creationTimestamp 8, deletionTimestamp 9, labels 11,
// ownerReferences 13.
func readMeta(data []byte, m *meta, what int) error {
	it := fieldIter{b: data}
	for it.next() {
		switch {
		case it.is(1, wireBytes):
			m.name = it.data
		case it.is(3, wireBytes):
			m.namespace = it.data
		case what&(metaServiceName|metaLabels|metaOwner) != 0 && it.is(11, wireBytes):
			k, v, err := mapEntry(it.data)
			if err != nil {
				return err
			}
			switch {
			case what&metaServiceName != 0 && string(k) == discoveryv1.LabelServiceName:
				m.serviceName = v
			case what&metaOwner != 0 && string(k) == appsv1.DefaultDeploymentUniqueLabelKey:
				m.templateHash = v
			}
			if what&metaLabels != 0 {
				if m.labels == nil {
					m.labels = make(map[string]string)
				}
				m.labels[string(k)] = string(v)
			}
		case what&metaOwner != 0 && it.is(13, wireBytes):
			if err := readOwner(it.data, m); err != nil {
				return err
			}
		case what&metaTimes != 0 && it.is(8, wireBytes):
			t, err := readTime(it.data)
			if err != nil {
				return err
			}
			m.created = t
		case what&metaTimes != 0 && it.is(9, wireBytes):
			m.deleting = true
		}
	}
	return it.err
}

// mapEntry reads a map<string,string> entry (key 1, value 2) as slices of
// data: the caller makes strings of what it keeps, so that the labels it
// does not keep cost no allocation.
func mapEntry(data []byte) (k, v []byte, err error) {
	it := fieldIter{b: data}
	for it.next() {
		switch {
		case it.is(1, wireBytes):
			k = it.data
		case it.is(2, wireBytes):
			v = it.data
		}
	}
	return k, v, it.err
}

// readOwner reads an OwnerReference (kind 1, name 3, controller 6) into
// m when it is the first controller's (controller: true), as
// metav1.GetControllerOf picks it.
func readOwner(data []byte, m *meta) error {
	it := fieldIter{b: data}
	var kind, name []byte
	controller := false
	for it.next() {
		switch {
		case it.is(1, wireBytes):
			kind = it.data
		case it.is(3, wireBytes):
			name = it.data
		case it.is(6, wireVarint):
			controller = it.v != 0
		}
	}
	if it.err == nil && controller && !m.owned {
		m.owner, m.owned = Owner[[]byte]{Kind: kind, Name: name}, true
	}
	return it.err
}

// readTime reads a metav1.Time (seconds 1, nanos 2) as its Unmarshal
// does: empty is the zero time, else whole seconds (nanos are dropped).
func readTime(data []byte) (time.Time, error) {
	if len(data) == 0 {
		return time.Time{}, nil
	}
	it := fieldIter{b: data}
	var sec int64
	for it.next() {
		if it.is(1, wireVarint) {
			sec = int64(it.v)
		}
	}
	return time.Unix(sec, 0).Local(), it.err
}
