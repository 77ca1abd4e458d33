//go:build integration

package integration

// The CoreDNS-compatible series against CoreDNS 1.15 itself, so that
// dashboards and alerts written for it read nodedns unchanged:
// CoreDNS with NodeLocal DNSCache's Corefile (a cluster.local, a reverse
// and a "." server block, each with cache and forward, bound to one
// address) and nodedns, both forwarding to the same loopback upstream, get
// the same queries (UDP and TCP, A/AAAA/MX/PTR/other types, answers and
// NXDOMAIN, repeated for cache hits, with and without the DO bit). Then:
// every coredns_* family CoreDNS exported exists in nodedns's /metrics with
// the same type and label names (but for families nodedns deliberately
// leaves out, docs/metrics.md), and the figures dashboards aggregate agree:
// requests by zone, proto, family and type; responses by zone and rcode;
// request sizes; cache hits by type, misses and lookups; upstream
// exchanges by upstream and rcode (CoreDNS 1.15 counts those in its proxy
// histogram only; nodedns's forward counters, which the coredns-mixin
// queries, must agree with it).

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// notExportedFamilies are the coredns_* families of CoreDNS's plugins
// whose work nodedns does differently or not at all (docs/metrics.md
// "Not exported").
var notExportedFamilies = []string{"coredns_health_", "coredns_hosts_", "coredns_local_", "coredns_proxy_conn_cache_", "coredns_kubernetes_", "coredns_dns_https_"}

func TestCoreDNSMetricsParity(t *testing.T) {
	coredns := coreDNSBin(t)
	up := dnstest.Start(t, dnstest.Zone(300))
	dir := t.TempDir()
	hc := &http.Client{Timeout: 3 * time.Second}

	// CoreDNS, NodeLocal DNSCache's Corefile without its kube-dns
	// upstream (everything goes to the same upstream as nodedns's).
	cdPort, cdMetrics := agentPorts(t)
	hp, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	block := func(zone, cache, extra string) string {
		return fmt.Sprintf(`%s:%d {
    errors
    cache %s
    reload
    bind 127.0.0.1 ::1
    forward . %s
    prometheus 127.0.0.1:%d
%s}
`, zone, cdPort, cache, up.Addr, cdMetrics, extra)
	}
	corefile := filepath.Join(dir, "Corefile")
	cf := block("cluster.local", "{\n        success 9984 30\n        denial 9984 5\n    }", fmt.Sprintf("    health 127.0.0.1:%d\n", hp[0])) +
		block("in-addr.arpa", "30", "") + block(".", "30", "")
	if err := os.WriteFile(corefile, []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	cdLog := filepath.Join(dir, "coredns.log")
	cd, err := startCPProc("coredns", cdLog, coredns, "-conf", corefile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cd.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("coredns log (last 20 lines):\n%s", tailFile(cdLog, 20))
		}
	})

	ndPort, ndAdmin := agentPorts(t)
	ndAddr := "127.0.0.1:" + strconv.Itoa(ndPort)
	ndLog := filepath.Join(dir, "nodedns.log")
	nd, err := startCPProc("nodedns", ndLog, nodednsBin, "serve", "--listen", ndAddr+",[::1]:"+strconv.Itoa(ndPort), "--upstream", up.Addr,
		"--admin", "127.0.0.1:"+strconv.Itoa(ndAdmin), "--loop-check=false", "--lameduck", "0s", "--prefetch", "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nd.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("nodedns log (last 20 lines):\n%s", tailFile(ndLog, 20))
		}
	})
	cdURL := "http://127.0.0.1:" + strconv.Itoa(cdMetrics) + "/metrics"
	ndURL := "http://127.0.0.1:" + strconv.Itoa(ndAdmin) + "/metrics"
	if err := waitHTTP(cd, hc, cdURL, "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("coredns: %v", err)
	}
	if err := waitHTTP(nd, hc, "http://127.0.0.1:"+strconv.Itoa(ndAdmin)+"/ready", "", 30*time.Second, func([]byte) bool { return true }); err != nil {
		t.Fatalf("nodedns: %v", err)
	}

	// The same queries to both, one at a time, in the same order.
	type query struct {
		name  string
		qtype uint16
		proto string
		do    bool
		v6    bool // sent to ::1
	}
	var queries []query
	for range 2 { // the second round hits the caches
		queries = append(queries,
			query{"www.example.org.", dns.TypeA, "udp", false, false},
			query{"www.example.org.", dns.TypeAAAA, "udp", false, false},
			query{"mail.example.org.", dns.TypeMX, "tcp", false, false},
			query{"nx.example.org.", dns.TypeA, "udp", false, false},
			query{"signed.example.org.", dns.TypeA, "udp", true, false},
			query{"www.example.org.", dns.TypeNAPTR, "udp", false, false},
			query{"nx.cluster.local.", dns.TypeA, "udp", false, false},
			query{"web.default.svc.cluster.local.", dns.TypeA, "tcp", false, false},
			query{"1.2.0.192.in-addr.arpa.", dns.TypePTR, "udp", false, false},
			query{"www.example.org.", dns.TypeA, "udp", false, true},
			query{"v6.example.org.", dns.TypeAAAA, "tcp", false, true},
		)
	}
	for _, port := range []int{cdPort, ndPort} {
		for _, q := range queries {
			addr := "127.0.0.1:" + strconv.Itoa(port)
			if q.v6 {
				addr = "[::1]:" + strconv.Itoa(port)
			}
			m := new(dns.Msg)
			m.SetQuestion(q.name, q.qtype)
			m.SetEdns0(1232, q.do)
			c := &dns.Client{Net: q.proto, Timeout: 3 * time.Second}
			if _, _, err := c.Exchange(m, addr); err != nil {
				t.Fatalf("%s %s %s to %s: %v", q.proto, q.name, dns.TypeToString[q.qtype], addr, err)
			}
		}
	}

	scrape := func(url string) map[string]*dto.MetricFamily {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("parsing %s: %v", url, err)
		}
		return mfs
	}
	cdm, ndm := scrape(cdURL), scrape(ndURL)

	// Families, types and label names.
	var checked []string
	for name, cf := range cdm {
		if !strings.HasPrefix(name, "coredns_") || slices.ContainsFunc(notExportedFamilies, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		checked = append(checked, name)
		nf, ok := ndm[name]
		if !ok {
			t.Errorf("%s: exported by CoreDNS 1.15, not by nodedns", name)
			continue
		}
		if cf.GetType() != nf.GetType() {
			t.Errorf("%s: type %s, CoreDNS's is %s", name, nf.GetType(), cf.GetType())
		}
		if c, n := labelNames(cf), labelNames(nf); c != n && n != "" {
			t.Errorf("%s: labels %s, CoreDNS's are %s", name, n, c)
		}
	}
	sort.Strings(checked)
	t.Logf("CoreDNS families compared: %s", strings.Join(checked, " "))
	for _, must := range []string{"coredns_dns_requests_total", "coredns_dns_responses_total", "coredns_cache_hits_total", "coredns_proxy_request_duration_seconds"} {
		if !slices.Contains(checked, must) {
			t.Errorf("CoreDNS exported no %s: the traffic did not reach it", must)
		}
	}

	// Figures, summed over the labels the two fill differently (server:
	// the port; the cache's zones: one cache in nodedns, one per server
	// block in CoreDNS).
	for _, c := range []struct {
		family string
		by     []string
		field  func(*dto.Metric) float64
	}{
		{"coredns_dns_requests_total", []string{"zone", "proto", "family", "type"}, counterValue},
		{"coredns_dns_responses_total", []string{"zone", "rcode"}, counterValue},
		{"coredns_dns_request_duration_seconds", []string{"zone"}, histCount},
		{"coredns_dns_request_size_bytes", []string{"zone", "proto"}, histCount},
		{"coredns_dns_request_size_bytes", []string{"zone", "proto"}, histSum},
		{"coredns_dns_response_size_bytes", []string{"zone", "proto"}, histCount},
		{"coredns_dns_do_requests_total", []string{"zone"}, counterValue},
		{"coredns_cache_hits_total", []string{"type"}, counterValue},
		{"coredns_cache_misses_total", nil, counterValue},
		{"coredns_cache_requests_total", nil, counterValue},
		{"coredns_proxy_request_duration_seconds", []string{"to", "rcode"}, histCount},
	} {
		want, got := sumBy(cdm[c.family], c.by, c.field), sumBy(ndm[c.family], c.by, c.field)
		if want == "" {
			t.Errorf("%s: CoreDNS counted nothing: the traffic did not reach it", c.family)
		}
		if c.family == "coredns_dns_requests_total" {
			t.Logf("%s by (%s), both: %s", c.family, strings.Join(c.by, ","), got)
		}
		if want != got {
			t.Errorf("%s by (%s):\n nodedns %s\n CoreDNS %s", c.family, strings.Join(c.by, ","), got, want)
		}
	}
	// CoreDNS sets its cache's size gauge when it stores an entry, under
	// the server label of the query that stored it: the latest of a
	// cache's figures is the largest, over the addresses it binds.
	want := sumBy(maxOverServers(cdm["coredns_cache_entries"]), []string{"type"}, counterValue)
	if got := sumBy(ndm["coredns_cache_entries"], []string{"type"}, counterValue); got != want {
		t.Errorf("coredns_cache_entries by (type):\n nodedns %s\n CoreDNS %s", got, want)
	}

	// CoreDNS 1.15 no longer exports coredns_forward_requests_total and
	// coredns_forward_responses_total (1.10 did, and the coredns-mixin
	// still queries them): they count what its proxy histogram counts.
	want = sumBy(cdm["coredns_proxy_request_duration_seconds"], []string{"to", "rcode"}, histCount)
	if got := sumBy(ndm["coredns_forward_responses_total"], []string{"to", "rcode"}, counterValue); got != want {
		t.Errorf("coredns_forward_responses_total by (to,rcode):\n nodedns %s\n CoreDNS's proxy histogram %s", got, want)
	}
	want = sumBy(cdm["coredns_proxy_request_duration_seconds"], []string{"to"}, histCount)
	if got := sumBy(ndm["coredns_forward_requests_total"], []string{"to"}, counterValue); got != want {
		t.Errorf("coredns_forward_requests_total by (to):\n nodedns %s\n CoreDNS's proxy histogram %s", got, want)
	}
}

func labelNames(mf *dto.MetricFamily) string {
	names := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			names[l.GetName()] = true
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() + m.GetGauge().GetValue() }

// maxOverServers keeps, of a gauge's samples that differ only in their
// server label, the largest.
func maxOverServers(mf *dto.MetricFamily) *dto.MetricFamily {
	best := map[string]*dto.Metric{}
	var keys []string
	for _, m := range mf.GetMetric() {
		var key []string
		for _, l := range m.GetLabel() {
			if l.GetName() != "server" {
				key = append(key, l.GetName()+"="+l.GetValue())
			}
		}
		k := strings.Join(key, ",")
		if b, ok := best[k]; !ok || m.GetGauge().GetValue() > b.GetGauge().GetValue() {
			if !ok {
				keys = append(keys, k)
			}
			best[k] = m
		}
	}
	out := &dto.MetricFamily{Name: mf.Name, Type: mf.Type}
	for _, k := range keys {
		out.Metric = append(out.Metric, best[k])
	}
	return out
}

func histCount(m *dto.Metric) float64 { return float64(m.GetHistogram().GetSampleCount()) }
func histSum(m *dto.Metric) float64   { return m.GetHistogram().GetSampleSum() }

// sumBy sums field over mf's samples grouped by the labels by, and
// renders the non-zero groups sorted.
func sumBy(mf *dto.MetricFamily, by []string, field func(*dto.Metric) float64) string {
	sums := map[string]float64{}
	for _, m := range mf.GetMetric() {
		var key []string
		for _, b := range by {
			v := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == b {
					v = l.GetValue()
				}
			}
			key = append(key, b+"="+v)
		}
		sums[strings.Join(key, ",")] += field(m)
	}
	var out []string
	for k, v := range sums {
		if v != 0 {
			out = append(out, fmt.Sprintf("{%s} %g", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
