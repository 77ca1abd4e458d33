package k8s

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// synthetic builds an index of nsvc services in 100 namespaces, each with
// one EndpointSlice of eps ready addresses; every tenth service is
// headless, every endpoint of a headless service has a hostname. Events
// are applied directly, as the informers would.
func synthetic(tb testing.TB, nsvc, eps int) *Index {
	tb.Helper()
	ix, err := New(fakeClient(), Config{TTL: 5, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tcp := corev1.ProtocolTCP
	for n := range 100 {
		ix.onNamespace(nil, &namespace{name: fmt.Sprintf("ns%d", n)})
	}
	for i := range nsvc {
		nsName, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
		var s *corev1.Service
		headless := i%10 == 0
		if headless {
			s = headlessSvc(nsName, name, svcPort("http", tcp, 80))
		} else {
			s = clusterIPSvc(nsName, name, []string{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()},
				svcPort("http", tcp, 80), svcPort("metrics", tcp, 9090))
		}
		ix.onService(nil, newService(pbdecode.ServiceOf(s)))
		var list []ep
		for j := range eps {
			k := i*eps + j
			e := ep{ips: []string{netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)}).String()}}
			if headless {
				e.hostname = fmt.Sprintf("%s-%d", name, j)
			}
			list = append(list, e)
		}
		sl := slice(nsName, name+"-abcde", name, discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("http", tcp, 8080)}, list...)
		ix.onSlice(nil, newEndpointSlice(pbdecode.EndpointSliceOf(sl), false))
	}
	ix.synced.Store(true)
	return ix
}

func BenchmarkLookup(b *testing.B) {
	ix := synthetic(b, 10000, 10)
	cases := []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"clusterip-A", "svc1.ns1.svc.cluster.local.", dns.TypeA},
		{"headless-A", "svc10.ns10.svc.cluster.local.", dns.TypeA},
		{"nxdomain-service", "nope.ns1.svc.cluster.local.", dns.TypeA},
		{"nxdomain-searchpath", "example.com.ns1.svc.cluster.local.", dns.TypeA},
		{"nodata-AAAA", "svc1.ns1.svc.cluster.local.", dns.TypeAAAA},
		{"endpoint-hostname-A", "svc10-3.svc10.ns10.svc.cluster.local.", dns.TypeA},
		{"endpoint-ip-A", "10-128-0-15.svc1.ns1.svc.cluster.local.", dns.TypeA},
		{"clusterip-SRV", "svc1.ns1.svc.cluster.local.", dns.TypeSRV},
		{"headless-SRV", "svc10.ns10.svc.cluster.local.", dns.TypeSRV},
		{"port-SRV", "_http._tcp.svc1.ns1.svc.cluster.local.", dns.TypeSRV},
		{"ptr-clusterip", "1.0.96.10.in-addr.arpa.", dns.TypePTR},
		{"ptr-endpoint", "15.0.128.10.in-addr.arpa.", dns.TypePTR},
		{"pod-A", "10-1-2-3.ns1.pod.cluster.local.", dns.TypeA},
		{"external-forward", "example.com.", dns.TypeA},
	}
	for _, c := range cases {
		if r, ok := ix.Lookup(c.qname, c.qtype); c.name != "external-forward" && (!ok || r.Msg == nil) {
			b.Fatalf("%s: no answer", c.name)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ix.Lookup(c.qname, c.qtype)
			}
		})
	}
	b.Run("clusterip-A-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ix.Lookup("svc1.ns1.svc.cluster.local.", dns.TypeA)
			}
		})
	})
}

// TestAllocs pins the hot paths at zero allocations: bare service names,
// the negative answers a search-path walk produces, and (from their second
// query on) endpoint, port, SRV, pod and PTR answers.
func TestAllocs(t *testing.T) {
	ix := synthetic(t, 100, 3)
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"svc1.ns1.svc.cluster.local.", dns.TypeA},
		{"svc1.ns1.svc.cluster.local.", dns.TypeAAAA},
		{"svc10.ns10.svc.cluster.local.", dns.TypeA},
		{"example.com.ns1.svc.cluster.local.", dns.TypeA},
		{"example.com.svc.cluster.local.", dns.TypeA},
		// Assembled once, then kept in the service's records.
		{"svc1.ns1.svc.cluster.local.", dns.TypeSRV},
		{"svc10-1.svc10.ns10.svc.cluster.local.", dns.TypeA},
		{"10-128-0-10.svc3.ns3.svc.cluster.local.", dns.TypeA},
		{"_http._tcp.svc10.ns10.svc.cluster.local.", dns.TypeSRV},
		{"example.com.cluster.local.", dns.TypeA},
		{"nope.svc1.ns1.svc.cluster.local.", dns.TypeA},
		{"10-1-2-3.svc1.ns1.svc.cluster.local.", dns.TypeA},
		// Pod and PTR answers: assembled once, then kept in the memo.
		{"10-1-2-3.ns1.pod.cluster.local.", dns.TypeA},
		{"fd00-1--3.ns1.pod.cluster.local.", dns.TypeAAAA},
		{"1.0.96.10.in-addr.arpa.", dns.TypePTR},
		{"10.0.128.10.in-addr.arpa.", dns.TypePTR},
		{"example.com.", dns.TypeA},
	} {
		if r, ok := ix.Lookup(q.name, q.qtype); q.name != "example.com." && (!ok || r.Msg == nil) {
			t.Fatalf("%s: no answer", q.name)
		}
		if n := testing.AllocsPerRun(100, func() { ix.Lookup(q.name, q.qtype) }); n != 0 {
			t.Errorf("%s %s: %v allocs per lookup", q.name, dns.TypeToString[q.qtype], n)
		}
	}
}

// BenchmarkIndexMemory reports the heap the index holds for 10,000
// services and 100,000 endpoint addresses (informer store contents
// included: the store holds the same stripped objects).
func BenchmarkIndexMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ix := synthetic(b, 10000, 10)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/110000, "B/object")
		runtime.KeepAlive(ix)
	}
}
