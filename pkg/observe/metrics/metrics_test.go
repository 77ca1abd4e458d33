package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
	"github.com/nodedns/nodedns/pkg/observe/hist"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newRecorder(t testing.TB, cfg Config) *Recorder {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var client = netip.MustParseAddr("fd00::7")

func ev(src stage.Source, rcode int, name string) pipeline.Event {
	return pipeline.Event{Source: src, Rcode: rcode, Proto: "udp", Client: client, Name: name,
		Qtype: dns.TypeA, Duration: 300 * time.Microsecond}
}

func TestCountsBySourceAndRcode(t *testing.T) {
	r := newRecorder(t, Config{})
	for range 5 {
		r.Observe(ev(stage.SourceCache, dns.RcodeSuccess, "a.example."))
	}
	for range 3 {
		r.Observe(ev(stage.SourceCluster, dns.RcodeNameError, "x.default.svc.cluster.local."))
	}
	r.Observe(ev(stage.SourceUpstream, dns.RcodeServerFailure, "b.example."))
	r.Observe(ev(stage.SourceLocal, dns.RcodeBadVers, "c.example."))
	r.Observe(ev(stage.SourceLocal, 4000, "d.example."))
	r.Observe(ev("novel", dns.RcodeSuccess, "e.example."))
	a := ev(stage.SourceAutopath, dns.RcodeSuccess, "svc.ns.svc.cluster.local.")
	a.AutopathSteps, a.AutopathSaved = 3, 2
	r.Observe(a)
	a.AutopathSteps, a.AutopathSaved = 1, 0 // first expansion won: walked, nothing saved
	r.Observe(a)

	d := r.Stats()
	want := map[string]map[string]uint64{
		"cache":    {"NOERROR": 5},
		"cluster":  {"NXDOMAIN": 3},
		"upstream": {"SERVFAIL": 1},
		"local":    {"BADVERS": 1, "OTHER": 1},
		"other":    {"NOERROR": 1},
		"autopath": {"NOERROR": 2},
	}
	if !reflect.DeepEqual(d.Answers, want) {
		t.Errorf("answers = %v, want %v", d.Answers, want)
	}
	if d.Total != 14 {
		t.Errorf("total = %d, want 14", d.Total)
	}
	if want := (AutopathStats{Shortcuts: 1, Steps: 4, Saved: 2}); d.Autopath != want {
		t.Errorf("autopath = %+v, want %+v", d.Autopath, want)
	}
}

func TestQPSWindows(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Now: clk.Now})
	// 100 queries a second for 60 seconds, then 10 seconds of 1000/s.
	for range 60 {
		for range 100 {
			r.Observe(ev(stage.SourceCache, 0, "a.example."))
		}
		clk.Advance(time.Second)
	}
	if q := r.Stats().QPS; q.Last10s != 100 || q.Last1m != 100 {
		t.Fatalf("steady 100/s: qps = %+v", q)
	}
	for range 10 {
		for range 1000 {
			r.Observe(ev(stage.SourceCache, 0, "a.example."))
		}
		clk.Advance(time.Second)
	}
	q := r.Stats().QPS
	if q.Last10s != 1000 {
		t.Errorf("last 10s = %g, want 1000", q.Last10s)
	}
	if want := (50*100 + 10*1000) / 60.0; q.Last1m != want {
		t.Errorf("last 1m = %g, want %g", q.Last1m, want)
	}
	// The current second is not counted until it is over.
	for range 500 {
		r.Observe(ev(stage.SourceCache, 0, "a.example."))
	}
	if q := r.Stats().QPS; q.Last10s != 1000 {
		t.Errorf("partial second counted: last 10s = %g", q.Last10s)
	}
	// Silence: the windows empty, and buckets from 64 s ago are not
	// mistaken for the current ones.
	clk.Advance(65 * time.Second)
	if q := r.Stats().QPS; q.Last10s != 0 || q.Last1m != 0 {
		t.Errorf("after silence: qps = %+v", q)
	}
}

func TestQPSYoungRecorder(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Now: clk.Now})
	if q := r.Stats().QPS; q.Last10s != 0 || q.Last1m != 0 {
		t.Fatalf("no time elapsed: qps = %+v", q)
	}
	for range 4 {
		for range 50 {
			r.Observe(ev(stage.SourceCache, 0, "a.example."))
		}
		clk.Advance(time.Second)
	}
	// Four seconds old: the windows average over those four, not 10 or 60.
	if q := r.Stats().QPS; q.Last10s != 50 || q.Last1m != 50 {
		t.Errorf("young recorder: qps = %+v, want 50 both", q)
	}
}

func TestTopKBounded(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Now: clk.Now, TopSample: 1, TopK: 10})
	const distinct = 100000
	for i := range distinct {
		e := ev(stage.SourceCache, 0, fmt.Sprintf("n%d.example.", i))
		e.Client = netip.AddrFrom4([4]byte{169, 254, byte(i >> 8), byte(i)})
		r.Observe(e)
		if i%10 == 0 { // a heavy hitter: 10% of the traffic
			h := ev(stage.SourceCache, 0, "heavy.example.")
			h.Client = netip.MustParseAddr("169.254.99.99")
			r.Observe(h)
		}
		if i%50 == 0 {
			r.Observe(ev(stage.SourceCache, 0, "second.example."))
		}
	}
	if n, limit := len(r.names.items), r.names.size; n > limit || len(r.names.pos) != n {
		t.Fatalf("names table holds %d (index %d), limit %d", n, len(r.names.pos), limit)
	}
	if n := len(r.clients.items); n > r.clients.size {
		t.Fatalf("clients table holds %d, limit %d", n, r.clients.size)
	}
	d := r.Stats()
	if len(d.TopNames) != 10 || len(d.TopClients) != 10 {
		t.Fatalf("top lists: %d names, %d clients; want 10 each", len(d.TopNames), len(d.TopClients))
	}
	if d.TopNames[0].Key != "heavy.example." || d.TopNames[1].Key != "second.example." {
		t.Errorf("top names = %v", d.TopNames[:3])
	}
	if c := d.TopNames[0].Count; c < distinct/10 {
		t.Errorf("heavy hitter counted %d, want at least %d (Space-Saving never under-counts)", c, distinct/10)
	}
	if d.TopClients[0].Key != "169.254.99.99" {
		t.Errorf("top client = %v", d.TopClients[0])
	}
}

func TestTopKSampledAndDecayed(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Now: clk.Now, TopSample: 10}) // rounded up to 16
	if r.cfg.TopSample != 16 {
		t.Fatalf("TopSample = %d, want 16", r.cfg.TopSample)
	}
	for range 1600 {
		r.Observe(ev(stage.SourceCache, 0, "a.example."))
	}
	d := r.Stats()
	if len(d.TopNames) != 1 || d.TopNames[0] != (TopEntry{"a.example.", 1600}) || d.TopSample != 16 {
		t.Fatalf("top names = %v (sample %d), want a.example. 1600", d.TopNames, d.TopSample)
	}
	if len(d.TopClients) != 1 || d.TopClients[0].Key != client.String() {
		t.Fatalf("top clients = %v", d.TopClients)
	}
	clk.Advance(decayPeriod * time.Second)
	if c := r.Stats().TopNames[0].Count; c != 800 {
		t.Errorf("after one period: count %d, want 800", c)
	}
	clk.Advance(20 * decayPeriod * time.Second)
	if n := r.Stats().TopNames; len(n) != 0 {
		t.Errorf("after long silence: top names = %v, want none", n)
	}
}

func TestTopKHeap(t *testing.T) {
	tk := newTopK(4, func(s string) string { return s })
	for i, k := range strings.Split("a b a c d a e b f g a b", " ") {
		tk.add(k, int64(1000+i))
		for j := range tk.items {
			if p := (j - 1) / 2; j > 0 && tk.items[p].count > tk.items[j].count {
				t.Fatalf("heap order broken at %d after %q: %v", j, k, tk.items)
			}
			if tk.pos[tk.items[j].key] != j {
				t.Fatalf("index out of step at %d: %v %v", j, tk.items, tk.pos)
			}
		}
	}
	got := topEntries(tk.snapshot(1011), 2, 1, func(s string) string { return s })
	if got[0].Key != "a" || got[0].Count < 4 || got[1].Key != "b" {
		t.Errorf("top = %v", got)
	}
}

func TestQueryLogSampled(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	r := newRecorder(t, Config{LogQueries: 0.25, Logger: slog.New(slog.NewTextHandler(w, nil))})
	for range 100 {
		r.Observe(ev(stage.SourceUpstream, dns.RcodeNameError, "gone.example."))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 25 {
		t.Fatalf("logged %d of 100 at 0.25:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"component=query", "client=fd00::7", "name=gone.example.", "type=A", "rcode=NXDOMAIN", "source=upstream", "duration=300µs"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %q", lines[0], want)
		}
	}
	buf.Reset()
	quiet := newRecorder(t, Config{Logger: slog.New(slog.NewTextHandler(w, nil))})
	for range 100 {
		quiet.Observe(ev(stage.SourceCache, 0, "a.example."))
	}
	if buf.Len() != 0 {
		t.Errorf("query log off, yet: %s", buf.String())
	}
	if _, err := New(Config{LogQueries: 1.5}); err == nil {
		t.Error("LogQueries 1.5 accepted")
	}

	// A reload changes the fraction of a running Recorder.
	buf.Reset()
	if err := quiet.SetLogQueries(0.5); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		quiet.Observe(ev(stage.SourceCache, 0, "a.example."))
	}
	if n := strings.Count(buf.String(), "\n"); n != 50 {
		t.Errorf("logged %d of 100 after SetLogQueries(0.5)", n)
	}
	if err := quiet.SetLogQueries(-1); err == nil {
		t.Error("SetLogQueries(-1) accepted")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// upstreamLatency is 98 NOERROR replies in 1-2 ms and 2 NXDOMAIN in 30 ms.
func upstreamLatency() map[int]hist.Snapshot {
	var ok, nx hist.Durations
	for range 98 {
		ok.Observe(1500 * time.Microsecond)
	}
	nx.Observe(30 * time.Millisecond)
	nx.Observe(30 * time.Millisecond)
	return map[int]hist.Snapshot{dns.RcodeSuccess: ok.Snapshot(), dns.RcodeNameError: nx.Snapshot()}
}

func fullSources() Sources {
	return Sources{
		Cache: func() cache.Stats {
			return cache.Stats{Entries: 120, Capacity: 10000, Hits: 900, Misses: 100, Evictions: 7, StaleServed: 3, Prefetches: 11,
				Bytes: 30000, MaxBytes: 1 << 25, TooLarge: 6, DenialEntries: 20, DenialHits: 90, DenialEvictions: 1}
		},
		Upstreams: func() []upstream.ServerStats {
			return []upstream.ServerStats{
				{Addr: "169.254.0.53:53", Up: true, Requests: 100, Failures: 2, P50ms: 1.4, P99ms: 22.6, Latency: upstreamLatency()},
				{Addr: "[fd00::53]:53", Up: false, Requests: 9, Failures: 9, LastError: "reading from [fd00::53]:53: i/o timeout", ProbeFailures: 5},
				{Addr: "169.254.0.53:53", Up: true}, // also a stub domain's: reported once
			}
		},
		Server: func() server.Stats {
			return server.Stats{Overloaded: 4, ClientLimited: 8, Panics: 1, InFlight: 2, TCPConns: 3, TCPClientLimited: 15, TCPEvicted: 16,
				UDPReaders: 2, UDPReadersLive: 1, UDPReaderRestarts: 5}
		},
		Forwarder: func() upstream.ForwarderStats {
			return upstream.ForwarderStats{Coalesced: 12, Overloaded: 13, ClientLimited: 17, AllDown: 14}
		},
		ConfigErrors: func() uint64 { return 2 },
		Intercept: func() intercept.Status {
			return intercept.Status{Enabled: true, Link: "nodelocaldns", LinkType: "dummy", IPs: []string{"169.254.20.10"},
				Backend: "nft", RulesPresent: 6, RulesWanted: 6, Repairs: 2,
				LastRepair: time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC), Errors: map[string]uint64{"iptables_lock": 3},
				Fallback: "on", FallbackTargets4: []string{"169.254.211.2:53", "169.254.211.3:53"}, FallbackFlows4: 41, FallbackFlows6: 2}
		},
		Informers: func() k8s.Stats {
			return k8s.Stats{Enabled: true, Synced: true, Objects: map[string]int{"services": 40, "endpointslices": 45, "namespaces": 6, "pods": 12}}
		},
		Peers: func() PeerFigures {
			return PeerFigures{Foreign: []string{"169.254.20.10:53/udp: coredns"}}
		},
		Dnstap: func() []dnstap.Stats {
			return []dnstap.Stats{{Socket: "unix:///run/tap.sock", Connected: true, Sent: 90, Dropped: 7, Lost: 2, Reconnects: 1, QueuedMessages: 3, QueuedBytes: 600}}
		},
	}
}

func TestMetricsHandler(t *testing.T) {
	r := newRecorder(t, Config{Version: "v1.2.3", Sources: fullSources()})
	r.Observe(ev(stage.SourceCache, dns.RcodeSuccess, "a.example."))
	r.Observe(ev(stage.SourceCluster, dns.RcodeNameError, "b.default.svc.cluster.local."))
	a := ev(stage.SourceAutopath, dns.RcodeSuccess, "svc.ns.svc.cluster.local.")
	a.AutopathSteps, a.AutopathSaved = 3, 2
	r.Observe(a)

	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	text := string(body)
	for _, want := range []string{
		`nodedns_build_info{goversion="go`,
		`nodedns_requests_total{rcode="NOERROR",source="cache"} 1`,
		`nodedns_requests_total{rcode="NXDOMAIN",source="cluster"} 1`,
		`nodedns_request_duration_seconds_bucket{source="cache",le="0.00025"} 0`,
		`nodedns_request_duration_seconds_bucket{source="cache",le="0.0005"} 1`,
		`nodedns_request_duration_seconds_count{source="autopath"} 1`,
		`nodedns_cache_entries 120`,
		`nodedns_cache_capacity 10000`,
		`nodedns_cache_hits_total 900`,
		`nodedns_cache_misses_total 100`,
		`nodedns_cache_evictions_total 7`,
		`nodedns_cache_stale_served_total 3`,
		`nodedns_cache_prefetches_total 11`,
		`nodedns_cache_bytes 30000`,
		`nodedns_cache_max_bytes 3.3554432e+07`,
		`nodedns_cache_too_large_total 6`,
		`nodedns_upstream_requests_total{upstream="169.254.0.53:53"} 100`,
		`nodedns_upstream_failures_total{upstream="[fd00::53]:53"} 9`,
		`nodedns_upstream_up{upstream="[fd00::53]:53"} 0`,
		`nodedns_upstream_up{upstream="169.254.0.53:53"} 1`,
		`nodedns_upstream_request_duration_seconds_bucket{rcode="NOERROR",upstream="169.254.0.53:53",le="0.002"} 98`,
		`nodedns_upstream_request_duration_seconds_count{rcode="NXDOMAIN",upstream="169.254.0.53:53"} 2`,
		`nodedns_upstream_probe_failures_total{upstream="[fd00::53]:53"} 5`,
		`nodedns_upstream_coalesced_total 12`,
		`nodedns_upstream_overloaded_total 13`,
		`nodedns_upstream_client_limited_total 17`,
		`nodedns_upstream_all_down_total 14`,
		`nodedns_intercept_errors_total{kind="iptables_lock"} 3`,
		`nodedns_intercept_errors_total{kind="interface_add"} 0`,
		`nodedns_server_client_limited_total 8`,
		`nodedns_server_tcp_client_limited_total 15`,
		`nodedns_server_tcp_evicted_total 16`,
		`nodedns_autopath_shortcuts_total 1`,
		`nodedns_autopath_steps_total 3`,
		`nodedns_autopath_queries_saved_total 2`,
		`nodedns_intercept_enabled 1`,
		`nodedns_intercept_repairs_total 2`,
		`nodedns_intercept_rules_present 6`,
		`nodedns_intercept_rules_wanted 6`,
		`nodedns_intercept_fallback_state{state="on"} 1`,
		`nodedns_intercept_fallback_state{state="waiting"} 0`,
		`nodedns_intercept_fallback_state{state="off"} 0`,
		`nodedns_intercept_fallback_state{state="unavailable"} 0`,
		`nodedns_intercept_fallback_targets{family="ipv4"} 2`,
		`nodedns_intercept_fallback_targets{family="ipv6"} 0`,
		`nodedns_intercept_fallback_flows_total{family="ipv4"} 41`,
		`nodedns_intercept_fallback_flows_total{family="ipv6"} 2`,
		`nodedns_informer_synced 1`,
		`nodedns_informer_objects{kind="services"} 40`,
		`nodedns_server_overloaded_total 4`,
		`nodedns_server_panics_total 1`,
		`nodedns_server_udp_readers 2`,
		`nodedns_server_udp_readers_live 1`,
		`nodedns_server_udp_reader_restarts_total 5`,
		`nodedns_peer_servers{kind="foreign"} 1`,
		`nodedns_peer_servers{kind="nodedns"} 0`,
		`nodedns_dnstap_connected{socket="unix:///run/tap.sock"} 1`,
		`nodedns_dnstap_sent_total{socket="unix:///run/tap.sock"} 90`,
		`nodedns_dnstap_dropped_total{socket="unix:///run/tap.sock"} 7`,
		`nodedns_dnstap_lost_total{socket="unix:///run/tap.sock"} 2`,
		`nodedns_dnstap_reconnects_total{socket="unix:///run/tap.sock"} 1`,
		`nodedns_dnstap_queued_messages{socket="unix:///run/tap.sock"} 3`,
		`nodedns_dnstap_queued_bytes{socket="unix:///run/tap.sock"} 600`,
		`go_goroutines `,
		`process_start_time_seconds `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, `source="stale"`) {
		t.Error("a source never seen is exported")
	}
	if strings.Contains(text, "_p50_seconds") || strings.Contains(text, "_p99_seconds") {
		t.Error("upstream latency exported as quantile gauges: they cannot be aggregated")
	}
	if strings.Contains(text, "promhttp_metric_handler_errors_total{cause") &&
		!strings.Contains(text, `promhttp_metric_handler_errors_total{cause="gathering"} 0`) {
		t.Errorf("scrape reported errors:\n%s", text)
	}
}

// TestCollectorConsistent checks the collector against a pedantic
// registry (every metric described, labels consistent) and the Prometheus
// naming lint.
func TestCollectorConsistent(t *testing.T) {
	r := newRecorder(t, Config{Sources: fullSources()})
	r.Observe(ev(stage.SourceStale, dns.RcodeSuccess, "a.example."))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newCollector(r)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// With no sources wired, the scrape still works.
	bare := newRecorder(t, Config{})
	if _, err := bare.reg.Gather(); err != nil {
		t.Errorf("gather without sources: %v", err)
	}
}

func TestStatsDocument(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Version: "v1.2.3", Sources: fullSources(), Now: clk.Now, TopSample: 1})
	for range 20 {
		r.Observe(ev(stage.SourceCache, dns.RcodeSuccess, "a.example."))
	}
	r.Observe(ev(stage.SourceUpstream, dns.RcodeNameError, "b.example."))
	clk.Advance(90 * time.Second)
	d := r.Stats()
	if d.Version != "v1.2.3" || d.UptimeSeconds != 90 || !d.Started.Equal(clk.Now().Add(-90*time.Second)) {
		t.Errorf("version %q uptime %g started %v", d.Version, d.UptimeSeconds, d.Started)
	}
	if d.Cache == nil || d.Cache.HitRatio != 0.9 || d.Cache.Evictions != 7 {
		t.Errorf("cache = %+v", d.Cache)
	}
	if len(d.Upstreams) != 3 || d.Intercept == nil || !d.Intercept.Enabled || d.Informers == nil || d.Server == nil || d.Server.Overloaded != 4 {
		t.Errorf("sections missing: %+v", d)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back Document
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i := range d.Upstreams {
		d.Upstreams[i].Latency = nil // not in the document
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", back, d)
	}
	for _, key := range []string{`"hit_ratio":0.9`, `"last_10s":`, `"top_names":[{"key":"a.example.","count":`, `"in_flight":2`, `"last_repair":"2025-03-01T11:00:00Z"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("document lacks %s: %s", key, b)
		}
	}

	// Nothing wired: the optional sections are left out, not zero.
	bare := newRecorder(t, Config{})
	b, err = json.Marshal(bare.Stats())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"cache"`, `"upstreams"`, `"intercept"`, `"informers"`, `"server"`, `"last_repair"`} {
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("bare document has %s: %s", key, b)
		}
	}
}

func TestConcurrent(t *testing.T) {
	r := newRecorder(t, Config{Sources: fullSources(), TopSample: 2, LogQueries: 0.01})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				e := ev(stage.SourceCache, i%4, fmt.Sprintf("n%d.example.", (g*5000+i)%700))
				e.Client = netip.AddrFrom4([4]byte{169, 254, byte(g), byte(i)})
				r.Observe(e)
			}
		}()
	}
	h := r.Handler()
	for range 20 {
		_ = r.Stats()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			t.Fatalf("scrape: %d", rec.Code)
		}
	}
	wg.Wait()
	if got := r.Stats().Total; got != 8*5000 {
		t.Errorf("total = %d, want %d", got, 8*5000)
	}
}

func TestRunCoarseClock(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Now: clk.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	for r.coarse.Load() != clk.Now().Unix() {
		runtime.Gosched()
	}
	clk.Advance(3 * time.Second)
	for r.coarse.Load() != clk.Now().Unix() {
		time.Sleep(time.Millisecond)
	}
	for range 30 {
		r.Observe(ev(stage.SourceCache, 0, "a.example."))
	}
	cancel()
	<-done
	if r.coarse.Load() != 0 {
		t.Fatal("coarse clock still set after Run returned")
	}
	clk.Advance(time.Second)
	// 30 answers in the fourth second of life: 30 over 4 seconds.
	if q := r.Stats().QPS.Last10s; q != 7.5 {
		t.Errorf("last 10s = %g, want 7.5", q)
	}
}

func TestObserveAllocs(t *testing.T) {
	r := newRecorder(t, Config{TopSample: 1})
	e := ev(stage.SourceCache, 0, "a.example.")
	r.Observe(e) // the first sighting stores the name
	if n := testing.AllocsPerRun(1000, func() { r.Observe(e) }); n != 0 {
		t.Errorf("Observe allocates %g times per call, want 0", n)
	}
}

func BenchmarkObserve(b *testing.B) {
	r := newRecorder(b, Config{})
	e := ev(stage.SourceCache, 0, "www.example.com.")
	b.ReportAllocs()
	for b.Loop() {
		r.Observe(e)
	}
}

// BenchmarkObserveCoarse is Observe with Run keeping the coarse clock.
func BenchmarkObserveCoarse(b *testing.B) {
	r := newRecorder(b, Config{})
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

// BenchmarkObserveParallel is the shape of the serving path: one reader
// per CPU, all counting into the same (source, rcode) cell and second.
func BenchmarkObserveParallel(b *testing.B) {
	r := newRecorder(b, Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		e := ev(stage.SourceCache, 0, "www.example.com.")
		for pb.Next() {
			r.Observe(e)
		}
	})
}

// BenchmarkObserveDistinctNames has every sampled event bring a new name
// into a full top-k table (the worst case: a clone and an eviction).
func BenchmarkObserveDistinctNames(b *testing.B) {
	r := newRecorder(b, Config{})
	names := make([]string, 1<<14)
	for i := range names {
		names[i] = fmt.Sprintf("n%d.example.", i)
	}
	e := ev(stage.SourceCache, 0, "")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.Name = names[i&(len(names)-1)]
		i++
		r.Observe(e)
	}
}

// TestQueryLogClasses: the query log by class, as CoreDNS's log plugin:
// denial is NXDOMAIN and NODATA (NOERROR without answers), error every
// rcode but NOERROR and NXDOMAIN, success the rest; a class without a
// fraction logs every query of it; the fields are the documented ones.
func TestQueryLogClasses(t *testing.T) {
	type q struct {
		rcode, answers int
		truncated      bool
		name           string
	}
	traffic := []q{
		{dns.RcodeSuccess, 2, false, "ok.example."},
		{dns.RcodeSuccess, 0, false, "nodata.example."},
		{dns.RcodeSuccess, 0, true, "truncated.example."},
		{dns.RcodeNameError, 0, false, "nx.example."},
		{dns.RcodeNameError, 1, false, "cname-to-nx.example."},
		{dns.RcodeServerFailure, 0, false, "servfail.example."},
		{dns.RcodeRefused, 0, false, "refused.example."},
		{dns.RcodeNotImplemented, 0, false, "notimp.example."},
		{dns.RcodeFormatError, 0, false, "formerr.example."},
	}
	for _, c := range []struct {
		classes []string
		want    []string
	}{
		{[]string{"denial"}, []string{"nodata.example.", "nx.example.", "cname-to-nx.example."}},
		{[]string{"error"}, []string{"servfail.example.", "refused.example.", "notimp.example.", "formerr.example."}},
		{[]string{"success"}, []string{"ok.example.", "truncated.example."}},
		{[]string{"denial", "error"}, []string{"nodata.example.", "nx.example.", "cname-to-nx.example.", "servfail.example.", "refused.example.", "notimp.example.", "formerr.example."}},
		{[]string{"all"}, []string{"ok.example.", "nodata.example.", "truncated.example.", "nx.example.", "cname-to-nx.example.", "servfail.example.", "refused.example.", "notimp.example.", "formerr.example."}},
	} {
		var buf bytes.Buffer
		r := newRecorder(t, Config{LogClasses: c.classes, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		for _, x := range traffic {
			e := ev(stage.SourceUpstream, x.rcode, x.name)
			e.Answers, e.Truncated = x.answers, x.truncated
			r.Observe(e)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: not JSON: %s", c.classes, line)
			}
			for _, k := range []string{"time", "level", "msg", "component", "client", "name", "type", "rcode", "class", "answers", "truncated", "source", "proto", "duration"} {
				if _, ok := m[k]; !ok {
					t.Errorf("%v: query log record lacks %q: %s", c.classes, k, line)
				}
			}
			got = append(got, m["name"].(string))
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("classes %v logged %v, want %v", c.classes, got, c.want)
		}
	}

	// With a fraction, the class filter samples among its own queries.
	var buf bytes.Buffer
	r := newRecorder(t, Config{LogQueries: 0.5, LogClasses: []string{"error"}, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	for range 100 {
		r.Observe(ev(stage.SourceUpstream, dns.RcodeServerFailure, "sf.example."))
		r.Observe(ev(stage.SourceUpstream, dns.RcodeNameError, "nx.example."))
	}
	if n := strings.Count(buf.String(), "\n"); n != 50 || strings.Contains(buf.String(), "nx.example.") {
		t.Errorf("0.5 of errors: %d lines (want 50), NXDOMAIN logged: %v", n, strings.Contains(buf.String(), "nx.example."))
	}
	if !strings.Contains(buf.String(), "class=error") {
		t.Errorf("no class=error field: %s", buf.String())
	}
	if _, err := New(Config{LogClasses: []string{"errors"}}); err == nil || !strings.Contains(err.Error(), `"errors"`) {
		t.Errorf("class errors: %v", err)
	}
	if err := CheckLogClasses([]string{"denial", "bogus"}); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("CheckLogClasses: %v", err)
	}
}
