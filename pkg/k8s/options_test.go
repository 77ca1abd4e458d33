package k8s

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tests of the options CoreDNS's kubernetes plugin has and nodedns
// follows: endpoint_pod_names, ignore empty_service, noendpoints,
// namespaces, namespace_labels, several zones and fallthrough. The
// differential test against CoreDNS itself is in
// integration/zoneoptions_test.go.

// withPod sets the targetRef of the i-th endpoint of s to the pod name.
func withPod(s *discoveryv1.EndpointSlice, i int, name string) *discoveryv1.EndpointSlice {
	s.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.Namespace, Name: name}
	return s
}

func podNamesFixture() []runtimeObject {
	tcp := corev1.ProtocolTCP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	long := strings.Repeat("p", 64)
	hlSlice := slice("ns1", "hl-a", "hl", discoveryv1.AddressTypeIPv4, http,
		ep{ips: []string{"10.244.1.5"}, hostname: "web-0"}, // hostname wins over the pod
		ep{ips: []string{"10.244.1.6"}},                    // pod name
		ep{ips: []string{"10.244.1.7"}},                    // pod name of 64 bytes: address
		ep{ips: []string{"10.244.1.8"}},                    // pod name with a dot: address
		ep{ips: []string{"10.244.1.9"}})                    // no targetRef: address
	withPod(hlSlice, 0, "web-0-pod")
	withPod(hlSlice, 1, "web-6d9f-abcde")
	withPod(hlSlice, 2, long)
	withPod(hlSlice, 3, "dotted.pod-1")
	return []runtimeObject{
		ns("ns1"),
		headlessSvc("ns1", "hl", svcPort("http", tcp, 80)),
		hlSlice,
		clusterIPSvc("ns1", "web", []string{"10.96.0.10"}, svcPort("http", tcp, 80)),
		withPod(slice("ns1", "web-x", "web", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.2.9"}}), 0, "web-abc12"),
	}
}

func TestEndpointPodNames(t *testing.T) {
	ix, _ := startIndex(t, Config{TTL: 5, EndpointPodNames: true}, podNamesFixture()...)
	runCases(t, ix, []lookupCase{
		{hl, dns.TypeSRV, `NOERROR aa
an ` + hl + ` 5 SRV 0 20 80 web-0.` + hl + `
an ` + hl + ` 5 SRV 0 20 80 web-6d9f-abcde.` + hl + `
an ` + hl + ` 5 SRV 0 20 80 10-244-1-7.` + hl + `
an ` + hl + ` 5 SRV 0 20 80 10-244-1-8.` + hl + `
an ` + hl + ` 5 SRV 0 20 80 10-244-1-9.` + hl + `
ex web-0.` + hl + ` 5 A 10.244.1.5
ex web-6d9f-abcde.` + hl + ` 5 A 10.244.1.6
ex 10-244-1-7.` + hl + ` 5 A 10.244.1.7
ex 10-244-1-8.` + hl + ` 5 A 10.244.1.8
ex 10-244-1-9.` + hl + ` 5 A 10.244.1.9`},
		{"web-6d9f-abcde." + hl, dns.TypeA, "NOERROR aa\nan web-6d9f-abcde." + hl + " 5 A 10.244.1.6"},
		// An endpoint named after its pod is no longer named by its
		// address (CoreDNS matches the one label an endpoint has).
		{"10-244-1-6." + hl, dns.TypeA, nxdomain},
		{"web-0-pod." + hl, dns.TypeA, nxdomain},
		{"10-244-1-7." + hl, dns.TypeA, "NOERROR aa\nan 10-244-1-7." + hl + " 5 A 10.244.1.7"},
		{"10-244-1-9." + hl, dns.TypeA, "NOERROR aa\nan 10-244-1-9." + hl + " 5 A 10.244.1.9"},
		{"6.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 6.1.244.10.in-addr.arpa. 5 PTR web-6d9f-abcde." + hl},
		{"8.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 8.1.244.10.in-addr.arpa. 5 PTR 10-244-1-8." + hl},
		// Endpoint names of a ClusterIP service follow the same rule.
		{"web-abc12." + web, dns.TypeA, "NOERROR aa\nan web-abc12." + web + " 5 A 10.244.2.9"},
		{"10-244-2-9." + web, dns.TypeA, nxdomain},
		{"9.2.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 9.2.244.10.in-addr.arpa. 5 PTR web-abc12." + web},
	})

	t.Run("off", func(t *testing.T) {
		ix, _ := startIndex(t, Config{TTL: 5}, podNamesFixture()...)
		runCases(t, ix, []lookupCase{
			{"web-6d9f-abcde." + hl, dns.TypeA, nxdomain},
			{"10-244-1-6." + hl, dns.TypeA, "NOERROR aa\nan 10-244-1-6." + hl + " 5 A 10.244.1.6"},
			{"6.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 6.1.244.10.in-addr.arpa. 5 PTR 10-244-1-6." + hl},
		})
	})
}

func TestIgnoreEmptyService(t *testing.T) {
	tcp := corev1.ProtocolTCP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	empty := "empty.ns1.svc.cluster.local."
	notReady := "notready.ns1.svc.cluster.local."
	objs := []runtimeObject{
		ns("ns1"),
		clusterIPSvc("ns1", "web", []string{"10.96.0.10"}, svcPort("http", tcp, 80)),
		slice("ns1", "web-x", "web", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.2.9"}}),
		clusterIPSvc("ns1", "empty", []string{"10.96.0.20"}, svcPort("http", tcp, 80)),
		clusterIPSvc("ns1", "notready", []string{"10.96.0.21"}, svcPort("http", tcp, 80)),
		slice("ns1", "notready-x", "notready", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.3.1"}, ready: no}),
		externalSvc("ns1", "ext", "example.com"),
		externalSvc("ns1", "ext-empty", empty),
		headlessSvc("ns1", "hl", svcPort("http", tcp, 80)),
		slice("ns1", "hl-a", "hl", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.1.5"}}),
	}
	ix, c := startIndex(t, Config{TTL: 5, IgnoreEmptyService: true}, objs...)
	runCases(t, ix, []lookupCase{
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		// No ready endpoint: every name of the service is NXDOMAIN, as
		// CoreDNS skips the service whatever is asked.
		{empty, dns.TypeA, nxdomain},
		{empty, dns.TypeAAAA, nxdomain},
		{empty, dns.TypeSRV, nxdomain},
		{empty, dns.TypeTXT, nxdomain},
		{"_http._tcp." + empty, dns.TypeSRV, nxdomain},
		{"_http._tcp." + empty, dns.TypeA, nxdomain},
		{notReady, dns.TypeA, nxdomain},
		{"10-244-3-1." + notReady, dns.TypeA, nxdomain},
		// The ClusterIP's PTR still answers (CoreDNS's reverse lookup
		// does not apply the option).
		{"20.0.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 20.0.96.10.in-addr.arpa. 5 PTR " + empty},
		// Headless and ExternalName services are not affected.
		{hl, dns.TypeA, "NOERROR aa\nan " + hl + " 5 A 10.244.1.5"},
		{"ext.ns1.svc" + zone, dns.TypeCNAME, "NOERROR aa\nan ext.ns1.svc.cluster.local. 5 CNAME example.com."},
		// A CNAME into an ignored service has no data behind it.
		{"ext-empty.ns1.svc" + zone, dns.TypeA, nodata},
	})

	// An endpoint turning ready brings the service back; losing it hides
	// the service again.
	s := slice("ns1", "empty-x", "empty", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.4.1"}})
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Create(bg, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, empty, dns.TypeA, "NOERROR aa\nan "+empty+" 5 A 10.96.0.20")
	waitAnswer(t, ix, "_http._tcp."+empty, dns.TypeSRV, "NOERROR aa\nan _http._tcp."+empty+" 5 SRV 0 100 80 "+empty+"\nex "+empty+" 5 A 10.96.0.20")
	s.Endpoints[0].Conditions.Ready = no
	if _, err := c.DiscoveryV1().EndpointSlices("ns1").Update(bg, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, empty, dns.TypeA, nxdomain)
	waitAnswer(t, ix, "_http._tcp."+empty, dns.TypeSRV, nxdomain)

	t.Run("off", func(t *testing.T) {
		ix, _ := startIndex(t, Config{TTL: 5}, objs...)
		runCases(t, ix, []lookupCase{
			{empty, dns.TypeA, "NOERROR aa\nan " + empty + " 5 A 10.96.0.20"},
			{notReady, dns.TypeTXT, nodata},
		})
	})
}

func TestNoEndpoints(t *testing.T) {
	ix, c := startIndex(t, Config{TTL: 5, NoEndpoints: true}, fixture()...)
	runCases(t, ix, []lookupCase{
		// ClusterIP services answer, SRV included (from the service's
		// ports).
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		{"_http._tcp." + web, dns.TypeSRV, `NOERROR aa
an _http._tcp.` + web + ` 5 SRV 0 50 80 ` + web + `
ex ` + web + ` 5 A 10.96.0.10
ex ` + web + ` 5 AAAA fd00:10:96::a`},
		// Without endpoints: headless names, endpoint names and their
		// PTRs do not exist.
		{hl, dns.TypeA, nxdomain},
		{hl, dns.TypeSRV, nxdomain},
		{"web-0." + hl, dns.TypeA, nxdomain},
		{"_http._tcp." + hl, dns.TypeSRV, nxdomain},
		{"10-244-2-9." + web, dns.TypeA, nxdomain},
		{"5.1.244.10.in-addr.arpa.", dns.TypePTR, "forward"},
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 10.0.96.10.in-addr.arpa. 5 PTR " + web},
	})
	if st := ix.Stats(); st.Objects[ObjEndpointSlices] != 0 || st.Objects[ObjEndpoints] != 0 {
		t.Errorf("stats with NoEndpoints: %+v", st)
	}
	// No EndpointSlice list or watch is made at all.
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "endpointslices" {
			t.Errorf("EndpointSlices were %sed with NoEndpoints", a.GetVerb())
		}
	}
}

// nsFixture has services, endpoints and pods in an exposed and a hidden
// namespace.
func nsFixture() []runtimeObject {
	tcp := corev1.ProtocolTCP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	lns := func(name string, lbl map[string]string) *corev1.Namespace {
		n := ns(name)
		n.Labels = lbl
		return n
	}
	return []runtimeObject{
		lns("ns1", map[string]string{"dns": "yes", "env": "prod"}),
		lns("ns2", map[string]string{"env": "dev"}),
		clusterIPSvc("ns1", "web", []string{"10.96.0.10"}, svcPort("http", tcp, 80)),
		clusterIPSvc("ns2", "web", []string{"10.96.0.20"}, svcPort("http", tcp, 80)),
		headlessSvc("ns2", "hl", svcPort("http", tcp, 80)),
		slice("ns2", "hl-a", "hl", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.2.5"}, hostname: "h"}),
		externalSvc("ns1", "to-hidden", "web.ns2.svc.cluster.local"),
	}
}

// hiddenCases are the answers in the hidden namespace ns2 and the exposed
// ns1; ptr is what an unknown PTR gets.
func hiddenCases(ptr string) []lookupCase {
	web2 := "web.ns2.svc.cluster.local."
	return []lookupCase{
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		{"ns1.svc" + zone, dns.TypeA, nodata},
		{"10-0-0-1.ns1.pod" + zone, dns.TypeA, "NOERROR aa\nan 10-0-0-1.ns1.pod.cluster.local. 5 A 10.0.0.1"},
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 10.0.96.10.in-addr.arpa. 5 PTR " + web},
		{web2, dns.TypeA, nxdomain},
		{web2, dns.TypeSRV, nxdomain},
		{web2, dns.TypeTXT, nxdomain},
		{"ns2.svc" + zone, dns.TypeA, nxdomain},
		{"hl.ns2.svc" + zone, dns.TypeA, nxdomain},
		{"h.hl.ns2.svc" + zone, dns.TypeA, nxdomain},
		{"10-0-0-1.ns2.pod" + zone, dns.TypeA, nxdomain},
		{"ns2.pod" + zone, dns.TypeA, nxdomain},
		{"20.0.96.10.in-addr.arpa.", dns.TypePTR, ptr},
		{"5.2.244.10.in-addr.arpa.", dns.TypePTR, ptr},
		{"to-hidden.ns1.svc" + zone, dns.TypeA, nodata},
	}
}

func TestNamespaces(t *testing.T) {
	ix, _ := startIndex(t, Config{TTL: 5, Namespaces: []string{"ns1", "ns3"}}, nsFixture()...)
	runCases(t, ix, hiddenCases("forward"))
	// An allowed namespace that does not exist is still NXDOMAIN.
	runCases(t, ix, []lookupCase{{"ns3.svc" + zone, dns.TypeA, nxdomain}})

	t.Run("no fallthrough", func(t *testing.T) {
		ix, _ := startIndex(t, Config{TTL: 5, Namespaces: []string{"ns1"}, Fallthrough: []string{}}, nsFixture()...)
		runCases(t, ix, hiddenCases("NXDOMAIN aa\nns in-addr.arpa. 5 SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 1700000000 7200 1800 86400 5"))
	})
}

func TestNamespaceLabels(t *testing.T) {
	for _, sel := range []string{"dns=yes", "env in (prod, staging)", "dns", "env!=dev"} {
		t.Run(sel, func(t *testing.T) {
			ix, _ := startIndex(t, Config{TTL: 5, NamespaceLabels: sel}, nsFixture()...)
			runCases(t, ix, hiddenCases("forward"))
		})
	}

	// Labels change: the namespace's names appear and disappear.
	ix, c := startIndex(t, Config{TTL: 5, NamespaceLabels: "dns=yes"}, nsFixture()...)
	web2 := "web.ns2.svc.cluster.local."
	n2, err := c.CoreV1().Namespaces().Get(bg, "ns2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2.Labels["dns"] = "yes"
	if _, err := c.CoreV1().Namespaces().Update(bg, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, web2, dns.TypeA, "NOERROR aa\nan "+web2+" 5 A 10.96.0.20")
	waitAnswer(t, ix, "20.0.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 20.0.96.10.in-addr.arpa. 5 PTR "+web2)
	delete(n2.Labels, "dns")
	if _, err := c.CoreV1().Namespaces().Update(bg, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, web2, dns.TypeA, nxdomain)
	waitAnswer(t, ix, "20.0.96.10.in-addr.arpa.", dns.TypePTR, "forward")
	if st := ix.Stats(); st.Objects[ObjNamespaces] != 1 {
		t.Errorf("namespaces exposed: %d, want 1", st.Objects[ObjNamespaces])
	}
}

func TestZones(t *testing.T) {
	tcp := corev1.ProtocolTCP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	objs := []runtimeObject{
		ns("ns1"), ns("kube-system"),
		clusterIPSvc("kube-system", "kube-dns", []string{"10.96.0.53"}, svcPort("dns", corev1.ProtocolUDP, 53)),
		clusterIPSvc("ns1", "web", []string{"10.96.0.10"}, svcPort("http", tcp, 80)),
		headlessSvc("ns1", "hl", svcPort("http", tcp, 80)),
		slice("ns1", "hl-a", "hl", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.1.5"}, hostname: "web-0"}),
		externalSvc("ns1", "ext-in", "web.ns1.svc.example.internal"),
		externalSvc("ns1", "ext-other", "web.ns1.svc.cluster.local"),
	}
	ix, _ := startIndex(t, Config{TTL: 5, Zones: []string{"cluster.local", "Example.Internal."}}, objs...)
	if ix.Zone() != "cluster.local." || !slices.Equal(ix.Zones(), []string{"cluster.local.", "example.internal."}) {
		t.Fatalf("Zone() %q, Zones() %q", ix.Zone(), ix.Zones())
	}
	const (
		web2 = "web.ns1.svc.example.internal."
		hl2  = "hl.ns1.svc.example.internal."
		soa2 = "example.internal. 5 SOA ns.dns.example.internal. hostmaster.example.internal. 1700000000 7200 1800 86400 5"
	)
	runCases(t, ix, []lookupCase{
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		{web2, dns.TypeA, "NOERROR aa\nan " + web2 + " 5 A 10.96.0.10"},
		// SRV targets and glue are in the zone asked, as in CoreDNS.
		{web2, dns.TypeSRV, "NOERROR aa\nan " + web2 + " 5 SRV 0 100 80 " + web2 + "\nex " + web2 + " 5 A 10.96.0.10"},
		{hl2, dns.TypeSRV, "NOERROR aa\nan " + hl2 + " 5 SRV 0 100 80 web-0." + hl2 + "\nex web-0." + hl2 + " 5 A 10.244.1.5"},
		{"web-0." + hl2, dns.TypeA, "NOERROR aa\nan web-0." + hl2 + " 5 A 10.244.1.5"},
		{"_http._tcp." + web2, dns.TypeA, "NOERROR aa\nan _http._tcp." + web2 + " 5 A 10.96.0.10"},
		{"missing.ns1.svc.example.internal.", dns.TypeA, "NXDOMAIN aa\nns " + soa2},
		{"ns1.svc.example.internal.", dns.TypeA, "NOERROR aa\nns " + soa2},
		{"example.internal.", dns.TypeSOA, "NOERROR aa\nan " + soa2},
		{"example.internal.", dns.TypeNS, "NOERROR aa\nan example.internal. 5 NS kube-dns.kube-system.svc.example.internal.\nex kube-dns.kube-system.svc.example.internal. 5 A 10.96.0.53"},
		{"cluster.local.", dns.TypeNS, "NOERROR aa\nan cluster.local. 5 NS kube-dns.kube-system.svc.cluster.local.\nex kube-dns.kube-system.svc.cluster.local. 5 A 10.96.0.53"},
		{"dns-version.example.internal.", dns.TypeTXT, "NOERROR aa\nan dns-version.example.internal. 28800 TXT \"1.1.0\""},
		{"10-1-2-3.ns1.pod.example.internal.", dns.TypeA, "NOERROR aa\nan 10-1-2-3.ns1.pod.example.internal. 5 A 10.1.2.3"},
		// An ExternalName target in the zone asked is resolved here; one
		// in another cluster zone is looked up through the server, as
		// CoreDNS does.
		{"ext-in.ns1.svc.example.internal.", dns.TypeA, "NOERROR aa\nan ext-in.ns1.svc.example.internal. 5 CNAME " + web2 + "\nan " + web2 + " 5 A 10.96.0.10"},
		{"ext-in.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa ext=" + web2 + "\nan ext-in.ns1.svc.cluster.local. 5 CNAME " + web2},
		{"ext-other.ns1.svc.example.internal.", dns.TypeA, "NOERROR aa ext=" + web + "\nan ext-other.ns1.svc.example.internal. 5 CNAME " + web},
		// PTR targets are in the primary zone.
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 10.0.96.10.in-addr.arpa. 5 PTR " + web},
		{"5.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 5.1.244.10.in-addr.arpa. 5 PTR web-0." + hl},
		{"internal.", dns.TypeA, "forward"},
	})

	// Nested zones: the longest wins, as CoreDNS matches zones.
	ix, _ = startIndex(t, Config{TTL: 5, Zones: []string{"local", "cluster.local"}}, objs...)
	runCases(t, ix, []lookupCase{
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		{"web.ns1.svc.local.", dns.TypeA, "NOERROR aa\nan web.ns1.svc.local. 5 A 10.96.0.10"},
		{"missing.ns1.svc.cluster.local.", dns.TypeA, nxdomain},
	})
}

func TestFallthrough(t *testing.T) {
	const (
		inAddrNX = "NXDOMAIN aa\nns in-addr.arpa. 5 SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 1700000000 7200 1800 86400 5"
		ip6NX    = "NXDOMAIN aa\nns ip6.arpa. 5 SOA ns.dns.ip6.arpa. hostmaster.ip6.arpa. 1700000000 7200 1800 86400 5"
	)
	missing := "missing.ns1.svc.cluster.local."
	known := "NOERROR aa\nan 10.0.96.10.in-addr.arpa. 5 PTR " + web
	for _, c := range []struct {
		fall  []string
		cases []lookupCase
	}{
		{nil, []lookupCase{ // the default: the reverse zones
			{missing, dns.TypeA, nxdomain},
			{"10.0.96.10.in-addr.arpa.", dns.TypePTR, known},
			{"1.1.1.1.in-addr.arpa.", dns.TypePTR, "forward"},
			{reverse6("2001:db8::1"), dns.TypePTR, "forward"},
			{"96.10.in-addr.arpa.", dns.TypePTR, "forward"},
			{"in-addr.arpa.", dns.TypePTR, "NOERROR aa\nns in-addr.arpa. 5 SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 1700000000 7200 1800 86400 5"},
		}},
		{[]string{}, []lookupCase{ // none
			{missing, dns.TypeA, nxdomain},
			{"10.0.96.10.in-addr.arpa.", dns.TypePTR, known},
			{"1.1.1.1.in-addr.arpa.", dns.TypePTR, inAddrNX},
			{reverse6("2001:db8::1"), dns.TypePTR, ip6NX},
			{"96.10.in-addr.arpa.", dns.TypePTR, inAddrNX},
			{"x.1.1.1.1.in-addr.arpa.", dns.TypePTR, inAddrNX},
			{"1.1.1.1.in-addr.arpa.", dns.TypeA, "forward"}, // only PTR is answered in the reverse zones
		}},
		{[]string{"cluster.local"}, []lookupCase{
			{missing, dns.TypeA, "forward"},
			{"foo.cluster.local.", dns.TypeTXT, "forward"},
			{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
			{web, dns.TypeTXT, nodata}, // NODATA is not a name error
			{"1.1.1.1.in-addr.arpa.", dns.TypePTR, inAddrNX},
		}},
		{[]string{"svc.cluster.local."}, []lookupCase{
			{missing, dns.TypeA, "forward"},
			{"10-0-0-1.nsx.pod.cluster.local.", dns.TypeA, nxdomain},
		}},
		{[]string{"."}, []lookupCase{
			{missing, dns.TypeA, "forward"},
			{"1.1.1.1.in-addr.arpa.", dns.TypePTR, "forward"},
		}},
		{[]string{"10.0.0.0/8", "ip6.arpa"}, []lookupCase{
			{missing, dns.TypeA, nxdomain},
			{"1.1.1.10.in-addr.arpa.", dns.TypePTR, "forward"},
			{"10.0.96.10.in-addr.arpa.", dns.TypePTR, known},
			{"1.1.1.1.in-addr.arpa.", dns.TypePTR, inAddrNX},
			{reverse6("2001:db8::1"), dns.TypePTR, "forward"},
		}},
	} {
		t.Run(strings.Join(c.fall, ",")+"/", func(t *testing.T) {
			ix, _ := startIndex(t, Config{TTL: 5, Fallthrough: c.fall}, fixture()...)
			runCases(t, ix, c.cases)
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // substring of the error, "" for none
	}{
		{Config{Zones: []string{"cluster.local", "example.internal"}}, ""},
		{Config{Zone: "cluster.local", Zones: []string{"cluster.local", "b.local"}}, ""},
		{Config{Zone: "b.local", Zones: []string{"cluster.local", "b.local"}}, `zone "b.local" is not the first`},
		{Config{Zones: []string{"cluster.local", "Cluster.Local."}}, `"Cluster.Local." given twice`},
		{Config{Zones: []string{"cluster.local", "a..b"}}, `zone "a..b"`},
		{Config{Zones: []string{"10.in-addr.arpa"}}, `"10.in-addr.arpa": a reverse zone`},
		{Config{Namespaces: []string{"ns1", "kube-system"}}, ""},
		{Config{Namespaces: []string{"ns1", "Bad_NS"}}, `"Bad_NS" is not a namespace name`},
		{Config{NamespaceLabels: "env in (a, b),!legacy"}, ""},
		{Config{NamespaceLabels: "env in (a"}, `namespace-labels "env in (a" is not a label selector`},
		{Config{NamespaceLabels: "a=b=c"}, `namespace-labels "a=b=c"`},
		{Config{Namespaces: []string{"ns1"}, NamespaceLabels: "a=b"}, "cannot both be set"},
		{Config{Fallthrough: []string{"in-addr.arpa", "ip6.arpa", "cluster.local", "."}}, ""},
		{Config{Fallthrough: []string{"10.0.0.0/8", "fd00::/8"}}, ""},
		{Config{Fallthrough: []string{"10.0.0.0/33"}}, `fallthrough "10.0.0.0/33"`},
		{Config{Fallthrough: []string{"example.com"}}, `fallthrough "example.com": no name the cluster zone answers`},
		{Config{Fallthrough: []string{"a..b"}}, `fallthrough "a..b" is not a domain name`},
		{Config{Fallthrough: []string{""}}, `fallthrough "" is not a domain name`},
	} {
		err := c.cfg.Validate()
		if _, nerr := New(fakeClient(), c.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("%+v: New says %v, Validate %v", c.cfg, nerr, err)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want it to mention %s", c.cfg, err, c.want)
		}
	}
}

// TestOptionsAllocs: the options keep the hot paths at zero allocations:
// bare names in a second zone, namespace-filtered and ignored names, and
// name errors that fall through or are answered in the reverse zones.
func TestOptionsAllocs(t *testing.T) {
	objs := append(nsFixture(), clusterIPSvc("ns1", "empty", []string{"10.96.0.30"}, svcPort("http", corev1.ProtocolTCP, 80)),
		slice("ns1", "web-x", "web", discoveryv1.AddressTypeIPv4, nil, ep{ips: []string{"10.244.1.1"}}))
	ix, _ := startIndex(t, Config{TTL: 5, Zones: []string{"cluster.local", "example.internal"}, NamespaceLabels: "dns=yes",
		IgnoreEmptyService: true, Fallthrough: []string{"svc.example.internal"}}, objs...)
	for _, q := range []struct {
		name  string
		qtype uint16
		ok    bool
	}{
		{"web.ns1.svc.example.internal.", dns.TypeA, true},
		{"web.ns1.svc.cluster.local.", dns.TypeA, true},
		{"web.ns2.svc.cluster.local.", dns.TypeA, true},            // hidden namespace
		{"empty.ns1.svc.cluster.local.", dns.TypeA, true},          // ignored empty service
		{"missing.ns1.svc.example.internal.", dns.TypeA, false},    // falls through
		{"9.9.9.9.in-addr.arpa.", dns.TypePTR, true},               // NXDOMAIN in the reverse zone
		{"example.com.ns1.svc.cluster.local.", dns.TypeAAAA, true}, // a search-path expansion
	} {
		if _, ok := ix.Lookup(q.name, q.qtype); ok != q.ok {
			t.Fatalf("%s: ok=%v", q.name, ok)
		}
		if n := testing.AllocsPerRun(100, func() { ix.Lookup(q.name, q.qtype) }); n != 0 {
			t.Errorf("%s %s: %v allocs per lookup", q.name, dns.TypeToString[q.qtype], n)
		}
	}
}
