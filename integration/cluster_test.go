//go:build integration

package integration

// The cluster zone against a real kube-apiserver: objects are created
// through the API, answers checked whole (rcode, AA, answer, authority,
// additional), first straight from a pkg/k8s Index fed by a real clientset,
// then over the wire from the nodedns binary over UDP and TCP. Updates and
// deletes must show within a second.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
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

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// visibleWithin is how soon an API change must show in answers.
const visibleWithin = time.Second

var ctxBG = context.Background()

// clusterNS creates a namespace with a unique name and removes it at test
// end. No namespace controller runs, so removal is a delete followed by
// finalizing the namespace by hand.
func clusterNS(t *testing.T, c kubernetes.Interface, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	if _, err := c.CoreV1().Namespaces().Create(ctxBG, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { deleteNS(t, c, name) })
	return name
}

// deleteNS deletes a namespace for good, in place of the namespace
// controller: delete (which marks it terminating), then drop the
// finalizer.
func deleteNS(t testing.TB, c kubernetes.Interface, name string) {
	err := c.CoreV1().Namespaces().Delete(ctxBG, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("deleting namespace %s: %v", name, err)
		return
	}
	n, err := c.CoreV1().Namespaces().Get(ctxBG, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			t.Errorf("getting namespace %s: %v", name, err)
		}
		return
	}
	n.Spec.Finalizers = nil
	if _, err := c.CoreV1().Namespaces().Finalize(ctxBG, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("finalizing namespace %s: %v", name, err)
	}
}

// clusterObjects are the objects of one test namespace and the addresses
// the API server gave them.
type clusterObjects struct {
	ns                 string
	web, v4only, webV6 string // ClusterIPs
	kubeDNS            string
}

func svcPort(name string, p int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p}
}

func createSvc(t *testing.T, c kubernetes.Interface, s *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := c.CoreV1().Services(s.Namespace).Create(ctxBG, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s/%s: %v", s.Namespace, s.Name, err)
	}
	return out
}

type testEP struct {
	ip       string
	hostname string
	ready    *bool
}

func endpointSlice(ns, name, svc string, family discoveryv1.AddressType, port int32, eps ...testEP) *discoveryv1.EndpointSlice {
	pname, proto := "http", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}},
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			h := e.hostname
			x.Hostname = &h
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func createSlice(t *testing.T, c kubernetes.Interface, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	t.Helper()
	out, err := c.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctxBG, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating endpointslice %s/%s: %v", s.Namespace, s.Name, err)
	}
	return out
}

var (
	boolTrue  = true
	boolFalse = false
)

// createClusterObjects creates the services and slices every cluster test
// asserts on, in a fresh namespace.
func createClusterObjects(t *testing.T, c kubernetes.Interface) clusterObjects {
	t.Helper()
	o := clusterObjects{ns: clusterNS(t, c, "dns")}
	ns := o.ns
	dual := corev1.IPFamilyPolicyRequireDualStack
	web := createSvc(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &dual, Ports: []corev1.ServicePort{svcPort("http", 80), svcPort("https", 443)},
			Selector: map[string]string{"app": "web"}},
	})
	if len(web.Spec.ClusterIPs) != 2 {
		t.Fatalf("dual-stack service got ClusterIPs %v", web.Spec.ClusterIPs)
	}
	o.web, o.webV6 = web.Spec.ClusterIPs[0], web.Spec.ClusterIPs[1]
	createSlice(t, c, endpointSlice(ns, "web-1", "web", discoveryv1.AddressTypeIPv4, 8080, testEP{ip: "10.244.2.9"}))

	single := corev1.IPFamilyPolicySingleStack
	v4 := createSvc(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v4only"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &single, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}},
	})
	o.v4only = v4.Spec.ClusterIP

	createSvc(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hl"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{svcPort("http", 80)}},
	})
	createSlice(t, c, endpointSlice(ns, "hl-a", "hl", discoveryv1.AddressTypeIPv4, 80,
		testEP{ip: "10.244.1.5", hostname: "web-0"},
		testEP{ip: "10.244.1.6", ready: &boolTrue},
		testEP{ip: "10.244.1.7", ready: &boolFalse}))
	createSlice(t, c, endpointSlice(ns, "hl-b", "hl", discoveryv1.AddressTypeIPv6, 80, testEP{ip: "fd00:244::5"}))

	createSvc(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"},
	})
	createSvc(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext-in"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "web." + ns + ".svc.cluster.local"},
	})
	return o
}

// ensureKubeDNS creates kube-system/kube-dns once (the apex NS answer names
// it) and returns its ClusterIP.
func ensureKubeDNS(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	s, err := c.CoreV1().Services("kube-system").Get(ctxBG, "kube-dns", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = c.CoreV1().Services("kube-system").Create(ctxBG, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("kube-dns service: %v", err)
	}
	return s.Spec.ClusterIP
}

// The text form of answers: the rcode and AA flag, then a line per record
// prefixed by its section, class omitted. The SOA serial (the time of the
// last change) is shown as SERIAL.
func formatMsg(m *dns.Msg) string {
	if m == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString(dns.RcodeToString[m.Rcode])
	if m.Authoritative {
		b.WriteString(" aa")
	}
	for _, s := range []struct {
		p   string
		rrs []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		for _, rr := range s.rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if soa, ok := rr.(*dns.SOA); ok {
				c := *soa
				c.Serial = 0
				rr = &c
			}
			f := strings.Split(rr.String(), "\t")
			line := strings.Join(append([]string{f[0], f[1]}, f[3:]...), " ")
			if rr.Header().Rrtype == dns.TypeSOA {
				line = strings.Replace(line, " 0 7200 ", " SERIAL 7200 ", 1)
			}
			b.WriteString("\n" + s.p + " " + line)
		}
	}
	return b.String()
}

func formatResult(r stage.Result) string {
	s := formatMsg(r.Msg)
	if r.ExternalTarget != "" {
		s += "\next " + r.ExternalTarget
	}
	return s
}

const (
	itSOA      = "cluster.local. 5 SOA ns.dns.cluster.local. hostmaster.cluster.local. SERIAL 7200 1800 86400 5"
	itNXDOMAIN = "NXDOMAIN aa\nns " + itSOA
	itNODATA   = "NOERROR aa\nns " + itSOA
)

type clusterCase struct {
	name  string
	qtype uint16
	want  string
}

// clusterCases are the whole answers expected for o's objects, as the
// index gives them (ExternalName targets out of the zone unresolved).
func clusterCases(o clusterObjects) []clusterCase {
	z := ".svc.cluster.local."
	web, hl, ns := "web."+o.ns+z, "hl."+o.ns+z, o.ns
	rev4, _ := dns.ReverseAddr(o.web)
	rev6, _ := dns.ReverseAddr(o.webV6)
	revHL6, _ := dns.ReverseAddr("fd00:244::5")
	return []clusterCase{
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A " + o.web},
		{web, dns.TypeAAAA, "NOERROR aa\nan " + web + " 5 AAAA " + o.webV6},
		{web, dns.TypeSRV, "NOERROR aa\nan " + web + " 5 SRV 0 25 80 " + web + "\nan " + web + " 5 SRV 0 25 443 " + web +
			"\nex " + web + " 5 A " + o.web + "\nex " + web + " 5 AAAA " + o.webV6},
		{"_https._tcp." + web, dns.TypeSRV, "NOERROR aa\nan _https._tcp." + web + " 5 SRV 0 50 443 " + web +
			"\nex " + web + " 5 A " + o.web + "\nex " + web + " 5 AAAA " + o.webV6},
		{"_https._udp." + web, dns.TypeSRV, itNXDOMAIN},
		{"10-244-2-9." + web, dns.TypeA, "NOERROR aa\nan 10-244-2-9." + web + " 5 A 10.244.2.9"},
		{"v4only." + ns + z, dns.TypeA, "NOERROR aa\nan v4only." + ns + z + " 5 A " + o.v4only},
		{"v4only." + ns + z, dns.TypeAAAA, itNODATA},
		{hl, dns.TypeA, "NOERROR aa\nan " + hl + " 5 A 10.244.1.5\nan " + hl + " 5 A 10.244.1.6"},
		{hl, dns.TypeAAAA, "NOERROR aa\nan " + hl + " 5 AAAA fd00:244::5"},
		{hl, dns.TypeSRV, "NOERROR aa" +
			"\nan " + hl + " 5 SRV 0 33 80 web-0." + hl +
			"\nan " + hl + " 5 SRV 0 33 80 10-244-1-6." + hl +
			"\nan " + hl + " 5 SRV 0 33 80 fd00-244--5." + hl +
			"\nex web-0." + hl + " 5 A 10.244.1.5" +
			"\nex 10-244-1-6." + hl + " 5 A 10.244.1.6" +
			"\nex fd00-244--5." + hl + " 5 AAAA fd00:244::5"},
		{"web-0." + hl, dns.TypeA, "NOERROR aa\nan web-0." + hl + " 5 A 10.244.1.5"},
		{"fd00-244--5." + hl, dns.TypeAAAA, "NOERROR aa\nan fd00-244--5." + hl + " 5 AAAA fd00:244::5"},
		{"10-244-1-7." + hl, dns.TypeA, itNXDOMAIN},
		{"ext." + ns + z, dns.TypeCNAME, "NOERROR aa\nan ext." + ns + z + " 5 CNAME example.com."},
		{"ext-in." + ns + z, dns.TypeA, "NOERROR aa\nan ext-in." + ns + z + " 5 CNAME " + web + "\nan " + web + " 5 A " + o.web},
		{"ext." + ns + z, dns.TypeSRV, itNODATA},
		{"missing." + ns + z, dns.TypeA, itNXDOMAIN},
		{ns + z, dns.TypeA, itNODATA},
		{"web.no-such-ns" + z, dns.TypeA, itNXDOMAIN},
		{"10-1-2-3." + ns + ".pod.cluster.local.", dns.TypeA, "NOERROR aa\nan 10-1-2-3." + ns + ".pod.cluster.local. 5 A 10.1.2.3"},
		{"dns-version.cluster.local.", dns.TypeTXT, "NOERROR aa\nan dns-version.cluster.local. 28800 TXT \"1.1.0\""},
		{"cluster.local.", dns.TypeSOA, "NOERROR aa\nan " + itSOA},
		{"cluster.local.", dns.TypeNS, "NOERROR aa\nan cluster.local. 5 NS kube-dns.kube-system.svc.cluster.local." +
			"\nex kube-dns.kube-system.svc.cluster.local. 5 A " + o.kubeDNS},
		{"cluster.local.", dns.TypeAXFR, "REFUSED"},
		{rev4, dns.TypePTR, "NOERROR aa\nan " + rev4 + " 5 PTR " + web},
		{rev6, dns.TypePTR, "NOERROR aa\nan " + rev6 + " 5 PTR " + web},
		{"5.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 5.1.244.10.in-addr.arpa. 5 PTR web-0." + hl},
		{revHL6, dns.TypePTR, "NOERROR aa\nan " + revHL6 + " 5 PTR fd00-244--5." + hl},
	}
}

// runIndex runs a pkg/k8s Index against the control plane until the test
// ends, and waits for it to sync.
func runIndex(t *testing.T, cp *ControlPlane, cfg k8s.Config) *k8s.Index {
	t.Helper()
	rc, err := k8s.RESTConfig(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = testLogger(t)
	ix, err := k8s.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxBG)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ix.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("index did not stop")
		}
	})
	dnstest.Eventually(t, 30*time.Second, "index synced", func() error {
		if !ix.Synced() {
			return fmt.Errorf("not synced")
		}
		return nil
	})
	return ix
}

// waitLookup polls the index until name renders as want; it fails the test
// when that takes longer than visibleWithin, and returns how long it took.
func waitLookup(t *testing.T, ix *k8s.Index, name string, qtype uint16, want string) time.Duration {
	t.Helper()
	start := time.Now()
	var got string
	for {
		r, ok := ix.Lookup(name, qtype)
		got = "forward"
		if ok {
			got = formatResult(r)
		}
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > visibleWithin {
			t.Errorf("%s %s: not within %v: got\n%s\nwant\n%s", name, dns.TypeToString[qtype], visibleWithin, got, want)
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClusterIndex checks the index's answers for every record form
// against objects in a real API server, then updates and deletes.
func TestClusterIndex(t *testing.T) {
	cp := controlPlane(t)
	c := cp.Client
	kubeDNS := ensureKubeDNS(t, c)
	o := createClusterObjects(t, c)
	o.kubeDNS = kubeDNS
	ix := runIndex(t, cp, k8s.Config{Zone: "cluster.local", TTL: 5, Pods: k8s.PodsInsecure, NodeName: "node-a"})

	for _, cc := range clusterCases(o) {
		r, ok := ix.Lookup(cc.name, cc.qtype)
		got := "forward"
		if ok {
			got = formatResult(r)
		}
		if got != cc.want {
			t.Errorf("%s %s: got\n%s\nwant\n%s", cc.name, dns.TypeToString[cc.qtype], got, cc.want)
		}
	}
	r, _ := ix.Lookup("ext."+o.ns+".svc.cluster.local.", dns.TypeA)
	if r.ExternalTarget != "example.com." || formatMsg(r.Msg) != "NOERROR aa\nan ext."+o.ns+".svc.cluster.local. 5 CNAME example.com." {
		t.Errorf("ExternalName: %s", formatResult(r))
	}

	t.Run("updates", func(t *testing.T) {
		ns, z := o.ns, "."+o.ns+".svc.cluster.local."
		api := "api" + z
		var worst time.Duration
		track := func(d time.Duration) { worst = max(worst, d) }

		s := createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80)}}})
		track(waitLookup(t, ix, api, dns.TypeA, "NOERROR aa\nan "+api+" 5 A "+s.Spec.ClusterIP))

		// Port renamed.
		s.Spec.Ports[0].Name = "web"
		if _, err := c.CoreV1().Services(ns).Update(ctxBG, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, "_web._tcp."+api, dns.TypeSRV, "NOERROR aa\nan _web._tcp."+api+" 5 SRV 0 100 80 "+api+"\nex "+api+" 5 A "+s.Spec.ClusterIP))
		track(waitLookup(t, ix, "_http._tcp."+api, dns.TypeSRV, itNXDOMAIN))

		// An endpoint turns ready, then not ready.
		sl := createSlice(t, c, endpointSlice(ns, "api-1", "api", discoveryv1.AddressTypeIPv4, 8080, testEP{ip: "10.244.7.1", ready: &boolFalse}))
		track(waitLookup(t, ix, "10-244-7-1."+api, dns.TypeA, itNXDOMAIN))
		sl.Endpoints[0].Conditions.Ready = &boolTrue
		sl, err := c.DiscoveryV1().EndpointSlices(ns).Update(ctxBG, sl, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, "10-244-7-1."+api, dns.TypeA, "NOERROR aa\nan 10-244-7-1."+api+" 5 A 10.244.7.1"))
		track(waitLookup(t, ix, "1.7.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 1.7.244.10.in-addr.arpa. 5 PTR 10-244-7-1."+api))
		sl.Endpoints[0].Conditions.Ready = &boolFalse
		if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(ctxBG, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, "10-244-7-1."+api, dns.TypeA, itNXDOMAIN))
		track(waitLookup(t, ix, "1.7.244.10.in-addr.arpa.", dns.TypePTR, "forward"))

		// A headless service loses its last ready endpoint, then the slice.
		hl := "hl" + z
		if err := c.DiscoveryV1().EndpointSlices(ns).Delete(ctxBG, "hl-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, hl, dns.TypeAAAA, itNODATA))
		if err := c.DiscoveryV1().EndpointSlices(ns).Delete(ctxBG, "hl-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, hl, dns.TypeA, itNXDOMAIN))

		// ExternalName retargeted, service deleted.
		e, err := c.CoreV1().Services(ns).Get(ctxBG, "ext", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.Spec.ExternalName = "db.example.org"
		if _, err := c.CoreV1().Services(ns).Update(ctxBG, e, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, "ext"+z, dns.TypeCNAME, "NOERROR aa\nan ext"+z+" 5 CNAME db.example.org."))
		if err := c.CoreV1().Services(ns).Delete(ctxBG, "api", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		track(waitLookup(t, ix, api, dns.TypeA, itNXDOMAIN))

		// The namespace goes: everything under it is NXDOMAIN.
		deleteNS(t, c, ns)
		track(waitLookup(t, ix, "web"+z, dns.TypeA, itNXDOMAIN))
		track(waitLookup(t, ix, ns+".svc.cluster.local.", dns.TypeA, itNXDOMAIN))
		t.Logf("slowest change to show: %v", worst)
	})
}

// TestClusterPods checks the node-local pod map against real Pods: the
// field selector, host-network pods, IP reuse.
func TestClusterPods(t *testing.T) {
	cp := controlPlane(t)
	c := cp.Client
	nsOld, nsNew := clusterNS(t, c, "pods-old"), clusterNS(t, c, "pods-new")
	ix := runIndex(t, cp, k8s.Config{Zone: "cluster.local", TTL: 5, NodeName: "node-a"})

	mkPod := func(ns, name, node, ip string, hostNet bool) {
		t.Helper()
		p, err := c.CoreV1().Pods(ns).Create(ctxBG, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNet,
				Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod: %v", err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctxBG, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting pod IP: %v", err)
		}
	}
	wantNS := func(ip, want string) {
		t.Helper()
		start := time.Now()
		for {
			got, _ := ix.PodNamespace(netip.MustParseAddr(ip))
			if got == want {
				return
			}
			if time.Since(start) > visibleWithin {
				t.Errorf("PodNamespace(%s) = %q, want %q", ip, got, want)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	mkPod(nsOld, "old", "node-a", "10.244.50.1", false)
	mkPod(nsOld, "elsewhere", "node-b", "10.244.50.2", false)
	mkPod(nsOld, "hostnet", "node-a", "192.0.2.50", true)
	wantNS("10.244.50.1", nsOld)
	wantNS("10.244.50.2", "")
	wantNS("192.0.2.50", "")

	time.Sleep(1100 * time.Millisecond) // creationTimestamp has a one-second resolution
	mkPod(nsNew, "new", "node-a", "10.244.50.1", false)
	wantNS("10.244.50.1", nsNew)
	zero := int64(0)
	if err := c.CoreV1().Pods(nsOld).Delete(ctxBG, "old", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	// The deletion has been processed once the old pod has left the
	// index (three of this node's pods, then two); only then does the
	// mapping staying tell anything.
	start := time.Now()
	for ix.Stats().Objects[k8s.ObjPods] != 2 {
		if time.Since(start) > visibleWithin {
			t.Fatalf("pods watched: %d, want 2 (this node's) after the deletion", ix.Stats().Objects[k8s.ObjPods])
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantNS("10.244.50.1", nsNew)
}

// agentPorts picks a port free for both UDP and TCP on 127.0.0.1.
func agentPorts(t *testing.T) (dnsPort, adminPort int) {
	t.Helper()
	for range 20 {
		ports, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		if pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(ports[0])); err == nil {
			pc.Close()
			return ports[0], ports[1]
		}
	}
	t.Fatal("no free UDP+TCP port")
	return 0, 0
}

// startAgent runs `nodedns serve` against the control plane on loopback
// and waits until /ready says the informers have synced.
func startAgent(t *testing.T, cp *ControlPlane, upstream string, extra ...string) (addr string) {
	t.Helper()
	dnsPort, adminPort := agentPorts(t)
	addr = "127.0.0.1:" + strconv.Itoa(dnsPort)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	args := append([]string{"serve",
		"--listen", addr,
		"--upstream", upstream,
		"--kubeconfig", cp.Kubeconfig,
		"--cluster-domain", "cluster.local",
		"--cluster-ttl", "5s",
		"--pods", "insecure",
		"--admin", admin,
		"--loop-check=false",
		"--lameduck", "0s",
		"--log-level", "debug",
	}, extra...)
	logPath := filepath.Join(t.TempDir(), "nodedns.log")
	p, err := startCPProc("nodedns", logPath, nodednsBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("nodedns log (last 60 lines):\n%s", tailFile(logPath, 60))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(p, hc, "http://"+admin+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("agent not ready: %v\n%s", err, tailFile(logPath, 40))
	}
	return addr
}

// TestClusterWire queries the nodedns binary over UDP and TCP for the same
// objects, with an upstream on loopback for the ExternalName target.
func TestClusterWire(t *testing.T) {
	cp := controlPlane(t)
	if _, err := os.Stat(nodednsBin); err != nil {
		t.Fatalf("nodedns binary: %v", err)
	}
	c := cp.Client
	kubeDNS := ensureKubeDNS(t, c)
	o := createClusterObjects(t, c)
	o.kubeDNS = kubeDNS
	// The upstream knows two names; it marks its answers non-authoritative
	// so that they are told apart from the agent's own.
	up := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case q.Name == "example.com." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, dnstest.MustRR("example.com. 300 IN A 192.0.2.10"))
		case q.Name == "1.1.1.1.in-addr.arpa." && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, dnstest.MustRR("1.1.1.1.in-addr.arpa. 300 IN PTR upstream.example."))
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	addr := startAgent(t, cp, up.Addr)

	cases := clusterCases(o)
	ext := "ext." + o.ns + ".svc.cluster.local."
	cases = append(cases,
		clusterCase{ext, dns.TypeA, "NOERROR aa\nan " + ext + " 5 CNAME example.com.\nan example.com. TTL A 192.0.2.10"},
		// Unknown reverse names and other zones go upstream.
		clusterCase{"1.1.1.1.in-addr.arpa.", dns.TypePTR, "NOERROR\nan 1.1.1.1.in-addr.arpa. TTL PTR upstream.example."},
	)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			for _, cc := range cases {
				r, err := dnstest.Query(addr, network, cc.name, cc.qtype)
				if err != nil {
					t.Error(err)
					continue
				}
				want := cc.want
				if cc.qtype == dns.TypeAXFR {
					want = "REFUSED" // no AA on REFUSED, as CoreDNS
				}
				// Upstream answers come through the cache: their TTLs
				// count down.
				got := maskTTL(formatMsg(r), "example.com.", "1.1.1.1.in-addr.arpa.")
				if got != want {
					t.Errorf("%s %s over %s: got\n%s\nwant\n%s", cc.name, dns.TypeToString[cc.qtype], network, got, want)
				}
			}
		})
	}

	t.Run("case", func(t *testing.T) {
		// The client's spelling comes back in the question and owner names.
		name := "Web." + strings.ToUpper(o.ns) + ".Svc.Cluster.Local."
		r, err := dnstest.Query(addr, "udp", name, dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := formatMsg(r), "NOERROR aa\nan "+name+" 5 A "+o.web; got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("updates", func(t *testing.T) {
		name := "late." + o.ns + ".svc.cluster.local."
		for _, network := range []string{"udp", "tcp"} {
			if r, err := dnstest.Query(addr, network, name, dns.TypeA); err != nil || formatMsg(r) != itNXDOMAIN {
				t.Fatalf("before create over %s: %v %s", network, err, formatMsg(r))
			}
		}
		start := time.Now()
		s := createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "late"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80)}}})
		wireEventually(t, addr, name, dns.TypeA, "NOERROR aa\nan "+name+" 5 A "+s.Spec.ClusterIP, start)
		start = time.Now()
		if err := c.CoreV1().Services(o.ns).Delete(ctxBG, "late", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wireEventually(t, addr, name, dns.TypeA, itNXDOMAIN, start)
	})
}

// maskTTL writes TTL in place of the TTL of records owned by owners.
func maskTTL(s string, owners ...string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) > 3 && slices.Contains(owners, f[1]) {
			f[2] = "TTL"
			lines[i] = strings.Join(f, " ")
		}
	}
	return strings.Join(lines, "\n")
}

// wireEventually polls the agent over UDP and then TCP until name renders
// as want, failing when that takes longer than visibleWithin after start.
func wireEventually(t *testing.T, addr, name string, qtype uint16, want string, start time.Time) {
	t.Helper()
	for _, network := range []string{"udp", "tcp"} {
		for {
			r, err := dnstest.Query(addr, network, name, qtype)
			got := ""
			if err == nil {
				got = formatMsg(r)
			}
			if got == want {
				break
			}
			if time.Since(start) > visibleWithin {
				t.Fatalf("%s over %s: not within %v: %v got\n%s\nwant\n%s", name, network, visibleWithin, err, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("%s %s visible over UDP and TCP after %v", name, dns.TypeToString[qtype], time.Since(start).Round(time.Millisecond))
}

// TestClusterAPIOutage stops the API server under a running index: the
// last state keeps being served, and once the server is back client-go
// relists and rewatches on its own.
func TestClusterAPIOutage(t *testing.T) {
	cp := controlPlane(t)
	c := cp.Client
	ns := clusterNS(t, c, "outage")
	z := "." + ns + ".svc.cluster.local."
	s := createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "before"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80)}}})
	ix := runIndex(t, cp, k8s.Config{Zone: "cluster.local", TTL: 5})
	want := "NOERROR aa\nan before" + z + " 5 A " + s.Spec.ClusterIP
	waitLookup(t, ix, "before"+z, dns.TypeA, want)

	cp.StopAPIServer()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := cp.StartAPIServer(); err != nil {
				t.Errorf("restarting kube-apiserver: %v", err)
			}
		}
	})
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r, ok := ix.Lookup("before"+z, dns.TypeA)
		if !ok || formatResult(r) != want || !ix.Synced() {
			t.Fatalf("during the outage: ok=%v synced=%v\n%s", ok, ix.Synced(), formatResult(r))
		}
	}
	down := time.Now()
	if err := cp.StartAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	restarted = true
	t.Logf("API server back after %v", time.Since(down).Round(time.Millisecond))

	// The watch comes back by itself; reflector backoff bounds how soon.
	back := time.Now()
	s2 := createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80)}}})
	dnstest.Eventually(t, 60*time.Second, "a service created after the outage resolves", func() error {
		r, _ := ix.Lookup("after"+z, dns.TypeA)
		if got, want := formatResult(r), "NOERROR aa\nan after"+z+" 5 A "+s2.Spec.ClusterIP; got != want {
			return fmt.Errorf("got\n%s", got)
		}
		return nil
	})
	t.Logf("service created after the restart resolved after %v", time.Since(back).Round(time.Millisecond))
	waitLookup(t, ix, "before"+z, dns.TypeA, want)
}
