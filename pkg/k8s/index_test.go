package k8s

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
)

var bg = context.Background()

// TestUpdates drives every kind of object through create, update and
// delete with the fake clientset and checks the answers follow.
func TestUpdates(t *testing.T) {
	ix, c := startIndex(t, Config{TTL: 5}, ns("ns1"))
	tcp := corev1.ProtocolTCP
	name := "api.ns1.svc.cluster.local."

	waitAnswer(t, ix, name, dns.TypeA, nxdomain)
	s := clusterIPSvc("ns1", "api", []string{"10.96.1.1"}, svcPort("http", tcp, 80))
	if _, err := c.CoreV1().Services("ns1").Create(bg, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, "NOERROR aa\nan "+name+" 5 A 10.96.1.1")
	waitAnswer(t, ix, name, dns.TypeAAAA, nodata)
	waitAnswer(t, ix, "1.1.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 1.1.96.10.in-addr.arpa. 5 PTR "+name)

	// Dual-stack now, port renamed.
	s.Spec.ClusterIPs = []string{"10.96.1.2", "fd00:10:96::1:2"}
	s.Spec.ClusterIP = "10.96.1.2"
	s.Spec.Ports[0].Name = "web"
	if _, err := c.CoreV1().Services("ns1").Update(bg, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, "NOERROR aa\nan "+name+" 5 A 10.96.1.2")
	waitAnswer(t, ix, name, dns.TypeAAAA, "NOERROR aa\nan "+name+" 5 AAAA fd00:10:96::1:2")
	waitAnswer(t, ix, "1.1.96.10.in-addr.arpa.", dns.TypePTR, "forward")
	waitAnswer(t, ix, "_http._tcp."+name, dns.TypeSRV, nxdomain)
	waitAnswer(t, ix, "_web._tcp."+name, dns.TypeSRV, "NOERROR aa\nan _web._tcp."+name+" 5 SRV 0 50 80 "+name+
		"\nex "+name+" 5 A 10.96.1.2\nex "+name+" 5 AAAA fd00:10:96::1:2")

	// Endpoints come and go; readiness flips.
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 8080)}
	sl := slice("ns1", "api-1", "api", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.0.7"}, ready: yes})
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Create(bg, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, "10-244-0-7."+name, dns.TypeA, "NOERROR aa\nan 10-244-0-7."+name+" 5 A 10.244.0.7")
	waitAnswer(t, ix, "7.0.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 7.0.244.10.in-addr.arpa. 5 PTR 10-244-0-7."+name)
	sl.Endpoints[0].Conditions.Ready = no
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Update(bg, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, "10-244-0-7."+name, dns.TypeA, nxdomain)
	waitAnswer(t, ix, "7.0.244.10.in-addr.arpa.", dns.TypePTR, "forward")

	// The service becomes headless: the not-ready endpoint does not count.
	if err := c.CoreV1().Services("ns1").Delete(bg, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, nxdomain)
	if _, err := c.CoreV1().Services("ns1").Create(bg, headlessSvc("ns1", "api"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, nxdomain)
	sl.Endpoints[0].Conditions.Ready = nil
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.8"}, Hostname: ptr("api-1")})
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Update(bg, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, "NOERROR aa\nan "+name+" 5 A 10.244.0.7\nan "+name+" 5 A 10.244.0.8")
	waitAnswer(t, ix, "api-1."+name, dns.TypeA, "NOERROR aa\nan api-1."+name+" 5 A 10.244.0.8")

	// A second slice, then the first one goes.
	sl2 := slice("ns1", "api-2", "api", discoveryv1.AddressTypeIPv6, http, ep{ips: []string{"fd00::9"}})
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Create(bg, sl2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeAAAA, "NOERROR aa\nan "+name+" 5 AAAA fd00::9")
	if err := c.DiscoveryV1().EndpointSlices("ns1").Delete(bg, "api-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, nodata)
	waitAnswer(t, ix, "api-1."+name, dns.TypeA, nxdomain)

	// A slice moving to another service (label change).
	sl2.Labels[discoveryv1.LabelServiceName] = "other"
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Update(bg, sl2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeAAAA, nxdomain)
	waitAnswer(t, ix, reverse6("fd00::9"), dns.TypePTR, "NOERROR aa\nan "+reverse6("fd00::9")+" 5 PTR fd00--9.other.ns1.svc.cluster.local.")

	// ExternalName retargeted.
	if _, err := c.CoreV1().Services("ns1").Create(bg, externalSvc("ns1", "db", "db.example.com"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	db := "db.ns1.svc.cluster.local."
	waitAnswer(t, ix, db, dns.TypeA, "NOERROR aa ext=db.example.com.\nan "+db+" 5 CNAME db.example.com.")
	e := externalSvc("ns1", "db", "db2.example.com")
	if _, err := c.CoreV1().Services("ns1").Update(bg, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, db, dns.TypeA, "NOERROR aa ext=db2.example.com.\nan "+db+" 5 CNAME db2.example.com.")

	// A namespace going away hides its names at once.
	if err := c.CoreV1().Namespaces().Delete(bg, "ns1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, db, dns.TypeA, nxdomain)
	waitAnswer(t, ix, "ns1.svc.cluster.local.", dns.TypeA, nxdomain)

	st := ix.Stats()
	if !st.Synced || st.Objects[ObjServices] != 2 || st.Objects[ObjEndpointSlices] != 1 || st.Objects[ObjNamespaces] != 0 || st.Objects[ObjEndpoints] != 1 {
		t.Errorf("stats: %+v", st)
	}
}

// TestDNSServiceNS checks the apex NS follows the DNS Service, and falls
// back to ns.dns.<zone> with the configured addresses.
func TestDNSServiceNS(t *testing.T) {
	ix, c := startIndex(t, Config{TTL: 5, NSAddrs: []netip.Addr{mustAddr("169.254.20.10")}}, ns("kube-system"))
	waitAnswer(t, ix, "cluster.local.", dns.TypeNS,
		"NOERROR aa\nan cluster.local. 5 NS ns.dns.cluster.local.\nex ns.dns.cluster.local. 5 A 169.254.20.10")
	waitAnswer(t, ix, "ns.dns.cluster.local.", dns.TypeA, "NOERROR aa\nan ns.dns.cluster.local. 5 A 169.254.20.10")
	s := clusterIPSvc("kube-system", "kube-dns", []string{"10.96.0.10", "fd00:10:96::a"}, svcPort("dns", corev1.ProtocolUDP, 53))
	if _, err := c.CoreV1().Services("kube-system").Create(bg, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kd := "kube-dns.kube-system.svc.cluster.local."
	waitAnswer(t, ix, "cluster.local.", dns.TypeNS,
		"NOERROR aa\nan cluster.local. 5 NS "+kd+"\nex "+kd+" 5 A 10.96.0.10\nex "+kd+" 5 AAAA fd00:10:96::a")
	waitAnswer(t, ix, "ns.dns.cluster.local.", dns.TypeAAAA, "NOERROR aa\nan ns.dns.cluster.local. 5 AAAA fd00:10:96::a")
}

// TestSerialMoves checks negative answers carry the serial of the last
// change.
func TestSerialMoves(t *testing.T) {
	ix, c := startIndex(t, Config{TTL: 30}, ns("ns1"))
	var now atomic.Int64
	now.Store(testNow.Unix())
	ix.wmu.Lock()
	ix.now = func() time.Time { return time.Unix(now.Load(), 0) }
	ix.wmu.Unlock()
	now.Store(testNow.Unix() + 100)
	if _, err := c.CoreV1().Namespaces().Create(bg, ns("ns2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// SOA TTL is min(ttl, 300); MINIMUM is the ttl.
	waitAnswer(t, ix, "x.ns2.svc.cluster.local.", dns.TypeA,
		"NXDOMAIN aa\nns cluster.local. 30 SOA ns.dns.cluster.local. hostmaster.cluster.local. 1700000100 7200 1800 86400 30")
}

// TestPodNamespace covers the node-local pod map: host-network and
// finished pods are ignored, a reused IP goes to the newest pod, and
// deleting the old pod keeps the new mapping.
func TestPodNamespace(t *testing.T) {
	old := testPod("ns-old", "job", "node-1", testNow.Add(-time.Hour), "10.244.0.5")
	hostNet := testPod("ns-host", "agent", "node-1", testNow, "192.0.2.1")
	hostNet.Spec.HostNetwork = true
	other := testPod("ns-other", "x", "node-2", testNow, "10.244.9.1")
	ix, c := startIndex(t, Config{TTL: 5, Pods: PodsInsecure, NodeName: "node-1"}, old, hostNet, other)

	check := func(ip, want string) {
		t.Helper()
		dnstest.WaitFor(t, 5*time.Second, ip+" -> "+want, func() bool {
			got, ok := ix.PodNamespace(mustAddr(ip))
			if !ok {
				got = ""
			}
			return got == want
		})
	}
	check("10.244.0.5", "ns-old")
	check("192.0.2.1", "")
	check("10.244.9.1", "") // another node's pod
	if _, ok := ix.PodNamespace(netip.MustParseAddr("::ffff:10.244.0.5")); !ok {
		t.Errorf("v4-mapped client address not found")
	}

	// The address is reused by a newer pod before the old one is gone.
	young := testPod("ns-new", "web", "node-1", testNow, "10.244.0.5")
	if _, err := c.CoreV1().Pods("ns-new").Create(bg, young, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("10.244.0.5", "ns-new")
	pods := ix.Stats().Objects[ObjPods]
	if err := c.CoreV1().Pods("ns-old").Delete(bg, "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The deletion has been processed once the old pod is gone from the
	// index; only then does the mapping staying tell anything.
	dnstest.WaitFor(t, 5*time.Second, "the old pod's deletion processed", func() bool { return ix.Stats().Objects[ObjPods] == pods-1 })
	check("10.244.0.5", "ns-new")

	// A pod that finished releases its address.
	young.Status.Phase = corev1.PodSucceeded
	if _, err := c.CoreV1().Pods("ns-new").UpdateStatus(bg, young, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("10.244.0.5", "")
	if st := ix.Stats(); st.Objects[ObjPods] != 2 {
		t.Errorf("stats: %+v", st)
	}
}

// TestConcurrentLookups runs lookups against a stream of updates; with
// -race it checks the locking.
func TestConcurrentLookups(t *testing.T) {
	ix, c := startIndex(t, Config{TTL: 5}, fixture()...)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names := []string{web, hl, "web-0." + hl, "_http._tcp." + hl, "ext-in.ns1.svc.cluster.local.", "missing.ns1.svc.cluster.local."}
			for i := 0; ctx.Err() == nil; i++ {
				for _, q := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV} {
					r, ok := ix.Lookup(names[i%len(names)], q)
					if !ok || r.Msg == nil {
						t.Errorf("lookup %s failed", names[i%len(names)])
						return
					}
				}
				ix.Lookup("5.1.244.10.in-addr.arpa.", dns.TypePTR)
			}
		}()
	}
	tcp := corev1.ProtocolTCP
	for i := range 30 {
		sl := slice("ns1", "hl-a", "hl", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("http", tcp, 80)},
			ep{ips: []string{"10.244.1.5"}, hostname: "web-0"}, ep{ips: []string{netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)}).String()}})
		if _, err := c.DiscoveryV1().EndpointSlices("ns1").Update(bg, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		s := clusterIPSvc("ns1", "web", []string{netip.AddrFrom4([4]byte{10, 96, 5, byte(i)}).String()}, svcPort("http", tcp, 80))
		if _, err := c.CoreV1().Services("ns1").Update(bg, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAnswer(t, ix, web, dns.TypeA, "NOERROR aa\nan "+web+" 5 A 10.96.5.29")
	cancel()
	wg.Wait()
}

// TestSharedAddress covers an address claimed by endpoints of two
// services: PTR answers name both, and removing either claim keeps the
// other.
func TestSharedAddress(t *testing.T) {
	tcp := corev1.ProtocolTCP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	ix, c := startIndex(t, Config{TTL: 5}, ns("ns1"),
		headlessSvc("ns1", "a"), headlessSvc("ns1", "b"),
		slice("ns1", "a-1", "a", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.1.6"}}),
		slice("ns1", "b-1", "b", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.1.6"}, hostname: "b-0"}))
	const rev = "6.1.244.10.in-addr.arpa."
	waitAnswer(t, ix, rev, dns.TypePTR, "NOERROR aa\nan "+rev+" 5 PTR 10-244-1-6.a.ns1.svc.cluster.local.\nan "+rev+" 5 PTR b-0.b.ns1.svc.cluster.local.")
	waitAnswer(t, ix, "10-244-1-6.a.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa\nan 10-244-1-6.a.ns1.svc.cluster.local. 5 A 10.244.1.6")
	waitAnswer(t, ix, "10-244-1-6.b.ns1.svc.cluster.local.", dns.TypeA, nxdomain) // b's endpoint has a hostname
	if err := c.DiscoveryV1().EndpointSlices("ns1").Delete(bg, "a-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, rev, dns.TypePTR, "NOERROR aa\nan "+rev+" 5 PTR b-0.b.ns1.svc.cluster.local.")
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Create(bg,
		slice("ns1", "a-1", "a", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.1.6"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, rev, dns.TypePTR, "NOERROR aa\nan "+rev+" 5 PTR b-0.b.ns1.svc.cluster.local.\nan "+rev+" 5 PTR 10-244-1-6.a.ns1.svc.cluster.local.")
	if err := c.DiscoveryV1().EndpointSlices("ns1").Delete(bg, "b-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, rev, dns.TypePTR, "NOERROR aa\nan "+rev+" 5 PTR 10-244-1-6.a.ns1.svc.cluster.local.")
	if err := c.DiscoveryV1().EndpointSlices("ns1").Delete(bg, "a-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, rev, dns.TypePTR, "forward")
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if n := len(ix.epIPs.v4) + len(ix.epIPs.v6) + len(ix.epIPs.more); n != 0 {
		t.Errorf("endpoint index not empty: %d entries", n)
	}
}

// TestPodsOnly: with the cluster zone forwarded, only this node's pods are
// watched (for the search-path walk); no Service, slice or namespace list
// reaches the API server, even in verified pod mode.
func TestPodsOnly(t *testing.T) {
	mine := testPod("team-a", "web", "node-1", testNow, "10.244.0.7")
	other := testPod("team-b", "db", "node-2", testNow, "10.244.9.7")
	ix, c := startIndex(t, Config{TTL: 5, Pods: PodsVerified, NodeName: "node-1", PodsOnly: true}, mine, other)
	if ns, ok := ix.PodNamespace(mustAddr("10.244.0.7")); !ok || ns != "team-a" {
		t.Fatalf("this node's pod: %q %v", ns, ok)
	}
	if _, ok := ix.PodNamespace(mustAddr("10.244.9.7")); ok {
		t.Fatal("another node's pod is known")
	}
	for _, a := range c.Actions() {
		if r := a.GetResource().Resource; r != "pods" {
			t.Errorf("%s of %s reached the API server", a.GetVerb(), r)
		}
	}
}

// TestClusterIPAnswerKeptAcrossSlices: a ClusterIP Service whose own object
// did not change keeps its bare name's A message across EndpointSlice
// events (the same *dns.Msg), so the pipeline's packed reply and the
// search-path shortcuts won by it stay valid through endpoint churn; a
// change of the Service itself builds a new one.
func TestClusterIPAnswerKeptAcrossSlices(t *testing.T) {
	ix, c := startIndex(t, Config{TTL: 5}, ns("ns1"))
	tcp := corev1.ProtocolTCP
	name := "api.ns1.svc.cluster.local."
	s := clusterIPSvc("ns1", "api", []string{"10.96.1.1"}, svcPort("http", tcp, 80))
	if _, err := c.CoreV1().Services("ns1").Create(bg, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, "NOERROR aa\nan "+name+" 5 A 10.96.1.1")
	msgA := func() *dns.Msg {
		t.Helper()
		res, ok := ix.Lookup(name, dns.TypeA)
		if !ok || res.Msg == nil {
			t.Fatalf("Lookup(%s, A) = %v, %v", name, res, ok)
		}
		return res.Msg
	}
	before := msgA()

	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 8080)}
	sl := slice("ns1", "api-1", "api", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.0.7"}, ready: yes})
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Create(bg, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The slice's event has been applied once its endpoint answers.
	waitAnswer(t, ix, "10-244-0-7."+name, dns.TypeA, "NOERROR aa\nan 10-244-0-7."+name+" 5 A 10.244.0.7")
	if after := msgA(); after != before {
		t.Fatalf("an EndpointSlice event replaced the ClusterIP Service's A message (%p, was %p)", after, before)
	}

	s.Spec.ClusterIPs, s.Spec.ClusterIP = []string{"10.96.1.2"}, "10.96.1.2"
	if _, err := c.CoreV1().Services("ns1").Update(bg, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, name, dns.TypeA, "NOERROR aa\nan "+name+" 5 A 10.96.1.2")
	if msgA() == before {
		t.Fatal("a changed Service still answers with its old A message")
	}
}
