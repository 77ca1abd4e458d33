package k8s

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func servers(s []ServiceServer) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, fmt.Sprintf("%s u%d t%d", x.Addr, x.UDPPort, x.TCPPort))
	}
	return out
}

// TestServiceServers: the cluster of the local test setup, where Services
// are IPv6 and pods have an IPv4 link-local address beside their IPv6 one
// that EndpointSlices leave out: the IPv4 targets come from this node's
// pods only.
func TestServiceServers(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dnsPorts := []discoveryv1.EndpointPort{slicePort("metrics", tcp, 9153), slicePort("dns-tcp", tcp, 53), slicePort("dns", udp, 53)}
	local := testPod("kube-system", "coredns-a", "node-1", testNow, "fd00:244::2", "169.254.244.2")
	remote := testPod("kube-system", "coredns-b", "node-2", testNow, "fd00:244::3", "169.254.244.3")
	ix, c := startIndex(t, Config{TTL: 5, NodeName: "node-1"},
		ns("kube-system"), local, remote,
		clusterIPSvc("kube-system", "kube-dns", []string{"fd00:96::a"}, svcPort("dns", udp, 53), svcPort("dns-tcp", tcp, 53)),
		slice("kube-system", "kube-dns-x", "kube-dns", discoveryv1.AddressTypeIPv6, dnsPorts,
			ep{ips: []string{"fd00:244::3"}}, ep{ips: []string{"fd00:244::2"}}, ep{ips: []string{"fd00:244::4"}, ready: no}),
		// Other ports: the first of the protocol; none: 53.
		headlessSvc("ns1", "odd"),
		slice("ns1", "odd-a", "odd", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{slicePort("a", udp, 5353), slicePort("b", udp, 5354)},
			ep{ips: []string{"169.254.7.2"}}, ep{ips: []string{"169.254.7.1"}}),
		externalSvc("ns1", "ext", "example.com"),
	)
	if ix.DNSService() != "kube-system/kube-dns" {
		t.Errorf("DNSService = %q", ix.DNSService())
	}
	v4, v6, ok := ix.ServiceServers("kube-system", "kube-dns", 16)
	if !ok || !slices.Equal(servers(v4), []string{"169.254.244.2 u53 t53"}) ||
		!slices.Equal(servers(v6), []string{"fd00:244::2 u53 t53", "fd00:244::3 u53 t53"}) {
		t.Errorf("kube-dns: %q %q %v", servers(v4), servers(v6), ok)
	}
	v4, v6, ok = ix.ServiceServers("ns1", "odd", 16)
	if !ok || !slices.Equal(servers(v4), []string{"169.254.7.1 u5353 t53", "169.254.7.2 u5353 t53"}) || len(v6) != 0 {
		t.Errorf("odd: %q %q %v", servers(v4), servers(v6), ok)
	}
	if v4, _, _ := ix.ServiceServers("ns1", "odd", 1); !slices.Equal(servers(v4), []string{"169.254.7.1 u5353 t53"}) {
		t.Errorf("cut at 1: %q", servers(v4))
	}
	if v4, v6, ok := ix.ServiceServers("ns1", "ext", 16); !ok || len(v4)+len(v6) != 0 {
		t.Errorf("ExternalName: %q %q %v", servers(v4), servers(v6), ok)
	}
	if _, _, ok := ix.ServiceServers("ns1", "nope", 16); ok {
		t.Error("an unknown Service found")
	}
	if !ix.IsClusterIP(netip.MustParseAddr("fd00:96::a")) || ix.IsClusterIP(netip.MustParseAddr("169.254.20.10")) {
		t.Error("IsClusterIP")
	}

	// The remote CoreDNS moves to this node: the pod generation moves and
	// its IPv4 address becomes a target.
	gen := ix.PodGeneration()
	moved := testPod("kube-system", "coredns-c", "node-1", testNow, "fd00:244::3", "169.254.244.3")
	if _, err := c.CoreV1().Pods("kube-system").Create(bg, moved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnstest.WaitFor(t, 5*time.Second, "pod generation", func() bool { return ix.PodGeneration() != gen })
	v4, _, _ = ix.ServiceServers("kube-system", "kube-dns", 16)
	if !slices.Equal(servers(v4), []string{"169.254.244.2 u53 t53", "169.254.244.3 u53 t53"}) {
		t.Errorf("after the move: %q", servers(v4))
	}
	// Another node's pod does not move it.
	gen = ix.PodGeneration()
	if _, err := c.CoreV1().Pods("kube-system").Create(bg, testPod("kube-system", "x", "node-2", testNow, "fd00:244::9"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("kube-system").Create(bg, testPod("kube-system", "y", "node-1", testNow, "fd00:244::8"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnstest.WaitFor(t, 5*time.Second, "pod generation", func() bool { return ix.PodGeneration() == gen+1 })
}

func TestServiceServersBeforeSync(t *testing.T) {
	ix, err := New(fakeClient(), Config{TTL: 5, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := ix.ServiceServers("kube-system", "kube-dns", 16); ok || ix.IsClusterIP(netip.MustParseAddr("fd00:96::a")) {
		t.Error("answers before the sync")
	}
}
