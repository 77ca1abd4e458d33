//go:build integration

package integration

// Differential test of the cluster zone options against CoreDNS 1.15: one
// fixture of Namespaces, Services, EndpointSlices and Pods on the real API
// server; for each option, nodedns (with the flag) and CoreDNS (with the
// Corefile option) on loopback ports, both forwarding to the same scripted
// upstream, are asked the same questions, and their replies must agree in
// rcode, AA and every section as sets of records (TTLs and SOA serials
// normalised, order ignored). Where nodedns differs on purpose the
// difference is listed in zoAllowed with the reason (and in docs/cluster-zone.md).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// coreDNSBin returns the CoreDNS binary: NODEDNS_COREDNS when
// scripts/test.sh has set it, else what scripts/coredns.sh prints (a
// cached build, or one of several minutes the first time).
func coreDNSBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NODEDNS_COREDNS"); p != "" {
		_, err := os.Stat(p)
		need(t, err == nil, "NODEDNS_COREDNS="+p)
		return p
	}
	ctx, cancel := context.WithTimeout(ctxBG, 30*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "../scripts/coredns.sh")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		need(t, false, fmt.Sprintf("CoreDNS from scripts/coredns.sh: %v\n%s", err, tailLines(stderr.String(), 20)))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// zoFixture is what the fixture's names and addresses came out as.
type zoFixture struct {
	a, b           string // namespaces: a is labelled dns=yes, b env=dev
	webA, webA6    string // ClusterIPs of web.a
	emptyA, webB   string
	longPod        string // a targetRef name of 64 bytes
	upstreamMissed string // an in-zone name only the upstream knows
	// ctxKubeconfig is a kubeconfig whose current context points at a
	// closed port and whose context zoContext is the test API server's
	// (contextKubeconfig).
	ctxKubeconfig string
}

// zoContext is the named context of zoFixture.ctxKubeconfig.
const zoContext = "nodedns-test"

// contextKubeconfig writes a copy of cp's kubeconfig whose current
// context names a server on a closed port, and whose context zoContext
// names cp: a server that ignores the context asked for never syncs.
func contextKubeconfig(t *testing.T, cp *ControlPlane) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := kc.Contexts[kc.CurrentContext]
	if cur == nil {
		t.Fatalf("%s: no current context", cp.Kubeconfig)
	}
	good := *cur
	kc.Contexts[zoContext] = &good
	stale := *kc.Clusters[cur.Cluster]
	stale.Server = "https://127.0.0.1:1"
	kc.Clusters["stale"] = &stale
	bad := *cur
	bad.Cluster = "stale"
	kc.Contexts["stale"] = &bad
	kc.CurrentContext = "stale"
	path := filepath.Join(t.TempDir(), "contexts.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// zoCreate creates the fixture and removes all of it at test end
// (no controller runs, so the namespace's contents are deleted by hand
// before the namespace, and nothing is left to answer other tests' PTR
// queries).
func zoCreate(t *testing.T, c kubernetes.Interface) zoFixture {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	sfx := hex.EncodeToString(b)
	f := zoFixture{a: "zo-a-" + sfx, b: "zo-b-" + sfx, longPod: strings.Repeat("p", 64)}
	f.upstreamMissed = "missing." + f.a + ".svc.cluster.local."
	for ns, lbl := range map[string]map[string]string{f.a: {"dns": "yes", "env": "prod"}, f.b: {"env": "dev"}} {
		if _, err := c.CoreV1().Namespaces().Create(ctxBG, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: lbl}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
		t.Cleanup(func() { zoDeleteAll(t, c, ns) })
	}
	dual := corev1.IPFamilyPolicyRequireDualStack
	single := corev1.IPFamilyPolicySingleStack
	v4 := []corev1.IPFamily{corev1.IPv4Protocol}
	port := func(name string, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p}
	}
	clusterIP := func(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
		return createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{IPFamilyPolicy: &single, IPFamilies: v4, Ports: ports}})
	}
	headless := func(ns, name string) {
		createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{port("http", 80)}}})
	}
	external := func(ns, name, target string) {
		createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target}})
	}
	// ep is an endpoint: address, hostname, targetRef pod, ready.
	type ep struct {
		ip, host, pod string
		ready         *bool
	}
	slice := func(ns, name, svc string, family discoveryv1.AddressType, eps ...ep) {
		s := endpointSlice(ns, name, svc, family, 80)
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
		createSlice(t, c, s)
	}
	pod := func(ns, name, ip string) {
		p, err := c.CoreV1().Pods(ns).Create(ctxBG, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{NodeName: "zo-node", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:0"}}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s/%s: %v", ns, name, err)
		}
		p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctxBG, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod %s/%s status: %v", ns, name, err)
		}
	}

	// Namespace a: every kind of Service. Endpoint addresses are in
	// 10.251/16, used by no other test.
	web := createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.a, Name: "web"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &dual, Ports: []corev1.ServicePort{port("http", 80), port("https", 443)}}})
	f.webA, f.webA6 = web.Spec.ClusterIPs[0], web.Spec.ClusterIPs[1]
	slice(f.a, "web-1", "web", discoveryv1.AddressTypeIPv4, ep{ip: "10.251.2.9", pod: "web-pod-1"})
	f.emptyA = clusterIP(f.a, "empty", port("http", 80)).Spec.ClusterIP
	clusterIP(f.a, "notready", port("http", 80))
	slice(f.a, "notready-1", "notready", discoveryv1.AddressTypeIPv4, ep{ip: "10.251.3.1", pod: "notready-pod", ready: &boolFalse})
	clusterIP(f.a, "nop", corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8080})
	slice(f.a, "nop-1", "nop", discoveryv1.AddressTypeIPv4, ep{ip: "10.251.4.1"})
	headless(f.a, "hl")
	slice(f.a, "hl-a", "hl", discoveryv1.AddressTypeIPv4,
		ep{ip: "10.251.1.5", host: "web-0", pod: "hl-pod-0"},
		ep{ip: "10.251.1.6", pod: "hl-6d9f-abcde", ready: &boolTrue},
		ep{ip: "10.251.1.7", pod: f.longPod},
		ep{ip: "10.251.1.8", pod: "dotted.pod-1"},
		ep{ip: "10.251.1.9"},
		ep{ip: "10.251.1.10", pod: "hl-notready", ready: &boolFalse})
	slice(f.a, "hl-b", "hl", discoveryv1.AddressTypeIPv6, ep{ip: "fd00:251::5", pod: "hl-v6-pod"})
	headless(f.a, "hl-empty")
	slice(f.a, "hl-empty-1", "hl-empty", discoveryv1.AddressTypeIPv4, ep{ip: "10.251.5.1", ready: &boolFalse})
	external(f.a, "ext", "example.com")
	external(f.a, "ext-in", "web."+f.a+".svc.cluster.local")
	external(f.a, "ext-empty", "empty."+f.a+".svc.cluster.local")
	external(f.a, "ext-b", "web."+f.b+".svc.cluster.local")
	pod(f.a, "web-pod-1", "10.251.2.9")
	pod(f.a, "hl-6d9f-abcde", "10.251.1.6")

	// Namespace b: what a namespace filter hides.
	f.webB = clusterIP(f.b, "web", port("http", 80)).Spec.ClusterIP
	slice(f.b, "web-1", "web", discoveryv1.AddressTypeIPv4, ep{ip: "10.251.20.1", pod: "web-b-pod"})
	headless(f.b, "hl")
	slice(f.b, "hl-1", "hl", discoveryv1.AddressTypeIPv4, ep{ip: "10.251.21.5", host: "h"})
	pod(f.b, "web-b-pod", "10.251.20.1")
	return f
}

// zoDeleteAll deletes the namespace's Pods, EndpointSlices and Services,
// then the namespace.
func zoDeleteAll(t *testing.T, c kubernetes.Interface, ns string) {
	zero := int64(0)
	if pods, err := c.CoreV1().Pods(ns).List(ctxBG, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			if err := c.CoreV1().Pods(ns).Delete(ctxBG, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting pod %s/%s: %v", ns, p.Name, err)
			}
		}
	}
	if err := c.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctxBG, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("deleting the endpointslices of %s: %v", ns, err)
	}
	if svcs, err := c.CoreV1().Services(ns).List(ctxBG, metav1.ListOptions{}); err == nil {
		for _, s := range svcs.Items {
			if err := c.CoreV1().Services(ns).Delete(ctxBG, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting service %s/%s: %v", ns, s.Name, err)
			}
		}
	}
	deleteNS(t, c, ns)
}

// zoQuestion is one question asked of both servers.
type zoQuestion struct {
	name  string
	qtype uint16
}

func (q zoQuestion) String() string { return q.name + " " + dns.TypeToString[q.qtype] }

// zoQuestions are the questions about f in zone z (a cluster zone).
func zoQuestions(f zoFixture, z string) []zoQuestion {
	var qs []zoQuestion
	add := func(name string, types ...uint16) {
		for _, t := range types {
			qs = append(qs, zoQuestion{name, t})
		}
	}
	A, AAAA, SRV, TXT, CNAME, MX, PTR := dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeCNAME, dns.TypeMX, dns.TypePTR
	add(z, dns.TypeSOA, dns.TypeNS, A, TXT)
	add("dns-version."+z, TXT, A)
	add("ns.dns."+z, A, AAAA)
	add("svc."+z, A)
	add("pod."+z, A)
	add("foo."+z, A)
	add("nope.svc."+z, A)
	for _, ns := range []string{f.a, f.b} {
		svc := "." + ns + ".svc." + z
		add(ns+".svc."+z, A, TXT)
		add(ns+".pod."+z, A)
		add("10-251-2-9."+ns+".pod."+z, A, AAAA)
		add("web"+svc, A, AAAA, SRV, TXT, CNAME, MX, PTR, dns.TypeSOA)
		add("_http._tcp.web"+svc, SRV, A, AAAA)
		add("_https._tcp.web"+svc, SRV)
		add("_http._udp.web"+svc, SRV)
		add("_._tcp.web"+svc, SRV)
		add("10-251-2-9.web"+svc, A, SRV)
		add("10-251-20-1.web"+svc, A)
		add("web-pod-1.web"+svc, A, SRV)
		add("web-b-pod.web"+svc, A)
		add("missing"+svc, A, TXT)
		add("x.y.z.web"+svc, A)
		add("hl"+svc, A, AAAA, SRV, TXT)
		add("_http._tcp.hl"+svc, SRV, A)
		add("h.hl"+svc, A)
	}
	svc := "." + f.a + ".svc." + z
	add("empty"+svc, A, AAAA, SRV, TXT)
	add("_http._tcp.empty"+svc, SRV, A)
	add("notready"+svc, A, SRV)
	add("10-251-3-1.notready"+svc, A)
	add("notready-pod.notready"+svc, A)
	add("nop"+svc, A, SRV)
	add("_._tcp.nop"+svc, SRV)
	add("10-251-4-1.nop"+svc, A)
	add("web-0.hl"+svc, A, AAAA, SRV)
	add("hl-pod-0.hl"+svc, A)
	add("hl-6d9f-abcde.hl"+svc, A, SRV)
	add("10-251-1-5.hl"+svc, A)
	add("10-251-1-6.hl"+svc, A)
	add("10-251-1-7.hl"+svc, A)
	add("10-251-1-8.hl"+svc, A)
	add("dotted.pod-1.hl"+svc, A)
	add("10-251-1-9.hl"+svc, A)
	add("10-251-1-10.hl"+svc, A)
	add("hl-notready.hl"+svc, A)
	add("fd00-251--5.hl"+svc, AAAA)
	add("hl-v6-pod.hl"+svc, AAAA, SRV)
	add("hl-empty"+svc, A, SRV)
	add("ext"+svc, A, CNAME, SRV, TXT)
	add("foo.ext"+svc, A)
	add("ext-in"+svc, A, CNAME)
	add("ext-empty"+svc, A)
	add("ext-b"+svc, A)
	return qs
}

// zoReverse are the PTR questions (and the rest of the reverse zones).
func zoReverse(f zoFixture) []zoQuestion {
	var qs []zoQuestion
	for _, ip := range []string{f.webA, f.webA6, f.emptyA, f.webB, "10.251.2.9", "10.251.3.1", "10.251.4.1",
		"10.251.1.5", "10.251.1.6", "10.251.1.7", "10.251.1.8", "10.251.1.9", "10.251.1.10", "fd00:251::5",
		"10.251.20.1", "10.251.21.5", "1.1.1.1", "2.2.2.2", "2001:db8::1"} {
		name, err := dns.ReverseAddr(ip)
		if err != nil {
			panic(err)
		}
		qs = append(qs, zoQuestion{name, dns.TypePTR})
	}
	return append(qs, zoQuestion{"in-addr.arpa.", dns.TypePTR}, zoQuestion{"251.10.in-addr.arpa.", dns.TypePTR},
		zoQuestion{"example.com.", dns.TypeA})
}

// zoConfig is one option: nodedns's flags and the lines of CoreDNS's
// kubernetes block (and its zones).
type zoConfig struct {
	name     string
	flags    []string // after startAgent's (--cluster-domain cluster.local, --pods insecure)
	zones    []string // cluster zones; default cluster.local
	corefile []string
	// fall is CoreDNS's fallthrough line: "" is kubeadm's (and nodedns's
	// default) `fallthrough in-addr.arpa ip6.arpa`, "-" none.
	fall string
	// effects are questions whose answer must differ from the default
	// configuration's: proof that the option took effect on both sides
	// and that the questions exercise it.
	effects []zoQuestion
	// kubeconfig replaces the kubeconfig line's arguments (default: the
	// control plane's admin kubeconfig).
	kubeconfig string
	// block are lines of CoreDNS's server block besides kubernetes (other
	// plugins: template, local, minimal).
	block []string
}

func zoConfigs(f zoFixture) []zoConfig {
	A, AAAA, SRV, PTR := dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR
	svcA, svcB := "."+f.a+".svc.cluster.local.", "."+f.b+".svc.cluster.local."
	rev := func(ip string) string {
		r, err := dns.ReverseAddr(ip)
		if err != nil {
			panic(err)
		}
		return r
	}
	hidden := []zoQuestion{{"web" + svcB, A}, {"hl" + svcB, SRV}, {f.b + ".svc.cluster.local.", A},
		{"10-251-2-9." + f.b + ".pod.cluster.local.", A}, {rev(f.webB), PTR}, {rev("10.251.21.5"), PTR}}
	return []zoConfig{
		{name: "default"},
		{name: "endpoint_pod_names", flags: []string{"--endpoint-pod-names"}, corefile: []string{"endpoint_pod_names"},
			effects: []zoQuestion{{"hl-6d9f-abcde.hl" + svcA, A}, {"10-251-1-6.hl" + svcA, A}, {"web-pod-1.web" + svcA, A},
				{"hl-v6-pod.hl" + svcA, AAAA}, {rev("10.251.1.6"), PTR}, {rev("10.251.20.1"), PTR}}},
		{name: "ignore_empty_service", flags: []string{"--ignore-empty-service"}, corefile: []string{"ignore empty_service"},
			effects: []zoQuestion{{"empty" + svcA, A}, {"empty" + svcA, SRV}, {"_http._tcp.empty" + svcA, SRV},
				{"notready" + svcA, A}, {"ext-empty" + svcA, A}}},
		{name: "noendpoints", flags: []string{"--no-endpoints"}, corefile: []string{"noendpoints"},
			effects: []zoQuestion{{"hl" + svcA, A}, {"web-0.hl" + svcA, A}, {"10-251-2-9.web" + svcA, A}, {rev("10.251.1.5"), PTR}}},
		{name: "namespaces", flags: []string{"--namespaces", f.a}, corefile: []string{"namespaces " + f.a}, effects: hidden},
		{name: "namespace_labels", flags: []string{"--namespace-labels", "dns=yes"}, corefile: []string{"namespace_labels dns=yes"},
			effects: hidden[:4]},
		{name: "namespace_labels_set", flags: []string{"--namespace-labels", "env in (prod, staging)"},
			corefile: []string{"namespace_labels env in (prod, staging)"}, effects: hidden[:4]},
		// The kubeconfig's current context names a closed port: a
		// server that ignored the context asked for would never sync
		// (and never turn ready).
		{name: "kubeconfig_context", kubeconfig: f.ctxKubeconfig + " " + zoContext,
			flags: []string{"--kubeconfig", f.ctxKubeconfig, "--kubeconfig-context", zoContext}},
		{name: "zones", zones: []string{"cluster.local", "example.internal"},
			flags: []string{"--cluster-domain", "example.internal"}},
		{name: "fallthrough_all", flags: []string{"--fallthrough", "."}, fall: "fallthrough",
			effects: []zoQuestion{{f.upstreamMissed, A}}},
		{name: "fallthrough_cluster", flags: []string{"--fallthrough", "cluster.local"}, fall: "fallthrough cluster.local",
			effects: []zoQuestion{{f.upstreamMissed, A}, {rev("1.1.1.1"), PTR}, {rev("2.2.2.2"), PTR}, {rev("2001:db8::1"), PTR},
				{"251.10.in-addr.arpa.", PTR}}},
		{name: "no_fallthrough", flags: []string{"--fallthrough="}, fall: "-",
			effects: []zoQuestion{{rev("1.1.1.1"), PTR}, {rev("2.2.2.2"), PTR}}},
		{name: "verified_namespaces", flags: []string{"--pods", "verified", "--namespaces", f.a + "," + f.b},
			corefile: []string{"pods verified", "namespaces " + f.a + " " + f.b},
			effects:  []zoQuestion{{"10-251-2-9." + f.b + ".pod.cluster.local.", A}}},
		{name: "combined", zones: []string{"cluster.local", "example.internal"},
			flags: []string{"--cluster-domain", "example.internal", "--endpoint-pod-names",
				"--ignore-empty-service", "--namespaces", f.a, "--fallthrough", "in-addr.arpa,ip6.arpa,cluster.local"},
			corefile: []string{"endpoint_pod_names", "ignore empty_service", "namespaces " + f.a},
			fall:     "fallthrough in-addr.arpa ip6.arpa cluster.local",
			effects: []zoQuestion{{f.upstreamMissed, A}, {"web" + svcB, A}, {"empty" + svcA, A},
				{"hl-6d9f-abcde.hl" + svcA, A}}},
	}
}

// zoAllow is a difference nodedns makes on purpose.
type zoAllow struct {
	configs []string // nil: every configuration
	q       func(f zoFixture, q zoQuestion) bool
	// answers, when set, must also accept the two normalised answers.
	answers func(coredns, nodedns string) bool
	why     string
}

var zoAllowed = []zoAllow{
	{q: func(f zoFixture, q zoQuestion) bool {
		return q.qtype == dns.TypeNS && dns.CountLabel(q.name) <= 2 || strings.HasPrefix(q.name, "ns.dns.")
	}, why: "the apex NS: CoreDNS names the Service whose endpoints are the addresses it is bound to, and has none here (bound to 127.0.0.1): NODATA; " +
		"nodedns, a node-local agent, names the cluster's DNS Service (kube-system/kube-dns) with its ClusterIP"},
	{q: func(f zoFixture, q zoQuestion) bool {
		isZone := q.name == "cluster.local." || q.name == "example.internal." || q.name == "clusterset.local."
		isNS := strings.HasSuffix(q.name, ".svc.cluster.local.") || strings.HasSuffix(q.name, ".svc.example.internal.") ||
			strings.HasSuffix(q.name, ".svc.clusterset.local.")
		return q.qtype == dns.TypeTXT && (isZone || isNS && dns.CountLabel(q.name) == dns.CountLabel("ns.svc.cluster.local.")) ||
			strings.HasPrefix(q.name, "dns-version.") && q.qtype != dns.TypeTXT
	}, answers: func(c, n string) bool { return strings.HasPrefix(c, "NXDOMAIN") && strings.HasPrefix(n, "NOERROR") },
		why: "names that exist without data of the type asked (the apex and <ns>.svc for TXT, dns-version for other types): CoreDNS answers NXDOMAIN, " +
			"contradicting its own NODATA for A at the same names, and a cache would then deny the whole name (RFC 8020); nodedns answers NODATA"},
	{configs: []string{"combined"}, q: func(f zoFixture, q zoQuestion) bool {
		return strings.HasPrefix(q.name, "ext-")
	}, answers: func(c, n string) bool {
		var kept []string
		for _, l := range strings.Split(n, "\n") {
			if !strings.HasPrefix(l, "ns ") {
				kept = append(kept, l)
			}
		}
		return !strings.Contains(c, "\nns ") && strings.Join(kept, "\n") == c
	}, why: "an ExternalName whose target has no data (here: in a zone that falls through to the upstream, which says NXDOMAIN): " +
		"nodedns keeps the target's SOA in the authority section, so caches can bound the negative part; CoreDNS drops it"},
	{configs: []string{"endpoint_pod_names", "combined", "multicluster_options"}, q: func(f zoFixture, q zoQuestion) bool {
		return strings.HasPrefix(q.name, "8.1.251.10.") || strings.HasPrefix(q.name, "10-251-1-8.hl.") ||
			(strings.HasPrefix(q.name, "hl.") || strings.HasPrefix(q.name, "_http._tcp.hl.")) && q.qtype == dns.TypeSRV
	}, why: "a targetRef name that is not a DNS label (dotted.pod-1) keeps the address label: CoreDNS uses it and its SRV and PTR targets do not resolve"},
	{configs: []string{"namespace_labels", "namespace_labels_set", "multicluster_namespace_labels"}, q: func(f zoFixture, q zoQuestion) bool {
		return q.qtype == dns.TypePTR && slices.ContainsFunc([]string{f.webB, "10.251.20.1", "10.251.21.5"}, func(ip string) bool {
			r, _ := dns.ReverseAddr(ip)
			return r == q.name
		})
	}, why: "CoreDNS filters PTR by `namespaces` but not by namespace_labels, so its PTR names services whose names are NXDOMAIN; nodedns hides both"},
	{configs: mcConfigNames, q: func(f zoFixture, q zoQuestion) bool {
		return q.qtype == dns.TypePTR && strings.HasSuffix(q.name, ".252.10.in-addr.arpa.")
	}, answers: func(c, n string) bool { return c == zoNoReply && strings.HasPrefix(n, "NXDOMAIN") },
		why: "the address of an EndpointSlice without the kubernetes.io/service-name label (here an imported one, labelled multicluster.kubernetes.io/service-name): " +
			"CoreDNS indexes every slice for PTR and names the address <endpoint>..<ns>.svc.<zone>, a name with an empty label it cannot send (no reply); " +
			"nodedns indexes only the slices of Services, and the PTR query goes on to the upstream"},
}

// zoNoReply stands for a server that did not answer.
const zoNoReply = "no reply"

func (a zoAllow) covers(f zoFixture, config string, q zoQuestion, coredns, nodedns string) bool {
	return (a.configs == nil || slices.Contains(a.configs, config)) && a.q(f, q) &&
		(a.answers == nil || a.answers(coredns, nodedns))
}

// zoUpstream answers what the fixture needs from the outside: example.com,
// a PTR, and an in-zone name (to see fallthrough); NXDOMAIN with an SOA
// otherwise.
func zoUpstream(t *testing.T, f zoFixture) *dnstest.Server {
	return dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case q.Name == "example.com." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, dnstest.MustRR("example.com. 300 IN A 192.0.2.10"))
		case q.Name == "1.1.1.1.in-addr.arpa." && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, dnstest.MustRR("1.1.1.1.in-addr.arpa. 300 IN PTR one.example."))
		case strings.EqualFold(q.Name, f.upstreamMissed) && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, dnstest.MustRR(q.Name+" 300 IN A 192.0.2.99"))
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, dnstest.MustRR(". 300 IN SOA a.root.example. hostmaster.example. 1 1800 900 604800 300"))
		}
		_ = w.WriteMsg(m)
	})
}

// startCoreDNS runs CoreDNS with cfg's kubernetes block against the
// control plane and waits for its ready plugin (the kubernetes plugin has
// synced).
func startCoreDNS(t *testing.T, bin string, cp *ControlPlane, cfg zoConfig, upstream string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		addr, err := tryStartCoreDNS(t, bin, cp, cfg, upstream)
		if err == nil {
			return addr
		}
		if attempt < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		t.Fatal(err)
	}
}

func tryStartCoreDNS(t *testing.T, bin string, cp *ControlPlane, cfg zoConfig, upstream string) (string, error) {
	dnsPort, readyPort := agentPorts(t)
	zones := cfg.zones
	if zones == nil {
		zones = []string{"cluster.local"}
	}
	opts := slices.Clone(cfg.corefile)
	switch cfg.fall {
	case "":
		opts = append(opts, "fallthrough in-addr.arpa ip6.arpa")
	case "-":
	default:
		opts = append(opts, cfg.fall)
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".:%d {\n  bind 127.0.0.1\n  errors\n  ready 127.0.0.1:%d\n", dnsPort, readyPort)
	kubeconfig := cfg.kubeconfig
	if kubeconfig == "" {
		kubeconfig = cp.Kubeconfig
	}
	fmt.Fprintf(&b, "  kubernetes %s in-addr.arpa ip6.arpa {\n    kubeconfig %s\n    pods insecure\n    ttl 5\n",
		strings.Join(zones, " "), kubeconfig)
	for _, o := range opts {
		fmt.Fprintf(&b, "    %s\n", o)
	}
	fmt.Fprintf(&b, "  }\n")
	for _, l := range cfg.block {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Fprintf(&b, "  forward . %s\n}\n", upstream)
	dir := t.TempDir()
	corefile := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(b.String()), 0o600); err != nil {
		return "", err
	}
	logPath := filepath.Join(dir, "coredns.log")
	p, err := startCPProc("coredns", logPath, bin, "-conf", corefile)
	if err != nil {
		return "", err
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("Corefile:\n%s\nCoreDNS log (last 30 lines):\n%s", b.String(), tailFile(logPath, 30))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://127.0.0.1:"+strconv.Itoa(readyPort)+"/ready", "", 60*time.Second, func([]byte) bool { return true }); err != nil {
		return "", fmt.Errorf("CoreDNS not ready: %w\n%s", err, tailFile(logPath, 30))
	}
	return "127.0.0.1:" + strconv.Itoa(dnsPort), nil
}

// zoAsk sends q to addr over UDP with EDNS (4096 bytes: no answer here is
// truncated), retrying a timeout once.
func zoAsk(addr string, q zoQuestion) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	m.SetEdns0(4096, false)
	cl := &dns.Client{Net: "udp", Timeout: 3 * time.Second, UDPSize: 4096}
	var err error
	for range 2 {
		var r *dns.Msg
		if r, _, err = cl.Exchange(m, addr); err == nil {
			if r.Truncated {
				return nil, fmt.Errorf("%s: truncated", q)
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", q, err)
}

// zoNormalize renders m as sorted lines: rcode and AA, then each record
// with its section, TTL 0, SOA serial 0, names lower-case; OPT dropped.
func zoNormalize(m *dns.Msg) string {
	head := dns.RcodeToString[m.Rcode]
	if m.Authoritative {
		head += " aa"
	}
	var lines []string
	for _, s := range []struct {
		p   string
		rrs []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		for _, rr := range s.rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			rr = dns.Copy(rr)
			rr.Header().Ttl = 0
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
			lines = append(lines, s.p+" "+strings.ToLower(strings.ReplaceAll(rr.String(), "\t", " ")))
		}
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	return strings.Join(append([]string{head}, lines...), "\n")
}

// zoDiff runs CoreDNS and nodedns with cfg against the control plane and
// the upstream at up, asks both every question of qs and fails the test
// on every difference not in zoAllowed (allowedSeen records the entries
// used). It returns CoreDNS's answers. With base (the answers of another
// configuration), every question of cfg.effects must be answered
// otherwise than there.
func zoDiff(t *testing.T, cp *ControlPlane, coredns, up string, f zoFixture, cfg zoConfig, qs []zoQuestion,
	base map[zoQuestion]string, allowedSeen map[int]bool) map[zoQuestion]string {
	t.Helper()
	for _, e := range cfg.effects {
		if !slices.Contains(qs, e) {
			t.Fatalf("effect %s is not among the questions", e)
		}
		if base == nil {
			t.Fatalf("effect %s without answers to compare with", e)
		}
	}
	cdns := startCoreDNS(t, coredns, cp, cfg, up)
	nd := startAgent(t, cp, up, cfg.flags...)
	answers := make(map[zoQuestion]string, len(qs))
	var diffs, allowed int
	for _, q := range qs {
		want := zoNoReply
		if rc, err := zoAsk(cdns, q); err == nil {
			want = zoNormalize(rc)
		} else if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("CoreDNS: %v", err)
			continue
		}
		rn, err := zoAsk(nd, q)
		if err != nil {
			t.Errorf("nodedns: %v", err)
			continue
		}
		got := zoNormalize(rn)
		answers[q] = want
		if slices.Contains(cfg.effects, q) && base[q] == want {
			t.Errorf("%s: the option changed nothing here; both servers answer as without it:\n%s", q, want)
		}
		if want == got {
			continue
		}
		if i := slices.IndexFunc(zoAllowed, func(a zoAllow) bool { return a.covers(f, cfg.name, q, want, got) }); i >= 0 {
			allowed++
			if !allowedSeen[i] {
				// Shown once: the reason and an example.
				t.Logf("allowed difference %d, e.g. %s: %s\nCoreDNS:\n%s\nnodedns:\n%s", i, q, zoAllowed[i].why, want, got)
			}
			allowedSeen[i] = true
			continue
		}
		diffs++
		t.Errorf("%s differs:\nCoreDNS:\n%s\nnodedns:\n%s", q, want, got)
	}
	t.Logf("%s: %d questions, %d differences, %d allowed", cfg.name, len(qs), diffs, allowed)
	return answers
}

// TestZoneOptionsDifferential is the differential test of the cluster
// zone options against CoreDNS's kubernetes plugin, whose answers they
// must match.
func TestZoneOptionsDifferential(t *testing.T) {
	cp := controlPlane(t)
	coredns := coreDNSBin(t)
	c := cp.Client
	ensureKubeDNS(t, c)
	f := zoCreate(t, c)
	f.ctxKubeconfig = contextKubeconfig(t, cp)
	up := zoUpstream(t, f)

	allowedSeen := map[int]bool{}
	var defaults map[zoQuestion]string // CoreDNS's answers in the default configuration
	for _, cfg := range zoConfigs(f) {
		t.Run(cfg.name, func(t *testing.T) {
			zones := cfg.zones
			if zones == nil {
				zones = []string{"cluster.local"}
			}
			var qs []zoQuestion
			for _, z := range zones {
				qs = append(qs, zoQuestions(f, z+".")...)
			}
			qs = append(qs, zoReverse(f)...)
			answers := zoDiff(t, cp, coredns, up.Addr, f, cfg, qs, defaults, allowedSeen)
			if cfg.name == "default" {
				defaults = answers
			}
		})
	}
	var ran []string
	for _, cfg := range zoConfigs(f) {
		ran = append(ran, cfg.name)
	}
	zoCheckAllowUsed(t, allowedSeen, ran)
}

// zoCheckAllowUsed fails t for an allow-list entry that applies to one of
// the configurations ran but was never used: it has outlived its reason.
func zoCheckAllowUsed(t *testing.T, allowedSeen map[int]bool, ran []string) {
	t.Helper()
	if t.Failed() {
		return
	}
	for i, a := range zoAllowed {
		applies := a.configs == nil || slices.ContainsFunc(a.configs, func(c string) bool { return slices.Contains(ran, c) })
		if applies && !allowedSeen[i] {
			t.Errorf("allow-list entry %d is never used: %s", i, a.why)
		}
	}
}
