package k8s

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/miekg/dns"
)

type lookupCase struct {
	name  string
	qtype uint16
	want  string // format(result), or "forward" for ok=false
}

func runCases(t *testing.T, ix *Index, cases []lookupCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name+"/"+dns.TypeToString[c.qtype], func(t *testing.T) {
			r, ok := ix.Lookup(c.name, c.qtype)
			got := "forward"
			if ok {
				got = format(r)
			}
			want := strings.TrimSpace(c.want)
			if got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

const (
	zone = ".cluster.local."
	web  = "web.ns1.svc.cluster.local."
	hl   = "hl.ns1.svc.cluster.local."
)

func TestLookupServices(t *testing.T) {
	ix, _ := startIndex(t, Config{Zone: "Cluster.Local", TTL: 5}, fixture()...)
	if ix.Zone() != "cluster.local." {
		t.Fatalf("Zone() = %q", ix.Zone())
	}
	runCases(t, ix, []lookupCase{
		// ClusterIP, dual-stack.
		{web, dns.TypeA, "NOERROR aa\nan " + web + " 5 A 10.96.0.10"},
		{web, dns.TypeAAAA, "NOERROR aa\nan " + web + " 5 AAAA fd00:10:96::a"},
		{web, dns.TypeSRV, `NOERROR aa
an ` + web + ` 5 SRV 0 25 80 ` + web + `
an ` + web + ` 5 SRV 0 25 443 ` + web + `
ex ` + web + ` 5 A 10.96.0.10
ex ` + web + ` 5 AAAA fd00:10:96::a`},
		{web, dns.TypeTXT, nodata},
		{web, dns.TypeMX, nodata},
		{web, dns.TypeSOA, nodata},
		{web, dns.TypeNS, nodata},
		{web, dns.TypeCNAME, nodata},
		{web, dns.TypePTR, nodata},
		{web, dns.TypeAXFR, "REFUSED"},
		// IPv4-only: AAAA is NODATA, never NXDOMAIN.
		{"v4only.ns1.svc" + zone, dns.TypeAAAA, nodata},
		{"v4only.ns1.svc" + zone, dns.TypeA, "NOERROR aa\nan v4only.ns1.svc.cluster.local. 5 A 10.96.0.11"},
		// Named ports.
		{"_http._tcp." + web, dns.TypeSRV, `NOERROR aa
an _http._tcp.` + web + ` 5 SRV 0 50 80 ` + web + `
ex ` + web + ` 5 A 10.96.0.10
ex ` + web + ` 5 AAAA fd00:10:96::a`},
		{"_http._tcp." + web, dns.TypeA, "NOERROR aa\nan _http._tcp." + web + " 5 A 10.96.0.10"},
		{"_http._tcp." + web, dns.TypeTXT, nodata},
		{"_http._udp." + web, dns.TypeSRV, nxdomain},
		{"_ftp._tcp." + web, dns.TypeSRV, nxdomain},
		{"_dns._udp.v4only.ns1.svc" + zone, dns.TypeSRV, `NOERROR aa
an _dns._udp.v4only.ns1.svc.cluster.local. 5 SRV 0 100 53 v4only.ns1.svc.cluster.local.
ex v4only.ns1.svc.cluster.local. 5 A 10.96.0.11`},
		{"_dns._udp.v4only.ns1.svc" + zone, dns.TypeAAAA, nodata},
		// "_" matches any port name, as in CoreDNS.
		{"_._tcp.v4only.ns1.svc" + zone, dns.TypeSRV, `NOERROR aa
an _._tcp.v4only.ns1.svc.cluster.local. 5 SRV 0 100 53 v4only.ns1.svc.cluster.local.
ex v4only.ns1.svc.cluster.local. 5 A 10.96.0.11`},
		// SRV on the bare name includes unnamed ports.
		{"nop.ns1.svc" + zone, dns.TypeSRV, `NOERROR aa
an nop.ns1.svc.cluster.local. 5 SRV 0 100 8080 nop.ns1.svc.cluster.local.
ex nop.ns1.svc.cluster.local. 5 A 10.96.0.12`},
		// Endpoint names of a ClusterIP service.
		{"10-244-2-9." + web, dns.TypeA, "NOERROR aa\nan 10-244-2-9." + web + " 5 A 10.244.2.9"},
		{"10-244-2-9." + web, dns.TypeSRV, "NOERROR aa\nan 10-244-2-9." + web + " 5 SRV 0 100 80 10-244-2-9." + web +
			"\nex 10-244-2-9." + web + " 5 A 10.244.2.9"},
		{"10-244-2-8." + web, dns.TypeA, nxdomain},
		// Headless: ready endpoints only (nil counts as ready).
		{hl, dns.TypeA, "NOERROR aa\nan " + hl + " 5 A 10.244.1.5\nan " + hl + " 5 A 10.244.1.6"},
		{hl, dns.TypeAAAA, "NOERROR aa\nan " + hl + " 5 AAAA fd00:244::5"},
		{hl, dns.TypeSRV, `NOERROR aa
an ` + hl + ` 5 SRV 0 33 80 web-0.` + hl + `
an ` + hl + ` 5 SRV 0 33 80 10-244-1-6.` + hl + `
an ` + hl + ` 5 SRV 0 33 80 fd00-244--5.` + hl + `
ex web-0.` + hl + ` 5 A 10.244.1.5
ex 10-244-1-6.` + hl + ` 5 A 10.244.1.6
ex fd00-244--5.` + hl + ` 5 AAAA fd00:244::5`},
		{"_http._tcp." + hl, dns.TypeSRV, `NOERROR aa
an _http._tcp.` + hl + ` 5 SRV 0 33 80 web-0.` + hl + `
an _http._tcp.` + hl + ` 5 SRV 0 33 80 10-244-1-6.` + hl + `
an _http._tcp.` + hl + ` 5 SRV 0 33 80 fd00-244--5.` + hl + `
ex web-0.` + hl + ` 5 A 10.244.1.5
ex 10-244-1-6.` + hl + ` 5 A 10.244.1.6
ex fd00-244--5.` + hl + ` 5 AAAA fd00:244::5`},
		{"_http._tcp." + hl, dns.TypeAAAA, "NOERROR aa\nan _http._tcp." + hl + " 5 AAAA fd00:244::5"},
		{"_https._tcp." + hl, dns.TypeA, nxdomain},
		{"web-0." + hl, dns.TypeA, "NOERROR aa\nan web-0." + hl + " 5 A 10.244.1.5"},
		{"web-0." + hl, dns.TypeAAAA, nodata},
		{"web-0." + hl, dns.TypeSRV, "NOERROR aa\nan web-0." + hl + " 5 SRV 0 100 80 web-0." + hl + "\nex web-0." + hl + " 5 A 10.244.1.5"},
		{"10-244-1-6." + hl, dns.TypeA, "NOERROR aa\nan 10-244-1-6." + hl + " 5 A 10.244.1.6"},
		{"fd00-244--5." + hl, dns.TypeAAAA, "NOERROR aa\nan fd00-244--5." + hl + " 5 AAAA fd00:244::5"},
		{"fd00-244-0-0-0-0-0-5." + hl, dns.TypeAAAA, nxdomain}, // not the canonical label
		{"10-244-1-5." + hl, dns.TypeA, nxdomain},              // has a hostname
		{"10-244-1-7." + hl, dns.TypeA, nxdomain},              // not ready
		{"web-1." + hl, dns.TypeA, nxdomain},
		{"hl-empty.ns1.svc" + zone, dns.TypeA, nxdomain},
		{"hl-empty.ns1.svc" + zone, dns.TypeTXT, nxdomain},
		{"hl-noport.ns1.svc" + zone, dns.TypeA, "NOERROR aa\nan hl-noport.ns1.svc.cluster.local. 5 A 10.244.4.1"},
		{"hl-noport.ns1.svc" + zone, dns.TypeSRV, nodata},
		// ExternalName.
		{"ext.ns1.svc" + zone, dns.TypeA, "NOERROR aa ext=example.com.\nan ext.ns1.svc.cluster.local. 5 CNAME example.com."},
		{"ext.ns1.svc" + zone, dns.TypeAAAA, "NOERROR aa ext=example.com.\nan ext.ns1.svc.cluster.local. 5 CNAME example.com."},
		{"ext.ns1.svc" + zone, dns.TypeCNAME, "NOERROR aa\nan ext.ns1.svc.cluster.local. 5 CNAME example.com."},
		{"ext.ns1.svc" + zone, dns.TypeSRV, nodata},
		{"ext.ns1.svc" + zone, dns.TypeTXT, nodata},
		{"_http._tcp.ext.ns1.svc" + zone, dns.TypeSRV, nxdomain},
		{"foo.ext.ns1.svc" + zone, dns.TypeA, nxdomain},
		{"ext-in.ns1.svc" + zone, dns.TypeA, "NOERROR aa\nan ext-in.ns1.svc.cluster.local. 5 CNAME " + web + "\nan " + web + " 5 A 10.96.0.10"},
		{"ext-in.ns1.svc" + zone, dns.TypeAAAA, "NOERROR aa\nan ext-in.ns1.svc.cluster.local. 5 CNAME " + web + "\nan " + web + " 5 AAAA fd00:10:96::a"},
		{"ext-chain.ns1.svc" + zone, dns.TypeA, "NOERROR aa ext=example.com.\nan ext-chain.ns1.svc.cluster.local. 5 CNAME ext.ns1.svc.cluster.local.\nan ext.ns1.svc.cluster.local. 5 CNAME example.com."},
		{"ext-ip.ns1.svc" + zone, dns.TypeA, nxdomain},
		{"ext-self.ns1.svc" + zone, dns.TypeA, nodata},
		{"ext-missing.ns1.svc" + zone, dns.TypeA, nodata},
		{"loop-a.ns1.svc" + zone, dns.TypeA, nodata},
		// Namespaces.
		{"ns1.svc" + zone, dns.TypeA, nodata},
		{"ns1.svc" + zone, dns.TypeTXT, nodata},
		{"nsx.svc" + zone, dns.TypeA, nxdomain},
		{"web.nsx.svc" + zone, dns.TypeA, nxdomain},
		{"missing.ns1.svc" + zone, dns.TypeA, nxdomain},
		{"missing.ns1.svc" + zone, dns.TypeMX, nxdomain},
		{"missing.ns1.svc" + zone, dns.TypeSOA, nodata}, // CoreDNS: SOA below the apex is NODATA
		// Apex and the special names.
		{"cluster.local.", dns.TypeSOA, "NOERROR aa\nan " + soaLine},
		{"cluster.local.", dns.TypeNS, "NOERROR aa\nan cluster.local. 5 NS kube-dns.kube-system.svc.cluster.local.\nex kube-dns.kube-system.svc.cluster.local. 5 A 10.96.0.53"},
		{"cluster.local.", dns.TypeA, nodata},
		{"cluster.local.", dns.TypeTXT, nodata},
		{"cluster.local.", dns.TypeAXFR, "REFUSED"},
		{"cluster.local.", dns.TypeIXFR, "REFUSED"},
		{"ns.dns.cluster.local.", dns.TypeA, "NOERROR aa\nan ns.dns.cluster.local. 5 A 10.96.0.53"},
		{"ns.dns.cluster.local.", dns.TypeAAAA, nodata},
		{"dns-version.cluster.local.", dns.TypeTXT, "NOERROR aa\nan dns-version.cluster.local. 28800 TXT \"1.1.0\""},
		{"dns-version.cluster.local.", dns.TypeA, nodata},
		{"svc.cluster.local.", dns.TypeA, nodata},
		{"pod.cluster.local.", dns.TypeA, nodata},
		{"foo.cluster.local.", dns.TypeA, nxdomain},
		{"foo.bar.cluster.local.", dns.TypeA, nxdomain},
		{"a.b.c.d.e.f.svc.cluster.local.", dns.TypeA, nxdomain},
		{"x.y." + web, dns.TypeA, nxdomain},
		// Reverse: known addresses only, PTR only.
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 10.0.96.10.in-addr.arpa. 5 PTR " + web},
		{reverse6("fd00:10:96::a"), dns.TypePTR, "NOERROR aa\nan " + reverse6("fd00:10:96::a") + " 5 PTR " + web},
		{"5.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 5.1.244.10.in-addr.arpa. 5 PTR web-0." + hl},
		{"6.1.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 6.1.244.10.in-addr.arpa. 5 PTR 10-244-1-6." + hl},
		{reverse6("fd00:244::5"), dns.TypePTR, "NOERROR aa\nan " + reverse6("fd00:244::5") + " 5 PTR fd00-244--5." + hl},
		{"9.9.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR aa\nan 9.9.244.10.in-addr.arpa. 5 PTR 10-244-9-9.orphan.ns1.svc.cluster.local."},
		{"7.1.244.10.in-addr.arpa.", dns.TypePTR, "forward"}, // not ready
		{"1.1.1.1.in-addr.arpa.", dns.TypePTR, "forward"},
		{"10.0.96.10.in-addr.arpa.", dns.TypeA, "forward"},
		{"96.10.in-addr.arpa.", dns.TypePTR, "forward"},
		{"010.0.96.10.in-addr.arpa.", dns.TypePTR, "forward"},
		// Outside the zone.
		{"example.com.", dns.TypeA, "forward"},
		{"local.", dns.TypeA, "forward"},
		{"xcluster.local.", dns.TypeA, "forward"},
	})
}

func reverse6(s string) string {
	name, err := dns.ReverseAddr(s)
	if err != nil {
		panic(err)
	}
	return name
}

func TestLookupPods(t *testing.T) {
	objs := []runtimeObject{ns("ns1")}
	pods := []runtimeObject{
		testPod("ns1", "a", "node-1", testNow, "10.244.1.5", "fd00:244::5"),
		testPod("ns2", "b", "node-2", testNow, "10.244.2.5"),
	}
	cases := map[PodMode][]lookupCase{
		PodsInsecure: {
			{"10-244-1-5.ns1.pod" + zone, dns.TypeA, "NOERROR aa\nan 10-244-1-5.ns1.pod.cluster.local. 5 A 10.244.1.5"},
			{"10-244-1-5.ns1.pod" + zone, dns.TypeAAAA, nodata},
			{"1-2-3-4.ns1.pod" + zone, dns.TypeA, "NOERROR aa\nan 1-2-3-4.ns1.pod.cluster.local. 5 A 1.2.3.4"},
			{"fd00-244--5.ns1.pod" + zone, dns.TypeAAAA, "NOERROR aa\nan fd00-244--5.ns1.pod.cluster.local. 5 AAAA fd00:244::5"},
			{"fd00-244--5.ns1.pod" + zone, dns.TypeA, nodata},
			{"10-244-1-5.nsx.pod" + zone, dns.TypeA, nxdomain},
			{"foo.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"1-2-3-256.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"1-2-03-4.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"1-2--4.ns1.pod" + zone, dns.TypeAAAA, "NOERROR aa\nan 1-2--4.ns1.pod.cluster.local. 5 AAAA 1:2::4"},
			{"fd00-1.ns1.pod" + zone, dns.TypeAAAA, nxdomain},
			{"1-2-3-4-.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"x.10-244-1-5.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"ns1.pod" + zone, dns.TypeA, nodata},
			{"nsx.pod" + zone, dns.TypeA, nxdomain},
		},
		PodsDisabled: {
			{"10-244-1-5.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"ns1.pod" + zone, dns.TypeA, nxdomain},
			{"pod" + zone, dns.TypeA, nodata},
		},
		PodsVerified: {
			{"10-244-1-5.ns1.pod" + zone, dns.TypeA, "NOERROR aa\nan 10-244-1-5.ns1.pod.cluster.local. 5 A 10.244.1.5"},
			{"fd00-244--5.ns1.pod" + zone, dns.TypeAAAA, "NOERROR aa\nan fd00-244--5.ns1.pod.cluster.local. 5 AAAA fd00:244::5"},
			{"1-2-3-4.ns1.pod" + zone, dns.TypeA, nxdomain},
			{"10-244-2-5.ns1.pod" + zone, dns.TypeA, nxdomain}, // pod is in ns2
			{"ns1.pod" + zone, dns.TypeA, nodata},
		},
	}
	for mode, cs := range cases {
		t.Run(string(mode), func(t *testing.T) {
			ix, _ := startIndex(t, Config{TTL: 5, Pods: mode, NodeName: "node-1"}, append(objs, pods...)...)
			runCases(t, ix, cs)
		})
	}
}

func TestLookupNotSynced(t *testing.T) {
	ix, err := New(fakeClient(), Config{TTL: 5, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r, ok := ix.Lookup(web, dns.TypeA)
	if !ok || !r.NotSynced || r.Msg.Rcode != dns.RcodeServerFailure {
		t.Errorf("before sync: ok=%v %s", ok, format(r))
	}
	if _, ok := ix.Lookup("10.0.96.10.in-addr.arpa.", dns.TypePTR); ok {
		t.Errorf("reverse name answered before sync")
	}
	if _, ok := ix.Lookup("example.com.", dns.TypeA); ok {
		t.Errorf("external name claimed before sync")
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // substring of the error, "" for none
	}{
		{Config{}, ""},
		{Config{Zone: "cluster.local.", TTL: 3600, Pods: PodsVerified}, ""},
		{Config{TTL: 3601}, "ttl 3601"},
		{Config{Pods: "sometimes"}, `"sometimes"`},
		{Config{Zone: "."}, `zone "."`},
		{Config{Zone: "a..b"}, `zone "a..b"`},
		{Config{DNSService: "kube-dns"}, `"kube-dns"`},
	} {
		_, err := New(fakeClient(), c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want it to mention %s", c.cfg, err, c.want)
		}
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Errorf("nil client accepted")
	}
}

func TestDashIP(t *testing.T) {
	for ip, want := range map[string]string{
		"10.244.1.5": "10-244-1-5", "fd00::": "fd00--0", "::1": "--1", "fd00:244::5": "fd00-244--5",
	} {
		a := mustAddr(ip)
		if got := dashIP(a); got != want {
			t.Errorf("dashIP(%s) = %s, want %s", ip, got, want)
		}
		if back, ok := parseDashIP(want); !ok || back != a {
			t.Errorf("parseDashIP(%s) = %v %v", want, back, ok)
		}
	}
}

// TestNameNotRetained passes the query name in a buffer that is then
// overwritten, as the server does, and checks the kept answers are intact.
func TestNameNotRetained(t *testing.T) {
	ix, _ := startIndex(t, Config{TTL: 5}, fixture()...)
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"web-0." + hl, dns.TypeA},
		{"_http._tcp." + hl, dns.TypeSRV},
		{hl, dns.TypeSRV},
		{"10-244-2-9." + web, dns.TypeSRV},
		{"5.1.244.10.in-addr.arpa.", dns.TypePTR},
		{"10-1-2-3.ns1.pod.cluster.local.", dns.TypeA},
	} {
		buf := []byte(q.name)
		name := unsafe.String(&buf[0], len(buf))
		r1, _ := ix.Lookup(name, q.qtype)
		want := format(r1)
		for i := range buf {
			buf[i] = 'x'
		}
		if got := format(r1); got != want {
			t.Errorf("%s: answer changed with the caller's buffer:\n%s", q.name, got)
		}
		r2, _ := ix.Lookup(q.name, q.qtype)
		if got := format(r2); got != want {
			t.Errorf("%s: second answer\n%s\nwant\n%s", q.name, got, want)
		}
		if q.qtype != dns.TypePTR && !strings.Contains(q.name, ".pod.") && r1.Msg != r2.Msg {
			t.Errorf("%s: assembled answer not kept", q.name)
		}
	}
}
