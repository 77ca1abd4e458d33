package k8s

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const extSOA = "example.org. 5 SOA ns1.dns.example.org. hostmaster.dns.example.org. 1700000000 7200 1800 86400 5"

func extFixture() []runtime.Object {
	tcp := corev1.ProtocolTCP
	lb := clusterIPSvc("ns1", "lb", []string{"fd00:10:96::20"}, svcPort("http", tcp, 80), svcPort("https", tcp, 443))
	lb.Spec.ExternalIPs = []string{"169.254.100.1", "fd00:100::1"}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "169.254.100.2"}, {IP: "169.254.100.1"}}
	host := clusterIPSvc("ns1", "host", []string{"fd00:10:96::21"}, svcPort("http", tcp, 80))
	host.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.Example.COM"}}
	noports := clusterIPSvc("ns1", "noports", []string{"fd00:10:96::22"})
	noports.Spec.ExternalIPs = []string{"169.254.100.3"}
	hl := headlessSvc("ns1", "hl", svcPort("http", tcp, 80))
	return []runtime.Object{ns("ns1"), lb, host, noports, hl,
		clusterIPSvc("ns1", "internal", []string{"fd00:10:96::23"}, svcPort("http", tcp, 80)),
		slice("ns1", "hl-1", "hl", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("http", tcp, 8080)},
			ep{ips: []string{"169.254.30.1"}, hostname: "a"}, ep{ips: []string{"169.254.30.2"}})}
}

// TestExternal pins the k8s_external answers of CoreDNS 1.15 for the
// fixture's Services.
func TestExternal(t *testing.T) {
	ix, _ := startIndex(t, Config{TTL: 7}, extFixture()...)
	x, err := ix.External(ExternalConfig{Zones: []string{"example.org."}, TTL: 5})
	if err != nil {
		t.Fatal(err)
	}
	xh, err := ix.External(ExternalConfig{Zones: []string{"example.org."}, TTL: 5, Headless: true, FallthroughSet: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		x     *External
		name  string
		qtype uint16
		want  string
	}{
		{x, "lb.ns1.example.org.", dns.TypeA, "NOERROR aa\nan lb.ns1.example.org. 5 A 169.254.100.1\nan lb.ns1.example.org. 5 A 169.254.100.2"},
		{x, "lb.ns1.example.org.", dns.TypeAAAA, "NOERROR aa\nan lb.ns1.example.org. 5 AAAA fd00:100::1"},
		{x, "x.lb.ns1.example.org.", dns.TypeA, "NOERROR aa\nan x.lb.ns1.example.org. 5 A 169.254.100.1\nan x.lb.ns1.example.org. 5 A 169.254.100.2"},
		{x, "lb.ns1.example.org.", dns.TypeTXT, "NOERROR aa\nns " + extSOA},
		{x, "_https._tcp.lb.ns1.example.org.", dns.TypeSRV, "NOERROR aa" +
			"\nan _https._tcp.lb.ns1.example.org. 7 SRV 0 25 443 lb.ns1.example.org." +
			"\nex lb.ns1.example.org. 5 A 169.254.100.1\nex lb.ns1.example.org. 5 AAAA fd00:100::1\nex lb.ns1.example.org. 5 A 169.254.100.2"},
		{x, "host.ns1.example.org.", dns.TypeA, "NOERROR aa ext=lb.example.com.\nan host.ns1.example.org. 7 CNAME lb.example.com."},
		{x, "noports.ns1.example.org.", dns.TypeA, "NXDOMAIN aa\nns " + extSOA},
		{x, "internal.ns1.example.org.", dns.TypeA, "NXDOMAIN aa\nns " + extSOA},
		{x, "hl.ns1.example.org.", dns.TypeA, "NXDOMAIN aa\nns " + extSOA},
		{x, "ns1.example.org.", dns.TypeA, "NOERROR aa\nns " + extSOA},
		{x, "nosuch.example.org.", dns.TypeA, "NXDOMAIN aa\nns " + extSOA},
		{x, "a.b.c.d.e.example.org.", dns.TypeA, "NXDOMAIN aa\nns " + extSOA},
		{x, "example.org.", dns.TypeSOA, "NOERROR aa\nan " + extSOA},
		{x, "example.org.", dns.TypeNS, "NOERROR aa\nan example.org. 5 NS ns1.dns.example.org."},
		{x, "example.org.", dns.TypeA, "NOERROR aa\nns " + extSOA},
		{x, "dns.example.org.", dns.TypeA, "NOERROR aa\nns " + extSOA},
		{x, "foo.dns.example.org.", dns.TypeA, "NXDOMAIN aa\nns " + extSOA},
		{xh, "hl.ns1.example.org.", dns.TypeA, "NOERROR aa\nan hl.ns1.example.org. 5 A 169.254.30.1\nan hl.ns1.example.org. 5 A 169.254.30.2"},
		{xh, "a.hl.ns1.example.org.", dns.TypeA, "NOERROR aa\nan a.hl.ns1.example.org. 5 A 169.254.30.1"},
		{xh, "internal.ns1.example.org.", dns.TypeA, "forward"},
	} {
		r, ok := tc.x.Lookup(tc.name, tc.qtype)
		got := "forward"
		if ok {
			got = format(r)
		}
		if got != tc.want {
			t.Errorf("%s %s:\ngot\n%s\nwant\n%s", tc.name, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
	if _, ok := x.Lookup("web.ns1.svc.cluster.local.", dns.TypeA); ok {
		t.Error("a cluster name answered by the external zone")
	}
	if n := testing.AllocsPerRun(100, func() { x.Lookup("web.ns1.svc.cluster.local.", dns.TypeA) }); n != 0 {
		t.Errorf("a name of no external zone: %.0f allocations", n)
	}
}

func TestCheckExternal(t *testing.T) {
	for _, cfg := range []ExternalConfig{{}, {Zones: []string{"example.org"}}, {Zones: []string{"example.org."}, TTL: 3601},
		{Zones: []string{"example.org."}, Apex: "a.b"}} {
		if err := CheckExternal(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestServiceSize: the external addresses cost the many Services without
// them nothing: the stripped Service stays in the 112-byte size class it
// had before them (bench/RESULTS.md, "k8s_external memory").
func TestServiceSize(t *testing.T) {
	if n := unsafe.Sizeof(service{}); n > 112 {
		t.Errorf("service is %d bytes: want at most 112 (a larger size class costs every Service)", n)
	}
}

// TestExternalNameServer: ns1.dns.<zone> and the NS glue are the cluster
// DNS Service's external addresses, or the configured addresses without
// that Service.
func TestExternalNameServer(t *testing.T) {
	kd := clusterIPSvc("kube-system", "kube-dns", []string{"fd00:10:96::a"}, svcPort("dns", corev1.ProtocolUDP, 53))
	kd.Spec.ExternalIPs = []string{"fd00:53::1"}
	with, _ := startIndex(t, Config{TTL: 5}, append(extFixture(), ns("kube-system"), kd)...)
	without, _ := startIndex(t, Config{TTL: 5, NSAddrs: []netip.Addr{netip.MustParseAddr("169.254.20.10")}}, extFixture()...)
	for _, tc := range []struct {
		ix    *Index
		name  string
		qtype uint16
		want  string
	}{
		{with, "example.org.", dns.TypeNS, "NOERROR aa\nan example.org. 5 NS ns1.dns.example.org.\nex ns1.dns.example.org. 5 AAAA fd00:53::1"},
		{with, "ns1.dns.example.org.", dns.TypeAAAA, "NOERROR aa\nan ns1.dns.example.org. 5 AAAA fd00:53::1"},
		{with, "ns1.dns.example.org.", dns.TypeA, "NOERROR aa\nns " + extSOA},
		{without, "example.org.", dns.TypeNS, "NOERROR aa\nan example.org. 5 NS ns1.dns.example.org.\nex ns1.dns.example.org. 5 A 169.254.20.10"},
		{without, "ns1.dns.example.org.", dns.TypeA, "NOERROR aa\nan ns1.dns.example.org. 5 A 169.254.20.10"},
	} {
		x, err := tc.ix.External(ExternalConfig{Zones: []string{"example.org."}, TTL: 5})
		if err != nil {
			t.Fatal(err)
		}
		r, ok := x.Lookup(tc.name, tc.qtype)
		if got := format(r); !ok || got != tc.want {
			t.Errorf("%s %s:\ngot\n%s\nwant\n%s", tc.name, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
}
