package k8s

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Decoders of list items straight from their protobuf bytes into the
// stripped objects, for the list path (list.go). Decoding a Service into
// the API type allocates every field of it (metadata, managed fields,
// labels, annotations, selectors; for an EndpointSlice, each endpoint's
// conditions, target reference, node and zone) only for the transform to
// keep a few of them: at 10,000 Services and 100,000 endpoint addresses
// that was most of the agent's start-up CPU and garbage. These read the
// fields DNS needs and skip the rest without allocating; what they make of
// an object is exactly what the informer transform makes of the decoded API
// type (TestDecodeMatchesTyped checks it on the fixtures and on random
// objects). Field numbers are those of k8s.io/api's generated.proto, which
// the API's compatibility rules freeze.
//
// Protobuf merge rules are followed: a repeated message field appends, a
// singular field takes its last occurrence, a singular message field that
// occurs twice is merged (metadata and spec are read field by field in
// every occurrence, which is the same thing).

// errMalformed is wrapped by every decoding error.
var errMalformed = errors.New("malformed protobuf")

// pbIter walks the fields of one protobuf message held in memory.
type pbIter struct {
	b   []byte
	err error
	// The current field: its number and wire type, its varint value (wire
	// type 0) or its bytes (wire type 2).
	field uint64
	wt    int
	v     uint64
	data  []byte
}

// next advances to the next field; false at the end or on an error
// (it.err).
func (it *pbIter) next() bool {
	if it.err != nil || len(it.b) == 0 {
		return false
	}
	k, n := binary.Uvarint(it.b)
	if n <= 0 || k>>3 == 0 {
		return it.fail("field key")
	}
	it.b = it.b[n:]
	it.field, it.wt, it.data, it.v = k>>3, int(k&7), nil, 0
	switch it.wt {
	case 0:
		v, n := binary.Uvarint(it.b)
		if n <= 0 {
			return it.fail("varint")
		}
		it.v, it.b = v, it.b[n:]
	case 1, 5:
		size := 8
		if it.wt == 5 {
			size = 4
		}
		if len(it.b) < size {
			return it.fail("fixed field")
		}
		it.b = it.b[size:]
	case 2:
		l, n := binary.Uvarint(it.b)
		if n <= 0 || l > uint64(len(it.b)-n) {
			return it.fail("length")
		}
		it.data, it.b = it.b[n:n+int(l)], it.b[n+int(l):]
	default:
		return it.fail(fmt.Sprintf("wire type %d", it.wt))
	}
	return true
}

func (it *pbIter) fail(what string) bool {
	it.err = fmt.Errorf("%w: bad %s", errMalformed, what)
	return false
}

// is reports whether the current field is number f of wire type wt.
func (it *pbIter) is(f uint64, wt int) bool { return it.field == f && it.wt == wt }

// sub returns an iterator over the current field's bytes.
func (it *pbIter) sub() pbIter { return pbIter{b: it.data} }

// objMeta is what the decoders read from ObjectMeta.
type objMeta struct {
	name, namespace string
	serviceName     string            // labels[kubernetes.io/service-name], when asked for
	labels          map[string]string // every label, when asked for
	created         time.Time         // creationTimestamp, when asked for
	deleting        bool              // deletionTimestamp is set
	// ownerKind, ownerName: the controller ownerReference (owned: there
	// is one), and templateHash the pod-template-hash label, when asked
	// for.
	ownerKind, ownerName, templateHash string
	owned                              bool
}

// What readMeta reads besides the name and namespace.
const (
	metaServiceName = 1 << iota // the kubernetes.io/service-name label
	metaLabels                  // every label
	metaTimes                   // creation and deletion timestamps
	metaOwner                   // the controller ownerReference and the pod-template-hash label
)

// readMeta reads an ObjectMeta occurrence into m (merging).
func readMeta(data []byte, m *objMeta, what int) error {
	it := pbIter{b: data}
	for it.next() {
		switch {
		case it.is(1, 2):
			m.name = string(it.data)
		case it.is(3, 2):
			m.namespace = string(it.data)
		case what&metaOwner != 0 && it.is(11, 2):
			if k, v, err := mapEntry(it.data); err != nil {
				return err
			} else if string(k) == podTemplateHash {
				m.templateHash = string(v)
			}
		case what&metaOwner != 0 && it.is(13, 2):
			if err := readOwner(it.data, m); err != nil {
				return err
			}
		case what&(metaServiceName|metaLabels) != 0 && it.is(11, 2):
			kb, vb, err := mapEntry(it.data)
			if err != nil {
				return err
			}
			if what&metaLabels == 0 {
				if string(kb) == discoveryv1.LabelServiceName {
					m.serviceName = string(vb)
				}
				continue
			}
			k, v := string(kb), string(vb)
			if k == discoveryv1.LabelServiceName {
				m.serviceName = v
			}
			if m.labels == nil {
				m.labels = make(map[string]string)
			}
			m.labels[k] = v
		case what&metaTimes != 0 && it.is(8, 2):
			t, err := readTime(it.data)
			if err != nil {
				return err
			}
			m.created = t
		case what&metaTimes != 0 && it.is(9, 2):
			m.deleting = true
		}
	}
	return it.err
}

// mapEntry reads a map<string,string> entry (key 1, value 2) as slices of
// data: the caller makes strings of what it keeps, so that the labels it
// does not keep cost no allocation.
func mapEntry(data []byte) (k, v []byte, err error) {
	it := pbIter{b: data}
	for it.next() {
		switch {
		case it.is(1, 2):
			k = it.data
		case it.is(2, 2):
			v = it.data
		}
	}
	return k, v, it.err
}

// readOwner reads an OwnerReference into m when it is the controller's
// (controller: true), as metav1.GetControllerOf picks it.
func readOwner(data []byte, m *objMeta) error {
	it := pbIter{b: data}
	var kind, name []byte
	controller := false
	for it.next() {
		switch {
		case it.is(1, 2):
			kind = it.data
		case it.is(3, 2):
			name = it.data
		case it.is(6, 0):
			controller = it.v != 0
		}
	}
	if it.err == nil && controller && !m.owned {
		m.ownerKind, m.ownerName, m.owned = ownerKindName(string(kind)), string(name), true
	}
	return it.err
}

// readTime reads a metav1.Time as its Unmarshal does: empty is the zero
// time, else whole seconds (nanos are dropped).
func readTime(data []byte) (time.Time, error) {
	if len(data) == 0 {
		return time.Time{}, nil
	}
	it := pbIter{b: data}
	var sec int64
	for it.next() {
		if it.is(1, 0) {
			sec = int64(it.v)
		}
	}
	return time.Unix(sec, 0).Local(), it.err
}

// decodeService decodes a v1.Service into what newService makes of it.
func decodeService(b []byte) (any, error) {
	var (
		m            objMeta
		typ, cip     string
		cips         []string
		externalName string
		ports        []port
	)
	it := pbIter{b: b}
	for it.next() {
		switch {
		case it.is(1, 2):
			if err := readMeta(it.data, &m, 0); err != nil {
				return nil, err
			}
		case it.is(2, 2):
			sp := it.sub()
			for sp.next() {
				switch {
				case sp.is(1, 2):
					p, err := readPort(sp.data, 0)
					if err != nil {
						return nil, err
					}
					ports = append(ports, p)
				case sp.is(3, 2):
					cip = string(sp.data)
				case sp.is(4, 2):
					typ = string(sp.data)
				case sp.is(10, 2):
					externalName = string(sp.data)
				case sp.is(18, 2):
					cips = append(cips, string(sp.data))
				}
			}
			if sp.err != nil {
				return nil, sp.err
			}
		}
	}
	if it.err != nil {
		return nil, it.err
	}
	return buildService(m.name, m.namespace, typ, cip, cips, externalName, ports), nil
}

// readPort reads a ServicePort or an EndpointPort, which share their
// first fields: name 1, protocol 2, port 3. absent is the port when field
// 3 is missing: 0 for a ServicePort, whose port is required; -1 for an
// EndpointPort, whose port is optional (CoreDNS's sentinel, as
// newEndpointSlice has it).
func readPort(data []byte, absent int32) (port, error) {
	it := pbIter{b: data}
	p := port{port: absent}
	for it.next() {
		switch {
		case it.is(1, 2):
			p.name = strings.ToLower(string(it.data))
		case it.is(2, 2):
			p.proto = protoName(string(it.data))
		case it.is(3, 0):
			p.port = int32(it.v)
		}
	}
	return p, it.err
}

// endpointSliceDecoder returns the decoder of discovery/v1 EndpointSlices
// matching endpointSliceTransform(podNames).
func endpointSliceDecoder(podNames bool) func([]byte) (any, error) {
	return func(b []byte) (any, error) { return decodeEndpointSlice(b, podNames) }
}

// decodeEndpointSlice decodes an EndpointSlice into what newEndpointSlice
// makes of it.
func decodeEndpointSlice(b []byte, podNames bool) (any, error) {
	var (
		m        objMeta
		addrType string
		ports    []port
	)
	// A first pass reads the slice's own fields and validates, counts and
	// sizes the endpoints (as newEndpointSlice sizes its packed arrays); a
	// second fills the arrays. Both walk the bytes in place: nothing is
	// allocated per endpoint but the addresses and names kept.
	n, hosts := 0, false
	total := 0
	it := pbIter{b: b}
	for it.next() {
		switch {
		case it.is(1, 2):
			if err := readMeta(it.data, &m, metaServiceName); err != nil {
				return nil, err
			}
		case it.is(2, 2):
			ep, err := readEndpoint(it.data, podNames)
			if err != nil {
				return nil, err
			}
			total += ep.naddr
			if ep.ready {
				n += ep.naddr
				hosts = hosts || ep.hasLabel()
			}
		case it.is(3, 2):
			p, err := readPort(it.data, -1)
			if err != nil {
				return nil, err
			}
			ports = append(ports, p)
		case it.is(4, 2):
			addrType = string(it.data)
		}
	}
	if it.err != nil {
		return nil, it.err
	}
	e := &endpointSlice{name: m.name, namespace: m.namespace, service: m.serviceName, ports: ports}
	if len(ports) == 0 {
		e.ports = noPorts
	}
	if addrType != string(discoveryv1.AddressTypeIPv4) && addrType != string(discoveryv1.AddressTypeIPv6) {
		return e, nil // FQDN slices are skipped, as newEndpointSlice does
	}
	e.total = total
	e.v6 = addrType == string(discoveryv1.AddressTypeIPv6)
	if n == 0 {
		return e, nil
	}
	e.reserve(n, hosts)
	it = pbIter{b: b}
	for it.next() {
		if !it.is(2, 2) {
			continue
		}
		ep, _ := readEndpoint(it.data, podNames) // validated by the first pass
		if !ep.ready {
			continue
		}
		host := ep.label()
		addrs := pbIter{b: it.data}
		for addrs.next() {
			if !addrs.is(1, 2) {
				continue
			}
			if ip, ok := parseAddr(addrs.data); ok {
				e.add(ip, host)
			}
		}
	}
	return e, nil
}

// endpointFields is what decodeEndpointSlice reads of an Endpoint:
// addresses 1 (repeated), conditions 2 (ready 1), hostname 3, targetRef 4
// (name 3). The byte fields point into the message.
type endpointFields struct {
	naddr    int
	ready    bool // ready, or not said (nil: ready, as consumers take it)
	hostname []byte
	podName  []byte
	hasRef   bool
	podNames bool
}

func readEndpoint(data []byte, podNames bool) (endpointFields, error) {
	f := endpointFields{ready: true, podNames: podNames}
	it := pbIter{b: data}
	for it.next() {
		switch {
		case it.is(1, 2):
			f.naddr++
		case it.is(2, 2):
			c := it.sub()
			for c.next() {
				if c.is(1, 0) {
					f.ready = c.v != 0
				}
			}
			if c.err != nil {
				return f, c.err
			}
		case it.is(3, 2):
			f.hostname = it.data
		case podNames && it.is(4, 2):
			f.hasRef = true
			ref := it.sub()
			for ref.next() {
				if ref.is(3, 2) {
					f.podName = ref.data
				}
			}
			if ref.err != nil {
				return f, ref.err
			}
		}
	}
	return f, it.err
}

// hasLabel reports whether label would not be "", without allocating.
func (f endpointFields) hasLabel() bool {
	return len(f.hostname) > 0 || (f.hasRef && isLabelBytes(f.podName))
}

// isLabelBytes is isLabel on bytes.
func isLabelBytes(s []byte) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// label is endpointLabel's rule on the fields: the hostname, lower-cased,
// else (with pod names) the targetRef's name when it is one DNS label.
func (f endpointFields) label() string {
	if len(f.hostname) > 0 {
		return strings.ToLower(string(f.hostname))
	}
	if f.hasRef && isLabelBytes(f.podName) {
		return string(f.podName)
	}
	return ""
}

// namespaceDecoder returns the decoder of v1.Namespaces matching
// namespaceTransform(keys).
func namespaceDecoder(keys labelKeys) func([]byte) (any, error) {
	what := 0
	if len(keys) > 0 {
		what = metaLabels
	}
	return func(b []byte) (any, error) {
		var m objMeta
		it := pbIter{b: b}
		for it.next() {
			if it.is(1, 2) {
				if err := readMeta(it.data, &m, what); err != nil {
					return nil, err
				}
			}
		}
		if it.err != nil {
			return nil, it.err
		}
		return &namespace{name: m.name, labels: keys.keep(m.labels)}, nil
	}
}

// podDecoder returns the decoder of v1.Pods for node, matching
// podTransform(node).
func podDecoder(node string) func([]byte) (any, error) {
	return func(b []byte) (any, error) {
		var (
			m           objMeta
			nodeName    []byte
			hostNetwork bool
			phase       []byte
			podIP       string
			podIPs      []string
		)
		it := pbIter{b: b}
		for it.next() {
			switch {
			case it.is(1, 2):
				if err := readMeta(it.data, &m, metaTimes|metaOwner); err != nil {
					return nil, err
				}
			case it.is(2, 2):
				sp := it.sub()
				for sp.next() {
					switch {
					case sp.is(10, 2):
						nodeName = sp.data
					case sp.is(11, 0):
						hostNetwork = sp.v != 0
					}
				}
				if sp.err != nil {
					return nil, sp.err
				}
			case it.is(3, 2):
				st := it.sub()
				for st.next() {
					switch {
					case st.is(1, 2):
						phase = st.data
					case st.is(6, 2):
						podIP = string(st.data)
					case st.is(12, 2):
						ipf := st.sub()
						ip := ""
						for ipf.next() {
							if ipf.is(1, 2) {
								ip = string(ipf.data)
							}
						}
						if ipf.err != nil {
							return nil, ipf.err
						}
						podIPs = append(podIPs, ip)
					}
				}
				if st.err != nil {
					return nil, st.err
				}
			}
		}
		if it.err != nil {
			return nil, it.err
		}
		local := node != "" && string(nodeName) == node
		p := buildPod(m.name, m.namespace, m.created, m.deleting, local, hostNetwork, string(phase), podIP, podIPs)
		if local && m.owned {
			p.ownerKind, p.ownerName = workload(m.ownerKind, m.ownerName, m.templateHash)
		}
		return p, nil
	}
}

// parseAddr is netip.ParseAddr on bytes: dotted-quad IPv4, the bulk of a
// large cluster's endpoint addresses, is parsed in place (with ParseAddr's
// rules: four decimal parts of at most 255, no leading zeros); anything
// else goes to ParseAddr.
func parseAddr(b []byte) (netip.Addr, bool) {
	var a [4]byte
	part, digits, val := 0, 0, 0
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return slowParseAddr(b) // a leading zero: ParseAddr refuses it
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return slowParseAddr(b)
			}
		case c == '.' && digits > 0 && part < 3:
			a[part] = byte(val)
			part, digits, val = part+1, 0, 0
		default:
			return slowParseAddr(b)
		}
		if i == len(b)-1 {
			if part != 3 || digits == 0 {
				return slowParseAddr(b)
			}
			a[3] = byte(val)
			return netip.AddrFrom4(a), true
		}
	}
	return slowParseAddr(b)
}

func slowParseAddr(b []byte) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(string(b))
	return ip, err == nil
}
