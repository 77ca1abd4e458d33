package main

import (
	"fmt"
	"strings"
)

// The Services of the cluster workloads: nsvc of them, in nsCount
// namespaces bench-N (consecutive blocks, so that every namespace gets
// headless ones), every 50th headless with an EndpointSlice of 3 ready
// endpoints, the others with a ClusterIP set explicitly (so that PTR
// queries can be written without reading the objects back; 10.96.0.x is
// left to the API server's own "kubernetes" Service). The addresses are
// data only: nothing sends a packet to them.

func svcNS(i, nsvc int) string { return fmt.Sprintf("bench-%d", i*nsCount/nsvc) }
func headless(i int) bool      { return i%50 == 49 }
func svcIP(i int) string       { return fmt.Sprintf("10.96.%d.%d", 1+i/250, 1+i%250) }

// svcName is Service i's fully qualified name.
func svcName(i, nsvc int) string {
	return fmt.Sprintf("svc-%d.%s.svc.cluster.local", i, svcNS(i, nsvc))
}

// objects are the API objects of kind ("namespaces", "services" or
// "endpointslices") as "PATH JSON" lines, the form scripts/bench.sh POSTs.
func objects(kind string, nsvc int) ([]string, error) {
	var out []string
	switch kind {
	case "namespaces":
		for i := range nsCount {
			out = append(out, fmt.Sprintf(`/api/v1/namespaces {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bench-%d"}}`, i))
		}
	case "services":
		ports := `[{"name":"http","port":80,"protocol":"TCP"},{"name":"metrics","port":9090,"protocol":"TCP"}]`
		for i := range nsvc {
			ip := svcIP(i)
			if headless(i) {
				ip = "None"
			}
			out = append(out, fmt.Sprintf(`/api/v1/namespaces/%s/services {"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-%d"},"spec":{"clusterIP":"%s","ports":%s}}`,
				svcNS(i, nsvc), i, ip, ports))
		}
	case "endpointslices":
		h := 0
		for i := range nsvc {
			if !headless(i) {
				continue
			}
			eps := make([]string, 0, 3)
			for k := 1; k <= 3; k++ {
				eps = append(eps, fmt.Sprintf(`{"addresses":["10.244.%d.%d"],"conditions":{"ready":true}}`, h/64, h%64*4+k))
			}
			h++
			out = append(out, fmt.Sprintf(`/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices {"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"svc-%d-a","labels":{"kubernetes.io/service-name":"svc-%d"}},"addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],"endpoints":[%s]}`,
				svcNS(i, nsvc), i, i, strings.Join(eps, ",")))
		}
	default:
		return nil, fmt.Errorf("objects: kind %q: want namespaces, services or endpointslices", kind)
	}
	return out, nil
}

// loopbackQueries is a loopback workload's query file, dnsperf's "NAME
// TYPE" lines: hit, 1000 external names x A/AAAA (hits once warm); nx,
// 2000 NXDOMAIN names; cluster, A for every Service, SRV for every 10th
// and every headless one, PTR for the ClusterIP of every 10th.
func loopbackQueries(wl string, nsvc int) []string {
	var q []string
	switch wl {
	case "hit":
		for i := 1; i <= 1000; i++ {
			q = append(q, fmt.Sprintf("host%d.example.test A", i), fmt.Sprintf("host%d.example.test AAAA", i))
		}
	case "nx":
		for i := 1; i <= 2000; i++ {
			q = append(q, fmt.Sprintf("nx%d.example.test A", i))
		}
	case "cluster":
		for i := range nsvc {
			name := svcName(i, nsvc)
			q = append(q, name+" A")
			if headless(i) || i%10 == 0 {
				q = append(q, "_http._tcp."+name+" SRV")
			}
			if !headless(i) && i%10 == 0 {
				var o [4]int
				fmt.Sscanf(svcIP(i), "%d.%d.%d.%d", &o[0], &o[1], &o[2], &o[3]) //nolint:errcheck // svcIP prints four numbers
				q = append(q, fmt.Sprintf("%d.%d.%d.%d.in-addr.arpa PTR", o[3], o[2], o[1], o[0]))
			}
		}
	}
	return q
}

// samples are the lines of a query file every server must answer as
// intended (not, say, from a built-in local zone): the first, the last,
// and the first SRV and PTR lines.
func samples(q []string) []string {
	if len(q) == 0 {
		return nil
	}
	s := []string{q[0], q[len(q)-1]}
	for _, t := range []string{" SRV", " PTR"} {
		for _, l := range q {
			if strings.HasSuffix(l, t) {
				s = append(s, l)
				break
			}
		}
	}
	return s
}

// podNamespace is the namespace of the benchmark's Pod.
const podNamespace = "bench-0"

// podNames are the pod's lookups as an application writes them: 1000
// external names, then the Services of its own namespace by short name
// and the others as <svc>.<ns>.
type podNames struct {
	ext, svc []string
	search   []string // the pod's search list
}

func newPodNames(nsvc int, search []string) podNames {
	p := podNames{search: search}
	for i := 1; i <= 1000; i++ {
		p.ext = append(p.ext, fmt.Sprintf("host%d.example.test", i))
	}
	for i := range nsvc {
		if ns := svcNS(i, nsvc); ns == podNamespace {
			p.svc = append(p.svc, fmt.Sprintf("svc-%d", i))
		} else {
			p.svc = append(p.svc, fmt.Sprintf("svc-%d.%s", i, ns))
		}
	}
	return p
}

// walk is the names the client asks for n, in order, until one exists.
func (p podNames) walk(n string) []string {
	switch {
	case strings.HasPrefix(n, "host"):
		var w []string
		for _, d := range p.search {
			w = append(w, n+"."+d)
		}
		return append(w, n)
	case strings.Contains(n, "."):
		return []string{n + "." + podNamespace + ".svc.cluster.local", n + ".svc.cluster.local"}
	default:
		return []string{n + "." + podNamespace + ".svc.cluster.local"}
	}
}

// first is n's first expansion: what a server that walks the search list
// itself answers.
func first(n string) string { return n + "." + podNamespace + ".svc.cluster.local" }

// both asks A and AAAA of each name.
func both(names []string) []string {
	q := make([]string, 0, 2*len(names))
	for _, n := range names {
		q = append(q, n+" A", n+" AAAA")
	}
	return q
}

// lookups of a pod workload: the names the client looks up.
func (p podNames) lookups(wl string) []string {
	if wl == "pod" {
		return append(append([]string{}, p.ext...), p.svc...)
	}
	return p.ext
}

// queries is the query file of pod workload wl for a server that walks the
// search list itself (walker) or one that gets the client's whole walk.
func (p podNames) queries(wl string, walker bool) []string {
	var names []string
	for _, n := range p.lookups(wl) {
		switch {
		case wl == "pod-hit":
			names = append(names, n)
		case walker:
			names = append(names, first(n))
		default:
			names = append(names, p.walk(n)...)
		}
	}
	return both(names)
}

// otherSvc is the first Service of another namespace, as the pod writes
// it.
func (p podNames) otherSvc() string {
	for _, n := range p.svc {
		if strings.Contains(n, ".") {
			return n
		}
	}
	return ""
}

// walks says whether server s walks the search list itself (autopath):
// it then gets the first expansions.
func walks(s string) bool {
	return s == "nodedns" || s == "nodedns-b" || strings.HasPrefix(s, "nodedns-g") || s == "coredns"
}
