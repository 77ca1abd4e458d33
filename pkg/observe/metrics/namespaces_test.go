package metrics

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// nsEv is an answer to a pod of namespace ns ("": no pod) at addr.
func nsEv(ns string, addr string, src stage.Source, rcode int, name string) pipeline.Event {
	e := ev(src, rcode, name)
	e.Namespace, e.Client = ns, netip.MustParseAddr(addr)
	return e
}

// scrapeText is /metrics as Prometheus reads it.
func scrapeText(t *testing.T, r *Recorder) string {
	t.Helper()
	w := httptest.NewRecorder()
	r.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

func hasSeries(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w+"\n") {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

func dontWantSeries(t *testing.T, text string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(text, b) {
			t.Errorf("/metrics has %s", b)
		}
	}
}

// Per-namespace counts are exact from a namespace's first query while
// fewer than K namespaces hold their own counters; the rest count under
// other, clients that are no pod under _nonpod; every figure per
// namespace is exported.
func TestNamespaceCounts(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Namespaces: 2, Now: clk.Now})
	send := func(n int, e pipeline.Event) {
		for range n {
			r.Observe(e)
		}
	}
	send(5, nsEv("team-a", "10.244.0.5", stage.SourceCache, dns.RcodeSuccess, "a.example."))
	send(2, nsEv("team-a", "10.244.0.5", stage.SourceUpstream, dns.RcodeNameError, "nx.example."))
	send(1, nsEv("team-a", "10.244.0.5", stage.SourceUpstream, dns.RcodeServerFailure, "sf.example."))
	send(3, nsEv("team-b", "10.244.0.6", stage.SourceCluster, dns.RcodeSuccess, "web.team-b.svc.cluster.local."))
	send(4, nsEv("team-c", "10.244.0.7", stage.SourceCache, dns.RcodeSuccess, "a.example."))  // beyond K: other
	send(2, nsEv("other", "10.244.0.8", stage.SourceCache, dns.RcodeNameError, "a.example.")) // "other" is never a namespace of its own
	send(6, nsEv("", "192.0.2.1", stage.SourceCache, dns.RcodeSuccess, "a.example."))         // no pod of this node
	walk := nsEv("team-b", "10.244.0.6", stage.SourceAutopath, dns.RcodeSuccess, "api.example.com.team-b.svc.cluster.local.")
	walk.Upstream, walk.Expansion, walk.AutopathSteps, walk.AutopathSaved = 2, true, 5, 4
	walk.Duration = 3 * time.Millisecond
	send(1, walk)
	text := scrapeText(t, r)
	hasSeries(t, text,
		`nodedns_namespace_queries_total{namespace="team-a"} 8`,
		`nodedns_namespace_responses_total{namespace="team-a",rcode="NOERROR"} 5`,
		`nodedns_namespace_responses_total{namespace="team-a",rcode="NXDOMAIN"} 2`,
		`nodedns_namespace_responses_total{namespace="team-a",rcode="SERVFAIL"} 1`,
		`nodedns_namespace_cache_hits_total{namespace="team-a"} 5`,
		`nodedns_namespace_queries_total{namespace="team-b"} 4`,
		`nodedns_namespace_upstream_requests_total{namespace="team-b"} 2`,
		`nodedns_namespace_search_expansions_total{namespace="team-b"} 1`,
		`nodedns_namespace_search_walk_steps_total{namespace="team-b"} 5`,
		`nodedns_namespace_search_queries_saved_total{namespace="team-b"} 4`,
		`nodedns_namespace_request_duration_seconds_bucket{namespace="team-b",le="0.001"} 3`,
		`nodedns_namespace_request_duration_seconds_bucket{namespace="team-b",le="0.005"} 4`,
		`nodedns_namespace_request_duration_seconds_count{namespace="team-b"} 4`,
		`nodedns_namespace_queries_total{namespace="other"} 6`,
		`nodedns_namespace_responses_total{namespace="other",rcode="NXDOMAIN"} 2`,
		`nodedns_namespace_queries_total{namespace="_nonpod"} 6`,
		`nodedns_namespace_tracked 4`,
		`nodedns_namespace_limit 2`,
	)
	dontWantSeries(t, text, `namespace="team-c"`, `nodedns_namespace_responses_total{namespace="team-a",rcode="REFUSED"}`)

	d := r.Stats()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Queries   uint64 `json:"queries"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, n := range doc.Namespaces {
		got += n.Namespace + "=" + strconv.FormatUint(n.Queries, 10) + " "
	}
	if want := "team-a=8 team-b=4 other=6 _nonpod=6 "; got != want {
		t.Errorf("/stats namespaces: %s, want %s", got, want)
	}
}

// A namespace busier than a holder takes its place only once it has been
// more than twice as busy for long enough and the holder has held its
// place for the tenure; the holder's series ends, the newcomer's starts
// from zero, other only grows: every series Prometheus sees is monotonic,
// and a namespace does not flap between its series and other.
func TestNamespaceRebalance(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Namespaces: 2, Now: clk.Now})
	obs := func(ns string, n int) {
		for range n {
			r.Observe(nsEv(ns, "10.244.0.9", stage.SourceCache, dns.RcodeSuccess, "a.example."))
		}
	}
	value := func(text, ns string) (float64, bool) {
		p := `nodedns_namespace_queries_total{namespace="` + ns + `"} `
		i := strings.Index(text, p)
		if i < 0 {
			return 0, false
		}
		rest := text[i+len(p):]
		v, err := strconv.ParseFloat(rest[:strings.IndexByte(rest, '\n')], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v, true
	}
	obs("quiet", 1)
	obs("steady", 1)
	var lastOther float64
	// Ten minutes of a busy newcomer against a quiet holder: no swap
	// before the tenure, whatever the scores.
	for step := 0; ; step++ {
		clk.Advance(nsRebalance)
		obs("steady", 20)
		obs("busy", 50)
		r.ns.rebalance()
		text := scrapeText(t, r)
		other, _ := value(text, NamespaceOther)
		if other < lastOther {
			t.Fatalf("step %d: other went down from %g to %g", step, lastOther, other)
		}
		lastOther = other
		_, quiet := value(text, "quiet")
		_, busy := value(text, "busy")
		held := time.Duration(step+1) * nsRebalance
		if held < nsTenure {
			if !quiet || busy {
				t.Fatalf("after %s: quiet %v, busy %v: a place changed hands before the tenure", held, quiet, busy)
			}
			continue
		}
		if quiet || !busy {
			t.Fatalf("after %s: quiet %v, busy %v: the busy namespace did not take the quiet one's place", held, quiet, busy)
		}
		if v, _ := value(text, "busy"); v != 0 {
			t.Fatalf("the newcomer's series starts at %g, want 0 (its earlier queries stay in other)", v)
		}
		break
	}
	// Now quiet is the candidate: it never outscores steady, the lowest
	// holder, and never comes back; steady keeps its place.
	obs("busy", 1)
	for range 3 * int(nsTenure/nsRebalance) {
		clk.Advance(nsRebalance)
		obs("steady", 20)
		obs("busy", 50)
		obs("quiet", 1)
		r.ns.rebalance()
		text := scrapeText(t, r)
		if _, ok := value(text, "steady"); !ok {
			t.Fatal("steady lost its place to a quiet candidate")
		}
		if _, ok := value(text, "quiet"); ok {
			t.Fatal("quiet came back without earning it")
		}
	}
}

// Near-equal namespaces around the bound do not trade places: a candidate
// needs more than twice the holder's score.
func TestNamespaceNoFlap(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Namespaces: 1, Now: clk.Now})
	swaps, holder := 0, ""
	for i := range 200 {
		clk.Advance(nsRebalance)
		// a and b alternate being the busier one by 30 %.
		na, nb := 13, 10
		if i%2 == 1 {
			na, nb = 10, 13
		}
		for range na {
			r.Observe(nsEv("a", "10.244.0.1", stage.SourceCache, 0, "x."))
		}
		for range nb {
			r.Observe(nsEv("b", "10.244.0.2", stage.SourceCache, 0, "x."))
		}
		r.ns.rebalance()
		figs, _ := r.ns.holding()
		if figs[0].name != holder {
			swaps++
			holder = figs[0].name
		}
	}
	if swaps != 1 {
		t.Fatalf("%d changes of holder over 200 rebalances of near-equal namespaces, want 1 (the first)", swaps)
	}
}

// Candidates idle for an hour are forgotten: tracking is bounded by the
// namespaces that query, not by every namespace ever seen.
func TestNamespaceIdleForgotten(t *testing.T) {
	clk := newFakeClock()
	r := newRecorder(t, Config{Namespaces: 1, Now: clk.Now})
	r.Observe(nsEv("a", "10.244.0.1", stage.SourceCache, 0, "x."))
	for i := range 50 {
		r.Observe(nsEv("gone-"+strconv.Itoa(i), "10.244.0.2", stage.SourceCache, 0, "x."))
	}
	if _, n := r.ns.holding(); n != 51 {
		t.Fatalf("%d tracked, want 51", n)
	}
	for range int(nsIdle/nsRebalance) + 1 {
		clk.Advance(nsRebalance)
		r.ns.rebalance()
	}
	if figs, n := r.ns.holding(); n != 1 || figs[0].name != "a" {
		t.Fatalf("%d tracked after an idle hour (holder %s), want 1: a", n, figs[0].name)
	}
}

// Counting by namespace allocates nothing once a namespace is known, for
// a namespace counted apart, one counted under other and a client that is
// no pod.
func TestObserveAllocsNamespaces(t *testing.T) {
	r := newRecorder(t, Config{Namespaces: 1, TopSample: 1})
	for _, e := range []pipeline.Event{
		nsEv("team-a", "10.244.0.5", stage.SourceCache, dns.RcodeSuccess, "a.example."),
		nsEv("team-b", "10.244.0.6", stage.SourceCache, dns.RcodeSuccess, "a.example."),
		nsEv("", "192.0.2.1", stage.SourceCache, dns.RcodeSuccess, "a.example."),
	} {
		r.Observe(e) // the first sighting admits the namespace
		if n := testing.AllocsPerRun(1000, func() { r.Observe(e) }); n != 0 {
			t.Errorf("%q: Observe allocates %g times per call, want 0", e.Namespace, n)
		}
	}
}

func BenchmarkObserveNamespaces(b *testing.B) {
	for _, k := range []int{0, DefaultNamespaces} {
		b.Run("k="+strconv.Itoa(k), func(b *testing.B) {
			r := newRecorder(b, Config{Namespaces: k})
			for i := range 40 {
				r.Observe(nsEv("ns-"+strconv.Itoa(i), "10.244.0.5", stage.SourceCache, 0, "www.example.com."))
			}
			e := nsEv("ns-7", "10.244.0.5", stage.SourceCache, 0, "www.example.com.")
			b.ReportAllocs()
			for b.Loop() {
				r.Observe(e)
			}
		})
	}
}

// BenchmarkObserveNamespacesParallel is the serving path's shape: one
// reader per CPU, all answering pods of one namespace, so the namespace's
// counters move between the cores as the agent's own do.
func BenchmarkObserveNamespacesParallel(b *testing.B) {
	for _, k := range []int{0, DefaultNamespaces} {
		b.Run("k="+strconv.Itoa(k), func(b *testing.B) {
			r := newRecorder(b, Config{Namespaces: k})
			e := nsEv("ns-7", "10.244.0.5", stage.SourceCache, 0, "www.example.com.")
			r.Observe(e) // the first sighting admits the namespace
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r.Observe(e)
				}
			})
		})
	}
}

// The per-namespace series pass the pedantic registry and the naming lint.
func TestNamespaceCollectorConsistent(t *testing.T) {
	r := newRecorder(t, Config{Namespaces: 3, Sources: fullSources()})
	r.Observe(nsEv("team-a", "10.244.0.5", stage.SourceCache, dns.RcodeNameError, "a.example."))
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
}

// The Namespaces section of the report, and --namespace's report of one
// namespace: its figures, busiest pods (named from the pod table) and
// most-failing names.
func TestNamespaceReports(t *testing.T) {
	clk := newFakeClock()
	src := fullSources()
	src.Pod = func(a netip.Addr) (PodInfo, bool) {
		if a == netip.MustParseAddr("10.244.0.5") {
			return PodInfo{Namespace: "team-a", Name: "web-5d9f8c7b6-x2k4p", Kind: "Deployment", Workload: "web"}, true
		}
		return PodInfo{}, false
	}
	r := newRecorder(t, Config{Namespaces: 5, Now: clk.Now, TopSample: 1, Sources: src})
	for range 7 {
		r.Observe(nsEv("team-a", "10.244.0.5", stage.SourceCache, dns.RcodeSuccess, "a.example."))
	}
	for range 3 {
		r.Observe(nsEv("team-a", "10.244.0.9", stage.SourceUpstream, dns.RcodeNameError, "typo.example."))
	}
	r.Observe(nsEv("team-a", "10.244.0.9", stage.SourceUpstream, dns.RcodeServerFailure, "broken.example."))
	d := r.Stats()
	var buf bytes.Buffer
	d.Report(&buf)
	for _, want := range []string{"Namespaces    1 seen, 1 counted apart (limit 5)", "team-a", "NXDOMAIN", "_nonpod"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	s, err := d.Namespace("team-a")
	if err != nil {
		t.Fatal(err)
	}
	d.NamespaceReport(&buf, s)
	out := buf.String()
	for _, want := range []string{"Namespace     team-a", "web-5d9f8c7b6-x2k4p", "Deployment/web", "10.244.0.9",
		"3  NXDOMAIN  typo.example.", "1  SERVFAIL  broken.example."} {
		if !strings.Contains(out, want) {
			t.Errorf("--namespace report lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
	if _, err := d.Namespace("nope"); err == nil {
		t.Error("figures for a namespace never seen")
	}
}
