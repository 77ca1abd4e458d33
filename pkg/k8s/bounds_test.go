package k8s

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// testLabelKeys are the namespace labels the decoder tests keep.
var testLabelKeys = labelKeys{"env": true, "dns": true}

// Whoever may label namespaces chooses how many labels they carry; the
// index keeps only those its selector reads, and none without one.
func TestNamespaceLabelsKeptAreTheSelectors(t *testing.T) {
	lbl := map[string]string{"env": "prod"}
	for i := range 1000 {
		lbl[fmt.Sprintf("team.example.com/label-%d", i)] = fmt.Sprint(i)
	}
	o := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1", Labels: lbl}}
	b, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := labels.Parse("env in (prod, staging),!legacy")
	if err != nil {
		t.Fatal(err)
	}
	keys := selectorKeys(sel)
	for name, f := range map[string]func() (any, error){
		"transform": func() (any, error) { return namespaceTransform(keys)(o) },
		"decoder":   func() (any, error) { return namespaceDecoder(keys)(new(pbdecode.Decoder), b) },
	} {
		got, err := f()
		if err != nil {
			t.Fatal(err)
		}
		n := got.(*namespace)
		if len(n.labels) != 1 || n.labels["env"] != "prod" {
			t.Errorf("%s: %d labels kept (%v...); want only env, the one the selector reads", name, len(n.labels), len(n.labels) > 0)
		}
	}
	if n, _ := namespaceTransform(selectorKeys(nil))(o); n.(*namespace).labels != nil {
		t.Errorf("without a selector: labels kept")
	}
}

// A list body that is not protobuf is read whole to be decoded: one that
// never ends is cut at maxJSONList.
func TestJSONListBounded(t *testing.T) {
	defer func(n int) { maxJSONList = n }(maxJSONList)
	maxJSONList = 1 << 20
	endless := io.MultiReader(strings.NewReader(`{"kind":"ServiceList","items":[`), spaces{})
	_, err := decodeListStream(bufio.NewReader(endless), decodeService, transformService)
	if err == nil || !strings.Contains(err.Error(), "non-protobuf list over 1 MiB") {
		t.Errorf("an endless JSON list: %v; want it cut at the bound", err)
	}
}

// spaces reads as endless JSON whitespace.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// A headless Service's answers hold at most what one reply carries (64
// KiB over TCP): the bare name's A and AAAA answers, built and kept at
// every change, and the SRV, port and endpoint answers assembled per query
// (whose work stops at the bound too). The cut is logged once.
func TestHugeHeadlessServiceAnswersBounded(t *testing.T) {
	tcp := corev1.ProtocolTCP
	ports := []discoveryv1.EndpointPort{slicePort("http", tcp, 80), slicePort("metrics", tcp, 9090)}
	objs := []runtime.Object{ns("ns1"), headlessSvc("ns1", "big", svcPort("http", tcp, 80), svcPort("metrics", tcp, 9090))}
	for s := range 50 { // 5,000 IPv4 and 3,000 IPv6 addresses, 100 per slice
		var eps []ep
		for i := range 100 {
			eps = append(eps, ep{ips: []string{fmt.Sprintf("10.%d.%d.%d", 100+s/10, s%10, i+1)}, hostname: "shared"})
		}
		objs = append(objs, slice("ns1", fmt.Sprintf("big-v4-%02d", s), "big", discoveryv1.AddressTypeIPv4, ports, eps...))
		if s < 30 {
			eps = eps[:0]
			for i := range 100 {
				eps = append(eps, ep{ips: []string{fmt.Sprintf("fd00::%x:%x", s+1, i+1)}})
			}
			objs = append(objs, slice("ns1", fmt.Sprintf("big-v6-%02d", s), "big", discoveryv1.AddressTypeIPv6, ports, eps...))
		}
	}
	var logs dnstest.SyncBuffer
	ix, _ := startIndex(t, Config{TTL: 5, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, objs...)
	const name = "big.ns1.svc.cluster.local."
	for _, c := range []struct {
		name  string
		qtype uint16
		max   int
	}{
		{name, dns.TypeA, maxAnswerA},
		{name, dns.TypeAAAA, maxAnswerAAAA},
		{name, dns.TypeSRV, maxAnswerSRV},
		{"_http._tcp." + name, dns.TypeSRV, maxAnswerSRV},
		{"_http._tcp." + name, dns.TypeA, maxAnswerSRV},
		{"shared." + name, dns.TypeA, maxAnswerSRV},
		{"shared." + name, dns.TypeSRV, maxAnswerSRV},
	} {
		res, ok := ix.Lookup(c.name, c.qtype)
		if !ok || res.Msg == nil || res.Msg.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s %s: %v %+v", c.name, dns.TypeToString[c.qtype], ok, res)
		}
		if n := len(res.Msg.Answer); n == 0 || n > c.max {
			t.Errorf("%s %s: %d records; want 1 to %d", c.name, dns.TypeToString[c.qtype], n, c.max)
		}
		m := res.Msg.Copy()
		m.SetQuestion(c.name, c.qtype)
		m.Compress = true
		if c.qtype != dns.TypeSRV { // SRV targets differ per endpoint: not all fit
			if b, err := m.Pack(); err != nil || len(b) > 65535 {
				t.Errorf("%s %s: %d bytes packed (%v); want it to fit a TCP reply", c.name, dns.TypeToString[c.qtype], len(b), err)
			}
		}
	}
	if n := strings.Count(logs.String(), "more ready addresses than one answer carries"); n != 1 {
		t.Errorf("%d warnings; want one:\n%s", n, logs.String())
	}
}

// TestAttackServicePortsBounded: the API server bounds a Service's ports
// only by the object's size (some 50,000 fit in 1.5 MiB), and every SRV
// query walked them all while its answer stops at maxAnswerSRV. The index
// keeps the first maxServicePorts, in the transform and the protobuf
// decoder alike.
func TestAttackServicePortsBounded(t *testing.T) {
	o := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "many", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.50", ClusterIPs: []string{"10.96.0.50"}}}
	for i := range 5000 {
		o.Spec.Ports = append(o.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(1000 + i)})
	}
	b, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() (any, error){
		"transform": func() (any, error) { return transformService(o) },
		"decoder":   func() (any, error) { return decodeService(new(pbdecode.Decoder), b) },
	} {
		got, err := f()
		if err != nil {
			t.Fatal(err)
		}
		s := got.(*service)
		if len(s.ports) != maxServicePorts || cap(s.ports) != maxServicePorts || s.ports[0].name != "p0" {
			t.Errorf("%s: %d ports kept (capacity %d); want the first %d", name, len(s.ports), cap(s.ports), maxServicePorts)
		}
	}
}
