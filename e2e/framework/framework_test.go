package framework

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// The parts of the framework that need no cluster: reading the tools'
// output, counting pods from watch events, rendering the manifest.

func TestParseDNSPerf(t *testing.T) {
	out := `Statistics:

  Queries sent:         27000
  Queries completed:    26990 (99.96%)
  Queries lost:         10 (0.04%)

  Response codes:       NOERROR 26980 (99.96%), SERVFAIL 7 (0.03%), NXDOMAIN 3 (0.01%)
  Average packet size:  request 44, response 89
  Run time (s):         45.000123
  Queries per second:   599.776
`
	r, err := parseDNSPerf(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 27000 || r.Lost != 10 || r.ServFail != 7 || r.QPS < 599 || r.QPS > 600 {
		t.Errorf("parsed %+v, want sent 27000, lost 10, SERVFAIL 7, 599.776 queries/s", r)
	}
	if _, err := parseDNSPerf("dnsperf: cannot connect\n"); err == nil {
		t.Error("output without statistics parsed without an error")
	}
}

func TestLastJSON(t *testing.T) {
	var r DNSLoadResult
	if err := lastJSON("warming up\n{\"sent\":1}\n{\"sent\":8001,\"failed\":3,\"fail_pct\":0.04,\"longest_gap_ms\":156.2}\n", &r); err != nil {
		t.Fatal(err)
	}
	if r.Sent != 8001 || r.Failed != 3 || r.LongestGap != 156.2 {
		t.Errorf("decoded %+v, want the last line's figures", r)
	}
	if err := lastJSON("no json here", &r); err == nil {
		t.Error("output without a JSON line decoded without an error")
	}
}

func TestPodWatchCounts(t *testing.T) {
	pw := &PodWatch{live: map[string]bool{}}
	for _, e := range []struct {
		typ  watch.EventType
		name string
	}{{watch.Added, "a"}, {watch.Modified, "a"}, {watch.Added, "b"}, {watch.Added, "b"}, {watch.Deleted, "a"}, {watch.Deleted, "a"}, {watch.Added, "c"}, {watch.Deleted, "b"}} {
		pw.record(e.typ, e.name)
	}
	if maxPods, now, events, _ := pw.Counts(); maxPods != 2 || now != 1 || len(events) != 8 {
		t.Errorf("most %d at once, %d now, %d events; want 2, 1, 8", maxPods, now, len(events))
	}
}

func TestStatsValue(t *testing.T) {
	s := Stats{"total": 12.0, "supervisor": map[string]any{"replaced": map[string]any{"oom": 1.0}}}
	if s.Int("total") != 12 || s.Int("supervisor.replaced.oom") != 1 || s.Int("supervisor.replaced.hung") != 0 || s.Value("total.x") != nil {
		t.Errorf("values of %v read wrong", s)
	}
}

func TestRenderManifest(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Root: root}
	out := c.RenderManifest(t, "localhost/nodedns:test", "127.0.53.53")
	if n := strings.Count(out, "image: localhost/nodedns:test"); n != 2 {
		t.Errorf("%d lines with the image, want 2 (the agent and the metrics-port init container)", n)
	}
	if !strings.Contains(out, "\n    upstream: [\"127.0.53.53\"]\n") {
		t.Error("no upstream line set")
	}
	objs := Decode(t, out)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	if !kinds["DaemonSet"] || !kinds["ConfigMap"] {
		t.Errorf("rendered manifest's kinds %v lack a DaemonSet or a ConfigMap", kinds)
	}
}

func TestAgentRules(t *testing.T) {
	saved := `*raw
-A PREROUTING -d 169.254.20.10/32 -p udp -m udp --dport 53 -m comment --comment "nodedns: 169.254.20.10 notrack" -j NOTRACK
-A PREROUTING -d 169.254.99.9/32 -j ACCEPT
COMMIT
`
	if r := agentRules(saved); len(r) != 1 || !strings.Contains(r[0], " 169.254.20.10 ") {
		t.Errorf("agentRules = %q, want the one nodedns rule", r)
	}
}

func TestInNetns(t *testing.T) {
	// Our own network namespace: the loopback link is there.
	if out := InNetns(t, os.Getpid(), "ip", "link", "show", "lo"); !strings.Contains(out, "LOOPBACK") {
		t.Errorf("ip link show lo in our own netns printed %q", out)
	}
}

func TestToolAndStart(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Root: root}
	t.Cleanup(func() {
		if err := RemoveTools(); err != nil {
			t.Error(err)
		}
	})
	bin := c.Tool(t, "resolvstub")
	// An answering server on a loopback address: its "ready" line, then an
	// A query answered with the address it came in on.
	p := Start(t, "ready", bin, "-serve", "127.0.54.1=answer", "-for", "1m")
	if out := Host(t, "dig", "+short", "+time=2", "+tries=1", "@127.0.54.1", "x.example", "A"); strings.TrimSpace(out) != "127.0.54.1" {
		t.Errorf("resolvstub answered %q, want 127.0.54.1", out)
	}
	if err := p.Stop(); err != nil {
		t.Logf("resolvstub ended: %v (stopped by SIGTERM)", err)
	}
}
