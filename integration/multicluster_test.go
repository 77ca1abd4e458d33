//go:build integration

package integration

// Differential test of Multi-Cluster Services (CoreDNS's `multicluster`,
// nodedns's --multicluster-domain) against CoreDNS 1.15: the
// ServiceImport CRD of sigs.k8s.io/mcs-api installed in the test API
// server, ServiceImports and imported EndpointSlices created beside the
// zone-options fixture, both servers asked the same names of cluster.local
// and clusterset.local, the zero-difference rule of zoneoptions_test.go
// (same normalisation, same allow-list).

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/nodedns/nodedns/pkg/k8s"
)

// The mcs-api labels of an imported EndpointSlice.
const (
	mcsServiceName   = "multicluster.kubernetes.io/service-name"
	mcsSourceCluster = "multicluster.kubernetes.io/source-cluster"
)

var mcsCRDsOnce sync.Once

// installMCSCRDs installs the Multi-Cluster Services CRDs from
// $NODEDNS_MCS_CRDS (scripts/mcs-crds.sh) once per run: they are
// cluster-scoped and no other test looks at them, so they are never
// removed.
func installMCSCRDs(t *testing.T, cp *ControlPlane) {
	t.Helper()
	dir := os.Getenv("NODEDNS_MCS_CRDS")
	need(t, dir != "", "$NODEDNS_MCS_CRDS (scripts/mcs-crds.sh)")
	mcsCRDsOnce.Do(func() {
		installCRDFiles(t, newSSA(t, ctxBG, cp), []string{
			filepath.Join(dir, "multicluster.x-k8s.io_serviceimports.yaml"),
			filepath.Join(dir, "multicluster.x-k8s.io_serviceexports.yaml"),
		})
	})
}

// mcFixture is what the multicluster objects came out as.
type mcFixture struct {
	zoFixture
	// ips of the imports: web (v4, v6), noports, empty, web in b,
	// labelled.
	webIP, webIP6, noportsIP, emptyIP, webBIP, labelledIP string
}

// mcCreate adds ServiceImports and imported EndpointSlices to the
// zone-options fixture f, and deletes the imports at test end (the
// namespaces' other contents go with zoCreate's cleanup). Imported
// addresses are in 10.252/16 and fd00:252::/64, used by no other test.
func mcCreate(t *testing.T, cp *ControlPlane, f zoFixture) mcFixture {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := k8s.ServiceImportResource
	mf := mcFixture{zoFixture: f, webIP: "10.252.0.1", webIP6: "fd00:252::1", noportsIP: "10.252.0.2",
		emptyIP: "10.252.0.3", webBIP: "10.252.0.9", labelledIP: "10.252.0.4"}
	type port struct {
		name, proto string
		port        int64
	}
	imp := func(ns, name, typ string, labels map[string]string, ips []string, ports ...port) {
		spec := map[string]any{"type": typ}
		if len(ips) > 0 {
			l := make([]any, len(ips))
			for i, ip := range ips {
				l[i] = ip
			}
			spec["ips"] = l
		}
		pl := []any{}
		for _, p := range ports {
			pl = append(pl, map[string]any{"name": p.name, "protocol": p.proto, "port": p.port})
		}
		spec["ports"] = pl
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport", "spec": spec}}
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(labels)
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctxBG, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ServiceImport %s/%s: %v", ns, name, err)
		}
		t.Cleanup(func() {
			if err := dyn.Resource(gvr).Namespace(ns).Delete(ctxBG, name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting ServiceImport %s/%s: %v", ns, name, err)
			}
		})
	}
	// ep is an imported endpoint: address, hostname, targetRef pod, ready.
	type ep struct {
		ip, host, pod string
		ready         *bool
	}
	slice := func(ns, name, svc, cluster string, family discoveryv1.AddressType, ports bool, eps ...ep) {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{mcsServiceName: svc}},
			AddressType: family,
		}
		if cluster != "" {
			s.Labels[mcsSourceCluster] = cluster
		}
		if ports {
			name, proto, p := "http", corev1.ProtocolTCP, int32(80)
			s.Ports = []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &p}}
		}
		for _, e := range eps {
			x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
			if e.host != "" {
				x.Hostname = &e.host
			}
			if e.pod != "" {
				x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
			}
			s.Endpoints = append(s.Endpoints, x)
		}
		createSlice(t, cp.Client, s)
	}
	http, https := port{"http", "TCP", 80}, port{"https", "TCP", 443}
	a, b := f.a, f.b
	imp(a, "web", "ClusterSetIP", nil, []string{mf.webIP, mf.webIP6}, http, https)
	slice(a, "mc-web-c1", "web", "c1", discoveryv1.AddressTypeIPv4, true,
		ep{ip: "10.252.1.1", host: "w0"}, ep{ip: "10.252.1.2", pod: "web-pod-c1"})
	imp(a, "noports", "ClusterSetIP", nil, []string{mf.noportsIP})
	slice(a, "mc-noports-c1", "noports", "c1", discoveryv1.AddressTypeIPv4, true, ep{ip: "10.252.2.1", host: "n0"})
	imp(a, "empty", "ClusterSetIP", nil, []string{mf.emptyIP}, http)
	imp(a, "hl", "Headless", nil, nil, http)
	slice(a, "mc-hl-c1", "hl", "c1", discoveryv1.AddressTypeIPv4, true,
		ep{ip: "10.252.30.1", host: "h0"}, ep{ip: "10.252.30.2", ready: &boolFalse})
	slice(a, "mc-hl-c2", "hl", "c2", discoveryv1.AddressTypeIPv4, true, ep{ip: "10.252.31.1"})
	slice(a, "mc-hl-c2-v6", "hl", "c2", discoveryv1.AddressTypeIPv6, true, ep{ip: "fd00:252::31"})
	slice(a, "mc-hl-east", "hl", "East-1", discoveryv1.AddressTypeIPv4, false, ep{ip: "10.252.32.1", host: "e0"})
	imp(a, "labelled", "ClusterSetIP", map[string]string{"dns": "yes"}, []string{mf.labelledIP}, http)
	imp(b, "web", "ClusterSetIP", nil, []string{mf.webBIP}, http)
	return mf
}

// mcQuestions are the questions about the imports in clusterset.local.
func mcQuestions(f mcFixture) []zoQuestion {
	var qs []zoQuestion
	add := func(name string, types ...uint16) {
		for _, t := range types {
			qs = append(qs, zoQuestion{name, t})
		}
	}
	A, AAAA, SRV, TXT := dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT
	svc := "." + f.a + ".svc.clusterset.local."
	add("web"+svc, A, AAAA, SRV, TXT, dns.TypeMX)
	add("_http._tcp.web"+svc, SRV, A, AAAA)
	add("_https._tcp.web"+svc, SRV)
	add("_http._udp.web"+svc, SRV)
	add("w0.c1.web"+svc, A, AAAA, SRV)
	add("w0.c2.web"+svc, A)
	add("w0.web"+svc, A)
	add("10-252-1-2.c1.web"+svc, A)
	add("web-pod-c1.c1.web"+svc, A)
	add("x.y.w0.c1.web"+svc, A)
	add("_http.c1.web"+svc, A)
	add("w0._tcp.web"+svc, A)
	add("noports"+svc, A, SRV, TXT)
	add("_http._tcp.noports"+svc, SRV)
	add("n0.c1.noports"+svc, A, SRV)
	add("empty"+svc, A, SRV)
	add("_http._tcp.empty"+svc, SRV)
	add("hl"+svc, A, AAAA, SRV, TXT)
	add("_http._tcp.hl"+svc, SRV, A)
	add("h0.c1.hl"+svc, A, AAAA, SRV)
	add("h0.c2.hl"+svc, A)
	add("h0.hl"+svc, A)
	add("10-252-31-1.c2.hl"+svc, A, SRV)
	add("10-252-30-2.c1.hl"+svc, A)
	add("fd00-252--31.c2.hl"+svc, AAAA)
	add("e0.east-1.hl"+svc, A, SRV)
	add("labelled"+svc, A)
	add("web."+f.b+".svc.clusterset.local.", A)
	// The imports' and imported endpoints' addresses get no PTR (the
	// upstream answers; for an imported endpoint's, CoreDNS none: see
	// zoAllowed).
	for _, ip := range []string{f.webIP, f.webIP6, "10.252.30.1"} {
		r, err := dns.ReverseAddr(ip)
		if err != nil {
			panic(err)
		}
		add(r, dns.TypePTR)
	}
	return qs
}

// TestMulticlusterDifferential: the multicluster zone against CoreDNS
// 1.15's `multicluster`, with its options; and a companion configuration
// in which clusterset.local is an ordinary cluster zone (what `nodedns
// migrate` used to make of it), which must answer otherwise.
func TestMulticlusterDifferential(t *testing.T) {
	cp := controlPlane(t)
	coredns := coreDNSBin(t)
	ensureKubeDNS(t, cp.Client)
	installMCSCRDs(t, cp)
	f := mcCreate(t, cp, zoCreate(t, cp.Client))
	up := zoUpstream(t, f.zoFixture)

	A, SRV := dns.TypeA, dns.TypeSRV
	svcA := "." + f.a + ".svc.clusterset.local."
	zones := []string{"cluster.local", "clusterset.local"}
	mc := []string{"--multicluster-domain", "clusterset.local"}
	configs := []struct {
		zoConfig
		base string // the configuration whose answers the effects are against
	}{
		{zoConfig: zoConfig{name: "clusterset_as_cluster_zone", zones: zones, flags: []string{"--cluster-domain", "clusterset.local"}}},
		{zoConfig: zoConfig{name: "multicluster", zones: zones, flags: mc, corefile: []string{"multicluster clusterset.local"},
			effects: []zoQuestion{{"web" + svcA, A}, {"hl" + svcA, A}, {"hl" + svcA, SRV}, {"notready" + svcA, A},
				{"w0.c1.web" + svcA, A}, {"web." + f.b + ".svc.clusterset.local.", A}}},
			base: "clusterset_as_cluster_zone"},
		{zoConfig: zoConfig{name: "multicluster_options", zones: zones,
			flags:    append(slices.Clone(mc), "--endpoint-pod-names", "--ignore-empty-service", "--namespaces", f.a),
			corefile: []string{"multicluster clusterset.local", "endpoint_pod_names", "ignore empty_service", "namespaces " + f.a},
			effects: []zoQuestion{{"web-pod-c1.c1.web" + svcA, A}, {"10-252-1-2.c1.web" + svcA, A}, {"empty" + svcA, A},
				{"web." + f.b + ".svc.clusterset.local.", A}}},
			base: "multicluster"},
		// CoreDNS lists ServiceImports with the namespace_labels
		// selector: only imports labelled like their namespace exist.
		{zoConfig: zoConfig{name: "multicluster_namespace_labels", zones: zones,
			flags:    append(slices.Clone(mc), "--namespace-labels", "dns=yes"),
			corefile: []string{"multicluster clusterset.local", "namespace_labels dns=yes"},
			effects:  []zoQuestion{{"web" + svcA, A}, {"hl" + svcA, A}}},
			base: "multicluster"},
	}
	allowedSeen := map[int]bool{}
	answers := map[string]map[zoQuestion]string{}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			var qs []zoQuestion
			for _, z := range zones {
				qs = append(qs, zoQuestions(f.zoFixture, z+".")...)
			}
			qs = append(append(qs, mcQuestions(f)...), zoReverse(f.zoFixture)...)
			answers[cfg.name] = zoDiff(t, cp, coredns, up.Addr, f.zoFixture, cfg.zoConfig, qs, answers[cfg.base], allowedSeen)
		})
	}
	var ran []string
	for _, cfg := range configs {
		ran = append(ran, cfg.name)
	}
	if !slices.Equal(ran, mcConfigNames) {
		t.Errorf("configurations %v, mcConfigNames %v", ran, mcConfigNames)
	}
	zoCheckAllowUsed(t, allowedSeen, ran)
}

// mcConfigNames are the configurations of TestMulticlusterDifferential,
// for the allow-list.
var mcConfigNames = []string{"clusterset_as_cluster_zone", "multicluster", "multicluster_options", "multicluster_namespace_labels"}
