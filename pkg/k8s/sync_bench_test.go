package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// realisticObjects returns nsvc Services in 100 namespaces with one
// EndpointSlice of eps endpoints each, filled in as the API server and the
// EndpointSlice controller fill them in (uid, resourceVersion, managed
// fields, labels, IP families, target references, conditions, node and
// zone): what a real list response carries, which is what decoding costs.
// Every tenth service is headless with hostnames.
func realisticObjects(nsvc, eps int) []runtime.Object {
	ts := metav1.NewTime(time.Unix(1700000000, 0))
	fieldsV1 := &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:sessionAffinity":{},"f:type":{}}}`)}
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1", FieldsV1: fieldsV1}}
	single := corev1.IPFamilyPolicySingleStack
	cluster := corev1.ServiceInternalTrafficPolicyCluster
	var out []runtime.Object
	for n := range 100 {
		out = append(out, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns%d", n),
			UID: types.UID(fmt.Sprintf("6b1f0c3e-0000-4000-8000-%012d", n)), ResourceVersion: "100",
			Labels: map[string]string{"kubernetes.io/metadata.name": fmt.Sprintf("ns%d", n)}, CreationTimestamp: ts},
			Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}})
	}
	for i := range nsvc {
		nsName, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
		headless := i%10 == 0
		meta := metav1.ObjectMeta{Namespace: nsName, Name: name, UID: types.UID(fmt.Sprintf("0d9c1a7e-1111-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(1000 + 2*i), CreationTimestamp: ts,
			Labels:        map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "bench"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `"}}`},
			ManagedFields: managed}
		ip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()
		if headless {
			ip = "None"
		}
		out = append(out, &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090)},
			},
			Selector: map[string]string{"app.kubernetes.io/name": name}, ClusterIP: ip, ClusterIPs: []string{ip},
			Type: corev1.ServiceTypeClusterIP, SessionAffinity: corev1.ServiceAffinityNone,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &single, InternalTrafficPolicy: &cluster,
		}})
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: name + "-x7k2p",
			GenerateName: name + "-", UID: types.UID(fmt.Sprintf("7e2a9b4c-2222-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(1001 + 2*i), CreationTimestamp: ts, ManagedFields: managed,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app.kubernetes.io/name": name},
			Annotations: map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2023-11-14T22:13:20Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name,
				UID: types.UID(fmt.Sprintf("0d9c1a7e-1111-4000-8000-%012d", i)), Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)},
		}
		for j := range eps {
			k := i*eps + j
			e := discoveryv1.Endpoint{
				Addresses:  []string{netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)}).String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: nsName, Name: fmt.Sprintf("%s-6d4b75cb6d-%05d", name, j),
					UID: types.UID(fmt.Sprintf("9f3b2c1d-3333-4000-8000-%012d", k))},
				NodeName: ptr(fmt.Sprintf("node-%d", k%5000)), Zone: ptr("zone-a"),
			}
			if headless {
				e.Hostname = ptr(fmt.Sprintf("%s-%d", name, j))
			}
			sl.Endpoints = append(sl.Endpoints, e)
		}
		out = append(out, sl)
	}
	return out
}

// BenchmarkStartSync measures the agent's start against an API server
// holding 10,000 Services and 100,000 endpoint addresses (served over
// loopback HTTP as protobuf, as a watch cache serves resourceVersion "0"):
// from Run to Synced, with the heap growth of one sync. It is the
// client's share of the start-up race of scripts/k8s-scale.sh race.
func BenchmarkStartSync(b *testing.B) {
	f := newFakeAPI(b, apiLists("5000", realisticObjects(10000, 10)...))
	f.preEncode()
	goruntime.GC()
	last := "svc9999.ns99.svc.cluster.local."
	b.ReportAllocs()
	var peak, live uint64
	for b.Loop() {
		goruntime.GC()
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		base := ms.HeapInuse
		ix, err := New(f.client(b), Config{TTL: 5, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = ix.Run(ctx)
		}()
		for !ix.Synced() {
			goruntime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse-base)
			time.Sleep(time.Millisecond)
		}
		if r, ok := ix.Lookup(last, dns.TypeA); !ok || r.Msg.Rcode != dns.RcodeSuccess || len(r.Msg.Answer) != 1 {
			b.Fatalf("%s: %v", last, r.Msg)
		}
		goruntime.GC()
		goruntime.ReadMemStats(&ms)
		live = ms.HeapInuse - base
		if path := os.Getenv("K8S_SYNC_HEAPPROFILE"); path != "" {
			// What the synced index holds: go test -memprofilerate 512
			// with this set, then go tool pprof -sample_index=inuse_space.
			if fh, err := os.Create(path); err == nil {
				_ = pprof.WriteHeapProfile(fh)
				fh.Close()
			}
		}
		cancel()
		<-done
	}
	// The heap the sync needed beyond what was in use before it (the
	// fake API server's encoded lists), at its peak and once collected.
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(live)/(1<<20), "live-heap-MiB")
}
