package metrics

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/upstream"

	"github.com/nodedns/nodedns/pkg/observe/dnstap"
)

func sampleDocument() Document {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return Document{
		Version:       "v1.2.3",
		Started:       now.Add(-(90*time.Minute + 5*time.Second)),
		Now:           now,
		UptimeSeconds: (90*time.Minute + 5*time.Second).Seconds(),
		QPS:           QPS{Last10s: 812.4, Last1m: 790.06},
		Total:         1234,
		Answers: map[string]map[string]uint64{
			"cache":    {"NOERROR": 1000, "NXDOMAIN": 12},
			"cluster":  {"NOERROR": 200, "NXDOMAIN": 7},
			"upstream": {"SERVFAIL": 3, "REFUSED": 2},
			"autopath": {"NOERROR": 10},
		},
		Cache: &CacheStats{Stats: cache.Stats{Entries: 120, Capacity: 10000, Hits: 900, Misses: 100,
			Evictions: 7, StaleServed: 3, Prefetches: 11}, HitRatio: 0.9},
		Autopath: AutopathStats{Shortcuts: 10, Steps: 31, Saved: 25},
		Upstreams: []upstream.ServerStats{
			{Addr: "169.254.0.53:53", Up: true, Requests: 100, Failures: 2, P50ms: 1.41, P99ms: 22.6},
			{Addr: "[fd00::53]:53", Up: false, Requests: 9, Failures: 9, LastError: "reading from [fd00::53]:53: i/o timeout"},
		},
		Intercept: &intercept.Status{Enabled: true, Link: "nodelocaldns", LinkType: "dummy",
			IPs: []string{"169.254.20.10", "169.254.20.11"}, Backend: "nft", RulesPresent: 5, RulesWanted: 6,
			Repairs: 2, LastRepair: now.Add(-time.Hour), LastError: "inserting rule: exit status 4",
			Fallback: "on", FallbackTargets4: []string{"169.254.211.2:53"}, FallbackTargets6: []string{"[fd00::53]:53"},
			FallbackClusterIPs: []string{"169.254.20.11"}, FallbackFlows4: 5, FallbackFlows6: 1},
		Informers: &k8s.Stats{Enabled: true, Synced: true,
			Objects: map[string]int{"services": 40, "endpointslices": 45, "namespaces": 6, "pods": 12}},
		Peers: &PeerFigures{Foreign: []string{"169.254.20.10:53/udp: 1 socket(s) of another process (coredns[77]), foreign"}},
		Dnstap: []dnstap.Stats{{Socket: "unix:///run/tap.sock", Connected: true, Sent: 900, Dropped: 3, QueuedMessages: 2, QueuedBytes: 400},
			{Socket: "tcp://192.0.2.10:6000", LastError: "dialing: connection refused", Dropped: 10000, Reconnects: 4}},
		Server:     &server.Stats{Overloaded: 4, Panics: 1, InFlight: 2, TCPConns: 3, UDPReaders: 2, UDPReadersLive: 1, UDPReaderRestarts: 7},
		TopNames:   []TopEntry{{Key: "api.example.com.", Count: 4800}, {Key: "evil\x1b[2J.example.", Count: 16}},
		TopClients: []TopEntry{{Key: "169.254.7.7", Count: 5000}},
		TopSample:  16,
	}
}

// reportOf renders doc after a trip through its JSON, as `nodedns stats`
// receives it.
func reportOf(t *testing.T, doc any) string {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	d.Report(&out)
	return out.String()
}

// TestReport: the report of a document read as `nodedns stats` reads it
// (through its JSON).
func TestReport(t *testing.T) {
	out := reportOf(t, sampleDocument())
	t.Logf("report:\n%s", out)
	for _, want := range []string{
		"nodedns v1.2.3, up 1h30m5s (since 2025-03-01 10:29:55 UTC)",
		"812/s last 10s, 790/s last 1m, 1234 answered since start",
		"NOERROR", "NXDOMAIN", "SERVFAIL", "REFUSED",
		"120 of 10000 entries, hit ratio 90.0% (900 hits, 100 misses)",
		"7 evictions, 3 stale answers served, 11 prefetches",
		"10 shortcuts, 25 upstream round trips saved",
		"169.254.0.53:53", "1.4ms", "23ms",
		"[fd00::53]:53", "DOWN", "i/o timeout",
		"link nodelocaldns (dummy), IPs 169.254.20.10, 169.254.20.11",
		"rules 5 of 6 present (nft)",
		"2 repairs, last 1h0m0s ago",
		"DNS fallback on: 169.254.211.2:53, [fd00::53]:53; 6 flows redirected (ipv4 5, ipv6 1)",
		"left to kube-proxy (ClusterIPs): 169.254.20.11",
		"last error: inserting rule: exit status 4",
		"synced; endpointslices 45, namespaces 6, pods 12, services 40",
		"4 overloaded, 1 panics",
		"1 of 2 UDP readers live (0 holding a P), 7 restarts [DOWN",
		"Sharing", "FOREIGN DNS SERVER (not ready until it is gone): 169.254.20.10:53/udp: 1 socket(s) of another process (coredns[77]), foreign",
		"sampled 1 in 16",
		"dnstap", "unix:///run/tap.sock: connected; 900 sent, 3 dropped (queue full), 0 lost, 0 reconnects, 2 queued (400 bytes)",
		"tcp://192.0.2.10:6000: NOT CONNECTED (dialing: connection refused); 0 sent, 10000 dropped",
		"api.example.com.", "169.254.7.7",
		`evil\x1b[2J.example.`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("a control byte from a query name reached the terminal")
	}
	// Sources in a fixed order: cluster before cache before upstream.
	ci, ca, up := strings.Index(out, "  cluster"), strings.Index(out, "  cache"), strings.Index(out, "  upstream")
	if ci < 0 || !(ci < ca && ca < up) {
		t.Errorf("sources out of order: cluster %d cache %d upstream %d", ci, ca, up)
	}
	for i, l := range strings.Split(out, "\n") {
		if strings.TrimRight(l, " ") != l {
			t.Errorf("line %d has trailing spaces: %q", i+1, l)
		}
	}
}

func TestReportSparse(t *testing.T) {
	// A document with nothing wired (and fields a newer agent might add).
	out := reportOf(t, map[string]any{"version": "dev", "uptime_seconds": 3, "answers": map[string]any{},
		"intercept": map[string]any{"enabled": false}, "a_future_field": 1})
	for _, want := range []string{"nodedns dev, up 3s", "Answers       none yet", "Cache         not reported",
		"Upstreams     none reported", "Interception  off", "Informers     not reported", "none yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
