package k8s

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// testNow is the fixed clock of the tests: every SOA serial is its Unix time.
var testNow = time.Unix(1700000000, 0)

const soaLine = "cluster.local. 5 SOA ns.dns.cluster.local. hostmaster.cluster.local. 1700000000 7200 1800 86400 5"

// Whole answers in the text form of format.
const (
	nxdomain = "NXDOMAIN aa\nns " + soaLine
	nodata   = "NOERROR aa\nns " + soaLine
)

// format renders a result as text: the rcode and AA flag, then one line
// per record, prefixed by its section (an, ns, ex), class omitted.
func format(r stage.Result) string {
	m := r.Msg
	if m == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString(dns.RcodeToString[m.Rcode])
	if m.Authoritative {
		b.WriteString(" aa")
	}
	if r.ExternalTarget != "" {
		b.WriteString(" ext=" + r.ExternalTarget)
	}
	if r.NotSynced {
		b.WriteString(" notsynced")
	}
	for _, s := range []struct {
		p   string
		rrs []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		for _, rr := range s.rrs {
			f := strings.Split(rr.String(), "\t")
			// name ttl class type rdata...
			line := append([]string{f[0], f[1]}, f[3:]...)
			b.WriteString("\n" + s.p + " " + strings.Join(line, " "))
		}
	}
	return b.String()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startIndex runs an Index over a fake clientset holding objs and waits
// for it to sync.
func startIndex(t testing.TB, cfg Config, objs ...runtime.Object) (*Index, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ix, err := New(client, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ix.now = func() time.Time { return testNow }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	dnstest.WaitFor(t, 5*time.Second, "sync", ix.Synced)
	return ix, client
}

// waitAnswer polls Lookup until it renders as want, for up to 5 s.
func waitAnswer(t testing.TB, ix *Index, name string, qtype uint16, want string) {
	t.Helper()
	dnstest.Eventually(t, 5*time.Second, name+" "+dns.TypeToString[qtype]+" to render as wanted", func() error {
		r, ok := ix.Lookup(name, qtype)
		got := "forward"
		if ok {
			got = format(r)
		}
		if got != want {
			return fmt.Errorf("got\n%s\nwant\n%s", got, want)
		}
		return nil
	})
}

func ns(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func svcPort(name string, proto corev1.Protocol, p int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: p}
}

func clusterIPSvc(namespace, name string, ips []string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips, Ports: ports,
		},
	}
}

func headlessSvc(namespace, name string, ports ...corev1.ServicePort) *corev1.Service {
	return clusterIPSvc(namespace, name, []string{"None"}, ports...)
}

func externalSvc(namespace, name, target string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target},
	}
}

type ep struct {
	ips      []string
	hostname string
	ready    *bool // nil: unknown, which counts as ready
}

var (
	yes = ptr(true)
	no  = ptr(false)
)

func ptr[T any](v T) *T { return &v }

func slicePort(name string, proto corev1.Protocol, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &p}
}

func slice(namespace, name, service string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: family,
		Ports:       ports,
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: e.ips, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			x.Hostname = ptr(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func testPod(namespace, name, node string, created time.Time, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

// fixture is the cluster most table tests run against.
func fixture() []runtime.Object {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	return []runtime.Object{
		ns("default"), ns("ns1"), ns("kube-system"),
		clusterIPSvc("kube-system", "kube-dns", []string{"10.96.0.53"}, svcPort("dns", udp, 53)),
		clusterIPSvc("ns1", "web", []string{"10.96.0.10", "fd00:10:96::a"},
			svcPort("http", tcp, 80), svcPort("https", tcp, 443)),
		slice("ns1", "web-x", "web", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.2.9"}}),
		clusterIPSvc("ns1", "v4only", []string{"10.96.0.11"}, svcPort("dns", udp, 53), svcPort("dns-tcp", tcp, 53)),
		clusterIPSvc("ns1", "nop", []string{"10.96.0.12"}, svcPort("", tcp, 8080)),
		headlessSvc("ns1", "hl", svcPort("http", tcp, 80)),
		slice("ns1", "hl-a", "hl", discoveryv1.AddressTypeIPv4, http,
			ep{ips: []string{"10.244.1.5"}, hostname: "web-0"},
			ep{ips: []string{"10.244.1.6"}, ready: yes},
			ep{ips: []string{"10.244.1.7"}, ready: no}),
		slice("ns1", "hl-b", "hl", discoveryv1.AddressTypeIPv6, http, ep{ips: []string{"fd00:244::5"}}),
		headlessSvc("ns1", "hl-empty", svcPort("http", tcp, 80)),
		slice("ns1", "hl-empty-a", "hl-empty", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.3.1"}, ready: no}),
		headlessSvc("ns1", "hl-noport"),
		slice("ns1", "hl-noport-a", "hl-noport", discoveryv1.AddressTypeIPv4, nil, ep{ips: []string{"10.244.4.1"}}),
		externalSvc("ns1", "ext", "Example.COM"),
		externalSvc("ns1", "ext-in", "web.ns1.svc.cluster.local"),
		externalSvc("ns1", "ext-chain", "ext.ns1.svc.cluster.local."),
		externalSvc("ns1", "ext-ip", "1.2.3.4"),
		externalSvc("ns1", "ext-self", "ext-self.ns1.svc.cluster.local"),
		externalSvc("ns1", "ext-missing", "nope.ns1.svc.cluster.local"),
		externalSvc("ns1", "loop-a", "loop-b.ns1.svc.cluster.local"),
		externalSvc("ns1", "loop-b", "loop-a.ns1.svc.cluster.local"),
		// A slice whose service does not exist still gets PTR records.
		slice("ns1", "orphan-a", "orphan", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.9.9"}}),
	}
}

type runtimeObject = runtime.Object

func fakeClient() *fake.Clientset { return fake.NewClientset() }

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
