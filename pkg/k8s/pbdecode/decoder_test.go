package pbdecode

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/k8stest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The helpers below bring both forms of the field structs to strings, an
// empty slice or map to nil and every time to UTC, so that a Decoder's
// fields and those ServiceOf and the others read of the API type compare
// with reflect.DeepEqual.

func str[S Text](s S) string { return string(s) }

func strs[S Text](in []S) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

func ports[S Text](in []Port[S]) []Port[string] {
	if len(in) == 0 {
		return nil
	}
	out := make([]Port[string], len(in))
	for i, p := range in {
		out[i] = Port[string]{Name: str(p.Name), Protocol: str(p.Protocol), Port: p.Port, HasPort: p.HasPort}
	}
	return out
}

func serviceText[S Text](f Service[S]) Service[string] {
	return Service[string]{Name: str(f.Name), Namespace: str(f.Namespace), Type: str(f.Type), ClusterIP: str(f.ClusterIP),
		ClusterIPs: strs(f.ClusterIPs), ExternalName: str(f.ExternalName), Ports: ports(f.Ports), External: strs(f.External)}
}

func sliceText[S Text](f EndpointSlice[S]) EndpointSlice[string] {
	out := EndpointSlice[string]{Name: str(f.Name), Namespace: str(f.Namespace), ServiceName: str(f.ServiceName),
		AddressType: str(f.AddressType), Ports: ports(f.Ports)}
	for _, ep := range f.Endpoints {
		out.Endpoints = append(out.Endpoints, Endpoint[string]{Addresses: strs(ep.Addresses), Ready: ep.Ready,
			Hostname: str(ep.Hostname), TargetRef: ep.TargetRef, TargetRefName: str(ep.TargetRefName)})
	}
	return out
}

func namespaceText[S Text](f Namespace[S]) Namespace[string] {
	out := Namespace[string]{Name: str(f.Name), Labels: f.Labels}
	if len(out.Labels) == 0 {
		out.Labels = nil
	}
	return out
}

func podText[S Text](f Pod[S]) Pod[string] {
	return Pod[string]{Name: str(f.Name), Namespace: str(f.Namespace), Created: f.Created.UTC(), Deleting: f.Deleting,
		Controller: Owner[string]{Kind: str(f.Controller.Kind), Name: str(f.Controller.Name)}, HasController: f.HasController,
		TemplateHash: str(f.TemplateHash), NodeName: str(f.NodeName), HostNetwork: f.HostNetwork,
		Phase: str(f.Phase), PodIP: str(f.PodIP), PodIPs: strs(f.PodIPs)}
}

type message interface {
	Marshal() ([]byte, error)
}

func marshal(t *testing.T, ms ...message) []byte {
	t.Helper()
	var out []byte
	for _, m := range ms {
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// unmarshal decodes b into a new T, as the API machinery does.
func unmarshal[T any, PT interface {
	*T
	Unmarshal([]byte) error
}](t *testing.T, b []byte) *T {
	t.Helper()
	o := PT(new(T))
	if err := o.Unmarshal(b); err != nil {
		t.Fatalf("the API type does not decode its own encoding: %v", err)
	}
	return o
}

func same[F any](t *testing.T, what string, got, want F) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: a Decoder reads\n%+v\nthe API type holds\n%+v", what, got, want)
	}
}

// TestDecoderMatchesAPITypes checks that a Decoder reads of each kind
// what its API type holds once it has decoded the same bytes (ServiceOf
// and the others), on random objects (every field filled at random, the
// fields read steered to values of every shape), and on two objects'
// encodings one after the other, which protobuf reads as one message, the
// second merged into the first (repeated fields append, the last of a
// singular field wins, messages merge). One Decoder reads them all, as a
// list's items.
func TestDecoderMatchesAPITypes(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	f := k8stest.Filler(seed)
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	label := func(m *map[string]string, key string) {
		if rng.IntN(2) == 0 {
			if *m == nil {
				*m = map[string]string{}
			}
			(*m)[key] = pick("web", "", "5d9f8c7b6")
		}
	}
	var d Decoder
	for i := range 2000 {
		var s1, s2 corev1.Service
		f.Fill(&s1)
		f.Fill(&s2)
		b := marshal(t, &s1)
		if i%4 == 0 {
			b = marshal(t, &s1, &s2)
		}
		got, err := d.Service(b)
		if err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		same(t, fmt.Sprintf("service %d", i), serviceText(got), serviceText(ServiceOf(unmarshal[corev1.Service](t, b))))

		var e1, e2 discoveryv1.EndpointSlice
		f.Fill(&e1)
		f.Fill(&e2)
		label(&e1.Labels, discoveryv1.LabelServiceName)
		label(&e2.Labels, discoveryv1.LabelServiceName)
		for j := range e1.Ports {
			if rng.IntN(3) == 0 {
				e1.Ports[j].Port = nil
			}
		}
		b = marshal(t, &e1)
		if i%4 == 0 {
			b = marshal(t, &e1, &e2)
		}
		want := sliceText(EndpointSliceOf(unmarshal[discoveryv1.EndpointSlice](t, b)))
		gotSlice, err := d.EndpointSlice(b, true)
		if err != nil {
			t.Fatalf("slice %d: %v", i, err)
		}
		same(t, fmt.Sprintf("slice %d", i), sliceText(gotSlice), want)
		// Without targetRefs, they are left out.
		for j := range want.Endpoints {
			want.Endpoints[j].TargetRef, want.Endpoints[j].TargetRefName = false, ""
		}
		if gotSlice, err = d.EndpointSlice(b, false); err != nil {
			t.Fatalf("slice %d: %v", i, err)
		}
		same(t, fmt.Sprintf("slice %d without targetRefs", i), sliceText(gotSlice), want)

		var n1, n2 corev1.Namespace
		f.Fill(&n1)
		f.Fill(&n2)
		b = marshal(t, &n1)
		if i%4 == 0 {
			b = marshal(t, &n1, &n2)
		}
		wantNS := namespaceText(NamespaceOf(unmarshal[corev1.Namespace](t, b)))
		gotNS, err := d.Namespace(b, true)
		if err != nil {
			t.Fatalf("namespace %d: %v", i, err)
		}
		same(t, fmt.Sprintf("namespace %d", i), namespaceText(gotNS), wantNS)
		wantNS.Labels = nil // without labels, they are left out
		if gotNS, err = d.Namespace(b, false); err != nil {
			t.Fatalf("namespace %d: %v", i, err)
		}
		same(t, fmt.Sprintf("namespace %d without labels", i), namespaceText(gotNS), wantNS)

		if i%3 == 0 { // pods are large; fewer of them
			var p1, p2 corev1.Pod
			f.Fill(&p1)
			f.Fill(&p2)
			label(&p1.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
			yes, no := true, false
			for j := range p1.OwnerReferences {
				p1.OwnerReferences[j].Controller = []*bool{&yes, &no, nil}[rng.IntN(3)]
			}
			b = marshal(t, &p1)
			if i%4 == 0 {
				b = marshal(t, &p1, &p2)
			}
			got, err := d.Pod(b)
			if err != nil {
				t.Fatalf("pod %d: %v", i, err)
			}
			same(t, fmt.Sprintf("pod %d", i), podText(got), podText(PodOf(unmarshal[corev1.Pod](t, b))))
		}
	}
}

// TestDecoderMalformed: bytes that are not a protobuf message are an error
// that wraps errMalformed, from every decoder, at every depth it reads.
func TestDecoderMalformed(t *testing.T) {
	var d Decoder
	decoders := map[string]func([]byte) error{
		"service": func(b []byte) error { _, err := d.Service(b); return err },
		"slice":   func(b []byte) error { _, err := d.EndpointSlice(b, true); return err },
		"ns":      func(b []byte) error { _, err := d.Namespace(b, true); return err },
		"pod":     func(b []byte) error { _, err := d.Pod(b); return err },
	}
	bad := map[string][]byte{
		"field number 0":  {0 << 3, 1},
		"truncated key":   {0x80},
		"varint":          {1<<3 | wireVarint, 0x80},
		"length past end": {1<<3 | wireBytes, 5, 'a'},
		"fixed64":         {1<<3 | wireFixed64, 1, 2, 3},
		"fixed32":         {1<<3 | wireFixed32, 1},
		"group":           {1<<3 | 3},
		"wire type 7":     {1<<3 | 7},
		// metadata (1) whose name (1) is cut short
		"in metadata": {1<<3 | wireBytes, 2, 1<<3 | wireBytes, 4},
	}
	for dn, dec := range decoders {
		for bn, b := range bad {
			if err := dec(b); !errors.Is(err, errMalformed) {
				t.Errorf("%s of %s: %v; want an error wrapping %v", dn, bn, err, errMalformed)
			}
		}
	}
	// Deeper: a label entry (metadata 1, labels 11), an endpoint's
	// conditions (endpoints 2, conditions 2) and its targetRef (4).
	label := []byte{1<<3 | wireBytes, 4, 11<<3 | wireBytes, 2, 1<<3 | wireBytes, 9}
	if err := decoders["ns"](label); !errors.Is(err, errMalformed) {
		t.Errorf("namespace with a bad label: %v", err)
	}
	if err := decoders["slice"]([]byte{2<<3 | wireBytes, 4, 2<<3 | wireBytes, 2, 1<<3 | wireVarint, 0x80}); !errors.Is(err, errMalformed) {
		t.Errorf("slice with bad conditions: %v", err)
	}
	ref := []byte{2<<3 | wireBytes, 4, 4<<3 | wireBytes, 2, 3<<3 | wireBytes, 1}
	if err := decoders["slice"](ref); !errors.Is(err, errMalformed) {
		t.Errorf("slice with a bad targetRef: %v", err)
	}
	// What is not read is not checked: labels of a namespace read without
	// them, targetRefs of a slice read without them.
	if _, err := d.Namespace(label, false); err != nil {
		t.Errorf("namespace read without labels: %v", err)
	}
	if _, err := d.EndpointSlice(ref, false); err != nil {
		t.Errorf("slice read without targetRefs: %v", err)
	}
}

// TestDecoderKnownFields reads hand-made encodings whose every field is
// known, as a check on the field numbers independent of the API types.
func TestDecoderKnownFields(t *testing.T) {
	msg := slices.Concat[[]byte]
	var d Decoder
	// An EndpointSlice: metadata {name "s", namespace "n", labels
	// {kubernetes.io/service-name: web}}, an endpoint {addresses 10.0.0.1
	// and 10.0.0.2, conditions {ready false}, hostname "h", targetRef
	// {name "p"}}, a port {name "x", protocol "UDP"} without a number,
	// addressType IPv4.
	b := msg(
		field(1, msg(field(1, []byte("s")), field(3, []byte("n")),
			field(11, msg(field(1, []byte(discoveryv1.LabelServiceName)), field(2, []byte("web")))))),
		field(2, msg(field(1, []byte("10.0.0.1")), field(1, []byte("10.0.0.2")), field(2, []byte{1<<3 | wireVarint, 0}),
			field(3, []byte("h")), field(4, msg(field(3, []byte("p")))))),
		field(3, msg(field(1, []byte("x")), field(2, []byte("UDP")))),
		field(4, []byte("IPv4")),
	)
	got, err := d.EndpointSlice(b, true)
	if err != nil {
		t.Fatal(err)
	}
	want := EndpointSlice[string]{Name: "s", Namespace: "n", ServiceName: "web", AddressType: "IPv4",
		Endpoints: []Endpoint[string]{{Addresses: []string{"10.0.0.1", "10.0.0.2"}, Hostname: "h", TargetRef: true, TargetRefName: "p"}},
		Ports:     []Port[string]{{Name: "x", Protocol: "UDP"}}}
	same(t, "slice", sliceText(got), want)
	if a := got.Endpoints[0].Addresses; cap(a) != len(a) {
		t.Errorf("an endpoint's addresses have room for %d more: appending to them would overwrite the next's", cap(a)-len(a))
	}

	// A Service port without a number has port 0, as its API type does.
	svc, err := d.Service(msg(field(2, msg(field(1, msg(field(1, []byte("dns"))))))))
	if err != nil {
		t.Fatal(err)
	}
	same(t, "service ports", ports(svc.Ports), []Port[string]{{Name: "dns", HasPort: true}})
}

// field encodes a length-delimited field.
func field(n int, data []byte) []byte {
	return append([]byte{byte(n<<3 | wireBytes), byte(len(data))}, data...)
}
