package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

func sampleDocument() metrics.Document {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return metrics.Document{
		Version:       "v1.2.3",
		Started:       now.Add(-(90*time.Minute + 5*time.Second)),
		Now:           now,
		UptimeSeconds: (90*time.Minute + 5*time.Second).Seconds(),
		QPS:           metrics.QPS{Last10s: 812.4, Last1m: 790.06},
		Total:         1234,
		Answers: map[string]map[string]uint64{
			"cache":    {"NOERROR": 1000, "NXDOMAIN": 12},
			"cluster":  {"NOERROR": 200, "NXDOMAIN": 7},
			"upstream": {"SERVFAIL": 3, "REFUSED": 2},
			"autopath": {"NOERROR": 10},
		},
		Cache: &metrics.CacheStats{Stats: cache.Stats{Entries: 120, Capacity: 10000, Hits: 900, Misses: 100,
			Evictions: 7, StaleServed: 3, Prefetches: 11}, HitRatio: 0.9},
		Autopath: metrics.AutopathStats{Shortcuts: 10, Steps: 31, Saved: 25},
		Upstreams: []upstream.ServerStats{
			{Addr: "169.254.0.53:53", Up: true, Requests: 100, Failures: 2, P50ms: 1.41, P99ms: 22.6},
			{Addr: "[fd00::53]:53", Up: false, Requests: 9, Failures: 9, LastError: "reading from [fd00::53]:53: i/o timeout"},
		},
		Intercept: &intercept.Status{Enabled: true, Link: "nodelocaldns", LinkType: "dummy",
			IPs: []string{"169.254.20.10", "169.254.20.11"}, Backend: "nft", RulesPresent: 5, RulesWanted: 6,
			Repairs: 2, LastRepair: now.Add(-time.Hour), LastError: "inserting rule: exit status 4"},
		Informers: &k8s.Stats{Enabled: true, Synced: true,
			Objects: map[string]int{"services": 40, "endpointslices": 45, "namespaces": 6, "pods": 12}},
		Peers:      &metrics.PeerFigures{Foreign: []string{"169.254.20.10:53/udp: 1 socket(s) of another process (coredns[77]), foreign"}},
		Server:     &server.Stats{Overloaded: 4, Panics: 1, InFlight: 2, TCPConns: 3, UDPReaders: 2, UDPReadersLive: 1, UDPReaderRestarts: 7},
		TopNames:   []metrics.TopEntry{{Key: "api.example.com.", Count: 4800}, {Key: "evil\x1b[2J.example.", Count: 16}},
		TopClients: []metrics.TopEntry{{Key: "169.254.7.7", Count: 5000}},
		TopSample:  16,
	}
}

// statsServer serves doc as /stats.
func statsServer(t *testing.T, doc any) (*httptest.Server, string) {
	t.Helper()
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

func runStatsArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := runStats(ctx, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestStatsJSON(t *testing.T) {
	doc := sampleDocument()
	_, addr := statsServer(t, doc)
	out, _, err := runStatsArgs(t, "--admin", addr, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var back metrics.Document
	if err := json.Unmarshal([]byte(out), &back); err != nil {
		t.Fatalf("--json printed no document: %v\n%s", err, out)
	}
	if back.Version != doc.Version || back.Cache.HitRatio != 0.9 || len(back.Upstreams) != 2 {
		t.Errorf("--json document = %+v", back)
	}
}

func TestStatsNoAgent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, _, err = runStatsArgs(t, "--admin", addr)
	if err == nil {
		t.Fatal("no error without an agent")
	}
	if want := "no agent answering at " + addr + ": connection refused"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %v does not wrap ECONNREFUSED", err)
	}
	// The command as main runs it: one line on stderr, exit status 1.
	var stdout, stderr bytes.Buffer
	if code := runStatsMain([]string{"--admin", addr}, &stdout, &stderr); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if got, want := stderr.String(), "nodedns stats: no agent answering at "+addr+": connection refused\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}

	sock := filepath.Join(t.TempDir(), "admin.sock")
	_, _, err = runStatsArgs(t, "--socket", sock)
	if want := "no agent answering at " + sock + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

// runStatsMain is what main does with the command's error.
func runStatsMain(args []string, stdout, stderr *bytes.Buffer) int {
	if err := stats(args, stdout, stderr); err != nil {
		stderr.WriteString("nodedns stats: " + err.Error() + "\n")
		return 1
	}
	return 0
}

func TestStatsTimeoutAndHTTPError(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	_, _, err := runStatsArgs(t, "--admin", strings.TrimPrefix(slow.URL, "http://"), "--timeout", "100ms")
	if err == nil || !strings.HasSuffix(err.Error(), ": no answer within 100ms") {
		t.Errorf("slow agent: error = %v", err)
	}

	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	_, _, err = runStatsArgs(t, "--admin", strings.TrimPrefix(missing.URL, "http://"))
	if err == nil || !strings.Contains(err.Error(), "answered /stats with 404 Not Found") {
		t.Errorf("no /stats: error = %v", err)
	}

	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }))
	defer garbage.Close()
	_, _, err = runStatsArgs(t, "--admin", strings.TrimPrefix(garbage.URL, "http://"))
	if err == nil || !strings.Contains(err.Error(), "decoding /stats from") {
		t.Errorf("not JSON: error = %v", err)
	}

	if _, _, err := runStatsArgs(t, "--timeout", "0s"); err == nil {
		t.Error("--timeout 0s accepted")
	}
	if _, _, err := runStatsArgs(t, "extra"); err == nil {
		t.Error("a stray argument accepted")
	}
}

func TestStatsSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(sampleDocument())
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stats" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	out, _, err := runStatsArgs(t, "--socket", sock, "--admin", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "nodedns v1.2.3") {
		t.Errorf("report through the socket:\n%s", out)
	}
}

func TestStatsWatch(t *testing.T) {
	srv, addr := statsServer(t, sampleDocument())
	out, _, err := runStatsArgs(t, "--admin", addr, "--watch", "--interval", "10ms", "--count", "3")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "nodedns v1.2.3"); n != 3 {
		t.Errorf("%d reports, want 3", n)
	}
	if n := strings.Count(out, "Ctrl-C to stop"); n != 3 {
		t.Errorf("%d watch headers, want 3", n)
	}

	// The agent going away is reported and the watch goes on; the last
	// report's error is the result.
	srv.Close()
	out, _, err = runStatsArgs(t, "--admin", addr, "--watch", "--interval", "10ms", "--count", "2")
	if n := strings.Count(out, "nodedns stats: no agent answering at "+addr); n != 2 || err == nil {
		t.Errorf("agent gone: %d error lines, err %v:\n%s", n, err, out)
	}

	// An interrupt ends the watch cleanly.
	_, addr = statsServer(t, sampleDocument())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stdout dnstest.SyncBuffer
	go func() {
		done <- runStats(ctx, []string{"--admin", addr, "--watch", "--interval", "1h"}, &stdout, &bytes.Buffer{})
	}()
	// The first report is out: the watch now waits for its next turn,
	// an hour away, and only the interrupt can end it.
	dnstest.Eventually(t, 5*time.Second, "the first report from the watch", func() error {
		if out := stdout.String(); !strings.Contains(out, "Ctrl-C to stop") {
			return errors.New("stdout:\n" + out)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("interrupted watch: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop on interrupt")
	}
}

// TestStatsFromAgentEndpoint reads a real Recorder through the admin
// endpoint, wired the way serve wires them.
func TestStatsFromAgentEndpoint(t *testing.T) {
	rec, err := metrics.New(metrics.Config{Version: "v9", TopSample: 1, Sources: metrics.Sources{
		Cache: func() cache.Stats {
			return cache.Stats{Entries: 1, Capacity: 100, Hits: 3, Misses: 1}
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		rec.Observe(pipeline.Event{Source: stage.SourceCache, Name: "a.example.", Client: netip.MustParseAddr("169.254.1.2")})
	}
	rec.Observe(pipeline.Event{Source: stage.SourceUpstream, Rcode: 3, Name: "b.example."})
	adm, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Stats: func() any { return rec.Stats() }, Metrics: rec.Handler()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = adm.Serve() }()
	defer adm.Shutdown(context.Background())
	out, _, err := runStatsArgs(t, "--admin", adm.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nodedns v9, up 0s", "4 answered since start", "hit ratio 75.0%", "3  a.example.", "169.254.1.2"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// --namespace prints one namespace's report (its JSON object with
// --json), --search-path the search-path report; a namespace the agent
// does not count apart is an error naming those it does.
func TestStatsNamespaceAndSearchPath(t *testing.T) {
	doc := sampleDocument()
	now := doc.Now
	doc.NamespaceLimit, doc.NamespacesTracked = 50, 2
	doc.Namespaces = []metrics.NamespaceStats{
		{Namespace: "shop", Since: now, Queries: 120, Responses: map[string]uint64{"NOERROR": 100, "NXDOMAIN": 15, "SERVFAIL": 5}, CacheHits: 80,
			Upstream: 20, P50ms: 0.1, P99ms: 5, SearchExpansions: 40, SearchWalkSteps: 90, SearchSaved: 60,
			Pods:    []metrics.NamespacePod{{Addr: "10.244.0.21", Pod: "web-5d9f8c7b6-x2k4p", Workload: "Deployment/web", Count: 96}},
			Failing: []metrics.FailingName{{Name: "typo.example.", Rcode: "NXDOMAIN", Count: 15}}},
		{Namespace: metrics.NamespaceOther, Since: now, Queries: 3, Responses: map[string]uint64{"NOERROR": 3}},
		{Namespace: metrics.NamespaceNonPod, Since: now, Queries: 7, Responses: map[string]uint64{"NOERROR": 7}},
	}
	doc.SearchPath = &metrics.SearchPathStats{Zone: "cluster.local.", Sample: 16, Workloads: []metrics.SearchWorkload{{
		Namespace: "shop", Kind: "Deployment", Name: "web", Pods: []string{"web-5d9f8c7b6-x2k4p"}, Ndots: 2,
		Lookups: []metrics.SearchLookup{{Name: "api.example.com", Types: []string{"A", "AAAA"}, Lookups: 320, Step: 3, List: 4,
			Answer: "api.example.com.", WithoutWalk: 8, WithWalk: 2, AsFQDN: 2}}}}}
	_, addr := statsServer(t, doc)

	out, _, err := runStatsArgs(t, "--admin", addr)
	if err != nil || !strings.Contains(out, "Namespaces    2 seen, 1 counted apart (limit 50)") {
		t.Errorf("report without a Namespaces section (%v):\n%s", err, out)
	}
	out, _, err = runStatsArgs(t, "--admin", addr, "--namespace", "shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Namespace     shop", "web-5d9f8c7b6-x2k4p", "Deployment/web", "15  NXDOMAIN  typo.example."} {
		if !strings.Contains(out, want) {
			t.Errorf("--namespace shop lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runStatsArgs(t, "--admin", addr, "--namespace", "shop", "--json")
	var ns metrics.NamespaceStats
	if err != nil || json.Unmarshal([]byte(out), &ns) != nil || ns.Namespace != "shop" || ns.Queries != 120 {
		t.Errorf("--namespace shop --json: %v\n%s", err, out)
	}
	if _, _, err := runStatsArgs(t, "--admin", addr, "--namespace", "nope"); err == nil ||
		!strings.Contains(err.Error(), `namespace "nope" is not counted apart`) || !strings.Contains(err.Error(), "shop other _nonpod") {
		t.Errorf("unknown namespace: error %v", err)
	}
	out, _, err = runStatsArgs(t, "--admin", addr, "--search-path")
	if err != nil || !strings.Contains(out, "shop          Deployment web") || !strings.Contains(out, "ndots:2") {
		t.Errorf("--search-path (%v):\n%s", err, out)
	}
	if _, _, err := runStatsArgs(t, "--admin", addr, "--search-path", "--namespace", "shop"); err == nil {
		t.Error("--search-path with --namespace accepted")
	}
	doc.Namespaces = nil
	_, addr = statsServer(t, doc)
	if _, _, err := runStatsArgs(t, "--admin", addr, "--namespace", "shop"); err == nil || !strings.Contains(err.Error(), "--metrics-namespaces 0") {
		t.Errorf("figures off: error %v", err)
	}
}
