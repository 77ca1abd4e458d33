package k8s

import (
	"context"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The multicluster zone's semantics, as CoreDNS 1.15's `multicluster`
// answers them; the differential test against CoreDNS itself is in
// integration/multicluster_test.go.

const (
	mcSOA    = "clusterset.local. 5 SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1700000000 7200 1800 86400 5"
	mcNX     = "NXDOMAIN aa\nns " + mcSOA
	mcNoData = "NOERROR aa\nns " + mcSOA
	mcWeb    = "web.ns1.svc.clusterset.local."
	mcHL     = "hl.ns1.svc.clusterset.local."
)

// serviceImport is a ServiceImport as the dynamic client returns it.
func serviceImport(ns, name, typ string, ips []string, ports ...map[string]any) *unstructured.Unstructured {
	spec := map[string]any{"type": typ}
	if ips != nil {
		l := make([]any, len(ips))
		for i, ip := range ips {
			l[i] = ip
		}
		spec["ips"] = l
	}
	pl := make([]any, len(ports))
	for i, p := range ports {
		pl[i] = p
	}
	spec["ports"] = pl
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
	u.SetKind("ServiceImport")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func importPort(name, proto string, p int64) map[string]any {
	return map[string]any{"name": name, "protocol": proto, "port": p}
}

// mcSlice is an imported EndpointSlice of service from cluster.
func mcSlice(namespace, name, service, cluster string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := slice(namespace, name, service, family, ports, eps...)
	s.Labels = map[string]string{mcsLabelServiceName: service}
	if cluster != "" {
		s.Labels[mcsLabelSourceCluster] = cluster
	}
	return s
}

func newDynamic(objs ...runtime.Object) *dynfake.FakeDynamicClient {
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{ServiceImportResource: "ServiceImportList"}, objs...)
}

// startMCIndex is startIndex with the multicluster zone and imports.
func startMCIndex(t *testing.T, cfg Config, dyn *dynfake.FakeDynamicClient, objs ...runtime.Object) (*Index, *fake.Clientset) {
	t.Helper()
	cfg.MulticlusterZones = []string{"ClusterSet.Local"}
	cfg.Imports = dyn
	return startIndex(t, cfg, objs...)
}

func mcFixture() ([]runtime.Object, []runtime.Object) {
	tcp := corev1.ProtocolTCP
	http := []discoveryv1.EndpointPort{slicePort("http", tcp, 80)}
	kube := []runtime.Object{
		ns("ns1"), ns("kube-system"),
		// A Service of the same name: not visible in clusterset.local.
		clusterIPSvc("ns1", "web", []string{"10.96.0.10"}, svcPort("http", tcp, 80)),
		clusterIPSvc("ns1", "local-only", []string{"10.96.0.20"}, svcPort("http", tcp, 80)),
		mcSlice("ns1", "web-c1", "web", "c1", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.250.1.1"}, hostname: "w0"}),
		mcSlice("ns1", "hl-c1", "hl", "C1", discoveryv1.AddressTypeIPv4, http,
			ep{ips: []string{"10.250.2.1"}, hostname: "h0"},
			ep{ips: []string{"10.250.2.2"}, ready: no}),
		mcSlice("ns1", "hl-c2", "hl", "c2", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.250.3.1"}}),
		mcSlice("ns1", "hl-c2-v6", "hl", "c2", discoveryv1.AddressTypeIPv6, http, ep{ips: []string{"fd00:250::31"}}),
		mcSlice("ns1", "hl-none", "hl", "", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.250.4.1"}, hostname: "h9"}),
		mcSlice("ns1", "noports-c1", "noports", "c1", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.250.5.1"}, hostname: "n0"}),
		// An ordinary slice of an ordinary Service: not imported.
		slice("ns1", "local-only-1", "local-only", discoveryv1.AddressTypeIPv4, http, ep{ips: []string{"10.244.7.1"}}),
	}
	imports := []runtime.Object{
		serviceImport("ns1", "web", "ClusterSetIP", []string{"10.200.0.1", "fd00:200::1"},
			importPort("http", "TCP", 80), importPort("https", "TCP", 443)),
		serviceImport("ns1", "noports", "ClusterSetIP", []string{"10.200.0.2"}),
		serviceImport("ns1", "empty", "ClusterSetIP", []string{"10.200.0.3"}, importPort("http", "TCP", 80)),
		serviceImport("ns1", "hl", "Headless", nil, importPort("http", "TCP", 80)),
		serviceImport("elsewhere", "web", "ClusterSetIP", []string{"10.200.0.9"}, importPort("http", "TCP", 80)),
	}
	return kube, imports
}

func TestMulticluster(t *testing.T) {
	kube, imports := mcFixture()
	ix, _ := startMCIndex(t, Config{TTL: 5}, newDynamic(imports...), kube...)
	runCases(t, ix, []lookupCase{
		{"clusterset.local.", dns.TypeSOA, "NOERROR aa\nan " + mcSOA},
		{"ns1.svc.clusterset.local.", dns.TypeA, mcNoData},
		{"elsewhere.svc.clusterset.local.", dns.TypeA, mcNX},
		// ClusterSetIP: the import's IPs of the family asked.
		{mcWeb, dns.TypeA, "NOERROR aa\nan " + mcWeb + " 5 A 10.200.0.1"},
		{mcWeb, dns.TypeAAAA, "NOERROR aa\nan " + mcWeb + " 5 AAAA fd00:200::1"},
		{mcWeb, dns.TypeTXT, mcNoData},
		{mcWeb, dns.TypeSRV, `NOERROR aa
an ` + mcWeb + ` 5 SRV 0 25 80 ` + mcWeb + `
an ` + mcWeb + ` 5 SRV 0 25 443 ` + mcWeb + `
ex ` + mcWeb + ` 5 A 10.200.0.1
ex ` + mcWeb + ` 5 AAAA fd00:200::1`},
		{"_https._tcp." + mcWeb, dns.TypeSRV, `NOERROR aa
an _https._tcp.` + mcWeb + ` 5 SRV 0 50 443 ` + mcWeb + `
ex ` + mcWeb + ` 5 A 10.200.0.1
ex ` + mcWeb + ` 5 AAAA fd00:200::1`},
		{"_http._udp." + mcWeb, dns.TypeSRV, mcNX},
		// Endpoint names carry the cluster.
		{"w0.c1." + mcWeb, dns.TypeA, "NOERROR aa\nan w0.c1." + mcWeb + " 5 A 10.250.1.1"},
		{"w0.c2." + mcWeb, dns.TypeA, mcNX},
		{"w0." + mcWeb, dns.TypeA, mcNX},
		{"x.y.w0.c1." + mcWeb, dns.TypeA, mcNX},
		// The Service's own names are not here, nor Services without
		// an import.
		{"local-only.ns1.svc.clusterset.local.", dns.TypeA, mcNX},
		// An import without ports has no records; its endpoints do.
		{"noports.ns1.svc.clusterset.local.", dns.TypeA, mcNX},
		{"noports.ns1.svc.clusterset.local.", dns.TypeSRV, mcNX},
		{"n0.c1.noports.ns1.svc.clusterset.local.", dns.TypeA, "NOERROR aa\nan n0.c1.noports.ns1.svc.clusterset.local. 5 A 10.250.5.1"},
		{"empty.ns1.svc.clusterset.local.", dns.TypeA, "NOERROR aa\nan empty.ns1.svc.clusterset.local. 5 A 10.200.0.3"},
		// Headless: every ready endpoint of every cluster.
		{mcHL, dns.TypeA, "NOERROR aa\nan " + mcHL + " 5 A 10.250.2.1\nan " + mcHL + " 5 A 10.250.3.1\nan " + mcHL + " 5 A 10.250.4.1"},
		{mcHL, dns.TypeAAAA, "NOERROR aa\nan " + mcHL + " 5 AAAA fd00:250::31"},
		{mcHL, dns.TypeSRV, `NOERROR aa
an ` + mcHL + ` 5 SRV 0 25 80 h0.c1.` + mcHL + `
an ` + mcHL + ` 5 SRV 0 25 80 10-250-3-1.c2.` + mcHL + `
an ` + mcHL + ` 5 SRV 0 25 80 fd00-250--31.c2.` + mcHL + `
an ` + mcHL + ` 5 SRV 0 25 80 h9.` + mcHL + `
ex h0.c1.` + mcHL + ` 5 A 10.250.2.1
ex 10-250-3-1.c2.` + mcHL + ` 5 A 10.250.3.1
ex fd00-250--31.c2.` + mcHL + ` 5 AAAA fd00:250::31
ex h9.` + mcHL + ` 5 A 10.250.4.1`},
		{"h0.c1." + mcHL, dns.TypeA, "NOERROR aa\nan h0.c1." + mcHL + " 5 A 10.250.2.1"},
		{"h0.c1." + mcHL, dns.TypeSRV, "NOERROR aa\nan h0.c1." + mcHL + " 5 SRV 0 100 80 h0.c1." + mcHL + "\nex h0.c1." + mcHL + " 5 A 10.250.2.1"},
		{"h0.c2." + mcHL, dns.TypeA, mcNX},
		{"h0." + mcHL, dns.TypeA, mcNX},
		{"h9." + mcHL, dns.TypeA, "NOERROR aa\nan h9." + mcHL + " 5 A 10.250.4.1"},
		{"10-250-3-1.c2." + mcHL, dns.TypeA, "NOERROR aa\nan 10-250-3-1.c2." + mcHL + " 5 A 10.250.3.1"},
		{"10-250-2-2.c1." + mcHL, dns.TypeA, mcNX}, // not ready
		{"_http._tcp." + mcHL, dns.TypeA, "NOERROR aa\nan _http._tcp." + mcHL + " 5 A 10.250.2.1\nan _http._tcp." + mcHL + " 5 A 10.250.3.1\nan _http._tcp." + mcHL + " 5 A 10.250.4.1"},
		// No PTR for imported addresses; the cluster zone unchanged.
		{"1.0.200.10.in-addr.arpa.", dns.TypePTR, "forward"},
		{"1.1.250.10.in-addr.arpa.", dns.TypePTR, "forward"},
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		{"web.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
	})
}

func TestMulticlusterIgnoreEmptyAndEvents(t *testing.T) {
	kube, imports := mcFixture()
	dyn := newDynamic(imports...)
	ix, client := startMCIndex(t, Config{TTL: 5, IgnoreEmptyService: true}, dyn, kube...)
	runCases(t, ix, []lookupCase{
		{"empty.ns1.svc.clusterset.local.", dns.TypeA, mcNX},
		{mcWeb, dns.TypeA, "NOERROR aa\nan " + mcWeb + " 5 A 10.200.0.1"},
	})
	// An import and its endpoints come and go with their events.
	ctx := context.Background()
	if _, err := client.DiscoveryV1().EndpointSlices("ns1").Create(ctx, mcSlice("ns1", "empty-c3", "empty", "c3",
		discoveryv1.AddressTypeIPv4, nil, ep{ips: []string{"10.250.6.1"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, "empty.ns1.svc.clusterset.local.", dns.TypeA, "NOERROR aa\nan empty.ns1.svc.clusterset.local. 5 A 10.200.0.3")
	waitAnswer(t, ix, "10-250-6-1.c3.empty.ns1.svc.clusterset.local.", dns.TypeA, "NOERROR aa\nan 10-250-6-1.c3.empty.ns1.svc.clusterset.local. 5 A 10.250.6.1")
	if err := dyn.Resource(ServiceImportResource).Namespace("ns1").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, ix, mcWeb, dns.TypeA, mcNX)
	if _, err := dyn.Resource(ServiceImportResource).Namespace("ns1").Create(ctx,
		serviceImport("ns1", "new", "Headless", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("ns1").Create(ctx, mcSlice("ns1", "new-c1", "new", "c1",
		discoveryv1.AddressTypeIPv4, nil, ep{ips: []string{"10.250.7.1"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A slice without ports: its endpoints still answer (CoreDNS's
	// sentinel port), with no SRV record.
	waitAnswer(t, ix, "new.ns1.svc.clusterset.local.", dns.TypeA, "NOERROR aa\nan new.ns1.svc.clusterset.local. 5 A 10.250.7.1")
	waitAnswer(t, ix, "new.ns1.svc.clusterset.local.", dns.TypeSRV, mcNoData)
}

// A ServiceImport CRD that is not installed: the multicluster zone has no
// services, and the index syncs anyway.
func TestMulticlusterNoCRD(t *testing.T) {
	kube, _ := mcFixture()
	dyn := newDynamic()
	dyn.PrependReactor("list", "serviceimports", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(ServiceImportResource.GroupResource(), "")
	})
	ix, _ := startMCIndex(t, Config{TTL: 5}, dyn, kube...)
	runCases(t, ix, []lookupCase{
		{mcWeb, dns.TypeA, mcNX},
		{"ns1.svc.clusterset.local.", dns.TypeA, mcNoData},
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
	})
}

func TestMulticlusterConfig(t *testing.T) {
	for _, c := range []Config{
		{Zones: []string{"cluster.local"}, MulticlusterZones: []string{"cluster.local."}},
		{MulticlusterZones: []string{"clusterset.local", "ClusterSet.Local."}},
		{MulticlusterZones: []string{"10.in-addr.arpa"}},
		{MulticlusterZones: []string{"."}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%v: valid", c.MulticlusterZones)
		}
	}
	good := Config{MulticlusterZones: []string{"clusterset.local"}, Fallthrough: []string{"clusterset.local"}}
	if err := good.Validate(); err != nil {
		t.Errorf("fallthrough in the multicluster zone: %v", err)
	}
	if _, err := New(fakeClient(), Config{MulticlusterZones: []string{"clusterset.local"}}); err == nil {
		t.Error("New without Imports: no error")
	}
}
