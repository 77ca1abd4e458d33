package metrics

import (
	"context"
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// gather returns r's metric families by name.
func gather(t *testing.T, r *Recorder) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// labelsOf renders a metric's labels as k=v,k=v (sorted by name).
func labelsOf(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// series maps rendered labels to the metric for one family.
func series(t *testing.T, mfs map[string]*dto.MetricFamily, name string) map[string]*dto.Metric {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("%s not exported", name)
	}
	out := map[string]*dto.Metric{}
	for _, m := range mf.GetMetric() {
		out[labelsOf(m)] = m
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// wantSeries fails unless name has a series with exactly labels and value.
func wantSeries(t *testing.T, mfs map[string]*dto.MetricFamily, name, labels string, v float64) {
	t.Helper()
	s := series(t, mfs, name)
	m, ok := s[labels]
	if !ok {
		keys := make([]string, 0, len(s))
		for k := range s {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Errorf("%s{%s} not exported; have:\n  %s", name, labels, strings.Join(keys, "\n  "))
		return
	}
	if got := value(m); got != v {
		t.Errorf("%s{%s} = %v, want %v", name, labels, got, v)
	}
}

const (
	srvA = "dns://169.254.20.10:53"
	srvB = "dns://[fd00::10]:53"
)

func compatRecorder(t *testing.T) *Recorder {
	return newRecorder(t, Config{Version: "v9.9.9", Revision: "abc123", Sources: fullSources(),
		Listeners: []string{"169.254.20.10:53", "[fd00::10]:53"},
		Zones:     []string{"cluster.local", "in-addr.arpa.", "ip6.arpa.", "corp.example.", "Cluster.Local."},
		Plugins:   []string{"cache", "forward", "kubernetes"}})
}

// The CoreDNS series carry CoreDNS 1.15's label names and meanings:
// server per listen address, zone by longest configured zone, family 1/2,
// monitored types or "other", plugin by answering stage.
func TestCoreDNSDNSSeries(t *testing.T) {
	r := compatRecorder(t)
	v4, v6 := netip.MustParseAddr("169.254.0.7"), netip.MustParseAddr("fd00::7")
	obs := func(src stage.Source, rcode int, name string, qtype uint16, proto string, client netip.Addr, listener int, do bool) {
		r.Observe(pipeline.Event{Source: src, Rcode: rcode, Proto: proto, Client: client, Name: name, Qtype: qtype,
			Duration: 3 * time.Millisecond, Listener: listener, RequestSize: 40, ResponseSize: 120, DO: do})
	}
	obs(stage.SourceCluster, dns.RcodeSuccess, "web.team-a.svc.cluster.local.", dns.TypeA, "udp", v4, 0, false)
	obs(stage.SourceCluster, dns.RcodeNameError, "nope.team-a.svc.cluster.local.", dns.TypeAAAA, "tcp", v6, 1, true)
	obs(stage.SourceCluster, dns.RcodeSuccess, "10.0.96.10.in-addr.arpa.", dns.TypePTR, "udp", v4, 0, false)
	obs(stage.SourceCache, dns.RcodeSuccess, "www.example.com.", dns.TypeA, "udp", v4, 0, false)
	obs(stage.SourceStale, dns.RcodeSuccess, "www.example.com.", dns.TypeA, "udp", v4, 0, false)
	obs(stage.SourceUpstream, dns.RcodeServerFailure, "host.corp.example.", dns.TypeMX, "udp", v4, 0, false)
	obs(stage.SourceLocal, dns.RcodeFormatError, "", 0, "udp", v4, 0, false)
	obs(stage.SourceUpstream, dns.RcodeSuccess, "x.example.com.", dns.TypeCAA, "udp", v4, 7, false) // unknown listener: the first
	obs(stage.SourceLocal, dns.RcodeBadVers, "y.example.com.", dns.TypeA, "udp", v4, 0, false)
	mfs := gather(t, r)

	req := "coredns_dns_requests_total"
	wantSeries(t, mfs, req, "family=1,proto=udp,server="+srvA+",type=A,view=,zone=cluster.local.", 1)
	wantSeries(t, mfs, req, "family=2,proto=tcp,server="+srvB+",type=AAAA,view=,zone=cluster.local.", 1)
	wantSeries(t, mfs, req, "family=1,proto=udp,server="+srvA+",type=PTR,view=,zone=in-addr.arpa.", 1)
	wantSeries(t, mfs, req, "family=1,proto=udp,server="+srvA+",type=A,view=,zone=.", 3)
	wantSeries(t, mfs, req, "family=1,proto=udp,server="+srvA+",type=MX,view=,zone=corp.example.", 1)
	wantSeries(t, mfs, req, "family=1,proto=udp,server="+srvA+",type=other,view=,zone=.", 2)

	resp := "coredns_dns_responses_total"
	wantSeries(t, mfs, resp, "plugin=kubernetes,rcode=NOERROR,server="+srvA+",view=,zone=cluster.local.", 1)
	wantSeries(t, mfs, resp, "plugin=kubernetes,rcode=NXDOMAIN,server="+srvB+",view=,zone=cluster.local.", 1)
	wantSeries(t, mfs, resp, "plugin=cache,rcode=NOERROR,server="+srvA+",view=,zone=.", 2) // hit and stale
	wantSeries(t, mfs, resp, "plugin=forward,rcode=SERVFAIL,server="+srvA+",view=,zone=corp.example.", 1)
	wantSeries(t, mfs, resp, "plugin=,rcode=FORMERR,server="+srvA+",view=,zone=.", 1)
	// miekg/dns names rcode 16 BADSIG, so CoreDNS does.
	wantSeries(t, mfs, resp, "plugin=,rcode=BADSIG,server="+srvA+",view=,zone=.", 1)

	wantSeries(t, mfs, "coredns_dns_do_requests_total", "server="+srvB+",view=,zone=cluster.local.", 1)
	wantSeries(t, mfs, "coredns_dns_request_duration_seconds", "server="+srvA+",view=,zone=.", 5)
	wantSeries(t, mfs, "coredns_dns_request_size_bytes", "proto=tcp,server="+srvB+",view=,zone=cluster.local.", 1)
	wantSeries(t, mfs, "coredns_dns_response_size_bytes", "proto=udp,server="+srvA+",view=,zone=.", 5)

	// The duration histogram has CoreDNS's buckets; 3 ms is in le=0.004.
	h := series(t, mfs, "coredns_dns_request_duration_seconds")["server="+srvA+",view=,zone=cluster.local."].GetHistogram()
	var bounds []float64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		if b.GetUpperBound() == 0.002 && b.GetCumulativeCount() != 0 || b.GetUpperBound() == 0.004 && b.GetCumulativeCount() != 1 {
			t.Errorf("bucket le=%v holds %d", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	if !slices.Equal(bounds, prometheus.ExponentialBuckets(0.00025, 2, 16)) {
		t.Errorf("duration buckets %v, want CoreDNS's", bounds)
	}
	if h.GetSampleSum() != 0.003 {
		t.Errorf("duration sum %v", h.GetSampleSum())
	}
	sz := series(t, mfs, "coredns_dns_response_size_bytes")["proto=udp,server="+srvA+",view=,zone=cluster.local."].GetHistogram()
	for _, b := range sz.GetBucket() {
		if b.GetUpperBound() == 100 && b.GetCumulativeCount() != 0 || b.GetUpperBound() == 200 && b.GetCumulativeCount() != 1 {
			t.Errorf("size bucket le=%v holds %d", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
}

func TestCoreDNSOtherSeries(t *testing.T) {
	r := compatRecorder(t)
	a := ev(stage.SourceAutopath, dns.RcodeSuccess, "svc.ns.svc.cluster.local.")
	a.AutopathSteps, a.AutopathSaved = 2, 1
	r.Observe(a)
	mfs := gather(t, r)

	wantSeries(t, mfs, "coredns_build_info", "goversion="+runtime.Version()+",revision=abc123,version=v9.9.9", 1)
	wantSeries(t, mfs, "coredns_panics_total", "", 1)
	wantSeries(t, mfs, "coredns_plugin_enabled", "name=kubernetes,server="+srvA+",view=,zone=.", 1)
	wantSeries(t, mfs, "coredns_reload_failed_total", "", 2)
	wantSeries(t, mfs, "coredns_autopath_success_total", "server="+srvA, 1)
	for typ, v := range map[string]float64{"iptables": 0, "iptables_lock": 3, "interface_add": 0, "interface_check": 0, "configmap": 2} {
		wantSeries(t, mfs, "coredns_nodecache_setup_errors_total", "errortype="+typ, v)
	}

	cache := "server=" + srvA + ",type=%s,view=,zones=."
	wantSeries(t, mfs, "coredns_cache_entries", strings.Replace(cache, "%s", "success", 1), 100)
	wantSeries(t, mfs, "coredns_cache_entries", strings.Replace(cache, "%s", "denial", 1), 20)
	wantSeries(t, mfs, "coredns_cache_hits_total", strings.Replace(cache, "%s", "success", 1), 810)
	wantSeries(t, mfs, "coredns_cache_hits_total", strings.Replace(cache, "%s", "denial", 1), 90)
	wantSeries(t, mfs, "coredns_cache_evictions_total", strings.Replace(cache, "%s", "denial", 1), 1)
	wantSeries(t, mfs, "coredns_cache_misses_total", "server="+srvA+",view=,zones=.", 100)
	wantSeries(t, mfs, "coredns_cache_requests_total", "server="+srvA+",view=,zones=.", 1000)
	wantSeries(t, mfs, "coredns_cache_served_stale_total", "server="+srvA+",view=,zones=.", 3)
	wantSeries(t, mfs, "coredns_cache_prefetch_total", "server="+srvA+",view=,zones=.", 11)

	up := "169.254.0.53:53"
	wantSeries(t, mfs, "coredns_forward_requests_total", "to="+up, 100)
	wantSeries(t, mfs, "coredns_forward_requests_total", "to=[fd00::53]:53", 0)
	wantSeries(t, mfs, "coredns_forward_responses_total", "rcode=NOERROR,to="+up, 98)
	wantSeries(t, mfs, "coredns_forward_responses_total", "rcode=NXDOMAIN,to="+up, 2)
	wantSeries(t, mfs, "coredns_forward_request_duration_seconds", "rcode=NOERROR,to="+up, 98)
	wantSeries(t, mfs, "coredns_proxy_request_duration_seconds", "proxy_name=forward,rcode=NXDOMAIN,to="+up, 2)
	wantSeries(t, mfs, "coredns_forward_healthcheck_failures_total", "to=[fd00::53]:53", 5)
	wantSeries(t, mfs, "coredns_proxy_healthcheck_failures_total", "proxy_name=forward,to=[fd00::53]:53", 5)
	wantSeries(t, mfs, "coredns_forward_healthcheck_broken_total", "", 14)
	wantSeries(t, mfs, "coredns_forward_max_concurrent_rejects_total", "", 13)
	if n := len(series(t, mfs, "coredns_forward_requests_total")); n != 2 {
		t.Errorf("%d forward_requests_total series for 2 distinct upstreams", n)
	}
}

// coredns_dns64_requests_translated_total: CoreDNS's name and its one
// label, server; absent until the first translation (CoreDNS's vector has
// no series before), then the sum of the events' translations.
func TestCoreDNSDNS64Translated(t *testing.T) {
	r := compatRecorder(t)
	r.Observe(ev(stage.SourceCluster, dns.RcodeSuccess, "web.team-a.svc.cluster.local."))
	if _, ok := gather(t, r)["coredns_dns64_requests_translated_total"]; ok {
		t.Error("coredns_dns64_requests_translated_total exported before any translation")
	}
	a := ev(stage.SourceCluster, dns.RcodeSuccess, "web.team-a.svc.cluster.local.")
	a.Qtype, a.DNS64Translated = dns.TypeAAAA, 1
	r.Observe(a)
	a.DNS64Translated = 2 // a reply and its CNAME target's
	r.Observe(a)
	wantSeries(t, gather(t, r), "coredns_dns64_requests_translated_total", "server="+srvA, 3)
}

// Zones: the longest wins, a name equal to a zone is in it, a label
// boundary is needed, and a zone dropped by a reload keeps its counters
// when it comes back (counters never go backwards).
func TestCoreDNSZones(t *testing.T) {
	r := newRecorder(t, Config{Zones: []string{"example.", "corp.example."}})
	c := r.compat
	for name, want := range map[string]string{
		"a.corp.example.": "corp.example.", "corp.example.": "corp.example.", "xcorp.example.": "example.",
		"example.": "example.", "a.b.example.": "example.", "example.org.": ".", "": ".", ".": ".",
	} {
		if got := c.table.Load().match(name).zone; got != want {
			t.Errorf("zone of %q = %q, want %q", name, got, want)
		}
	}
	r.Observe(ev(stage.SourceUpstream, 0, "a.corp.example."))
	r.SetZones([]string{"example."})
	r.Observe(ev(stage.SourceUpstream, 0, "a.corp.example."))
	r.SetZones([]string{"example.", "corp.example."})
	r.Observe(ev(stage.SourceUpstream, 0, "a.corp.example."))
	mfs := gather(t, r)
	wantSeries(t, mfs, "coredns_dns_requests_total", "family=2,proto=udp,server=dns://:53,type=A,view=,zone=corp.example.", 2)
	wantSeries(t, mfs, "coredns_dns_requests_total", "family=2,proto=udp,server=dns://:53,type=A,view=,zone=example.", 1)

	// Bounded: zones past maxZones count under their parent.
	var many []string
	for i := range 2 * maxZones {
		many = append(many, "z"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"."+string(rune('a'+i/26))+".example.")
	}
	r.SetZones(append(many, "example."))
	if n := len(c.sets); n > maxZones {
		t.Errorf("%d zone sets kept, bound %d", n, maxZones)
	}
}

// --metrics-compat=none: nodedns_* only.
func TestCompatNone(t *testing.T) {
	r := newRecorder(t, Config{Compat: CompatNone, Sources: fullSources(), Zones: []string{"cluster.local."}})
	r.Observe(ev(stage.SourceCache, 0, "a.example."))
	r.SetZones([]string{"x."})
	for name := range gather(t, r) {
		if strings.HasPrefix(name, "coredns_") {
			t.Errorf("%s exported with compat none", name)
		}
	}
	if _, err := New(Config{Compat: "kube-dns"}); err == nil {
		t.Error("unknown compat accepted")
	}
}

// The CoreDNS collector is consistent under a pedantic registry (every
// metric described, one type per name, labels as described).
func TestCoreDNSCollectorConsistent(t *testing.T) {
	r := compatRecorder(t)
	r.Observe(ev(stage.SourceStale, dns.RcodeSuccess, "a.example."))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newCorednsCollector(r, r.compat)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
}

// Observe with the CoreDNS series on allocates nothing, whatever the
// zone, listener and protocol.
func TestObserveAllocsCompat(t *testing.T) {
	r := compatRecorder(t)
	e := pipeline.Event{Source: stage.SourceCluster, Rcode: 0, Proto: "tcp", Client: netip.MustParseAddr("fd00::1"),
		Name: "web.team-a.svc.cluster.local.", Qtype: dns.TypeSRV, Duration: time.Millisecond, Listener: 1,
		RequestSize: 60, ResponseSize: 300, DO: true}
	r.Observe(e)
	if n := testing.AllocsPerRun(1000, func() { r.Observe(e) }); n != 0 {
		t.Errorf("Observe allocates %g times per call, want 0", n)
	}
}

// BenchmarkObserveNoCompat is BenchmarkObserveCoarse without the CoreDNS
// series: the difference is what they cost per query.
func BenchmarkObserveNoCompat(b *testing.B) {
	r := newRecorder(b, Config{Compat: CompatNone})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	for r.coarse.Load() == 0 {
		runtime.Gosched()
	}
	e := ev(stage.SourceCache, 0, "www.example.com.")
	b.ReportAllocs()
	for b.Loop() {
		r.Observe(e)
	}
}

// BenchmarkObserveCompatZones is Observe with the CoreDNS series and the
// zones a node-local setup has (cluster domain, reverse zones, two stub
// domains) for an external name, which is matched against all of them.
func BenchmarkObserveCompatZones(b *testing.B) {
	r := newRecorder(b, Config{Listeners: []string{"169.254.20.10:53", "10.96.0.10:53"},
		Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa.", "corp.example.", "consul."}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	for r.coarse.Load() == 0 {
		runtime.Gosched()
	}
	e := ev(stage.SourceCache, 0, "www.example.com.")
	e.RequestSize, e.ResponseSize = 40, 120
	b.ReportAllocs()
	for b.Loop() {
		r.Observe(e)
	}
}
