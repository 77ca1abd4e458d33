package main

import (
	"os"
	"strings"
	"testing"
)

// The figures testdata/tables.golden was printed from: the table code of
// scripts/bench.sh and scripts/bench-pod.sh as they were before this
// program (commit cc3ee2c), fed these values (its script is
// testdata/oldtables.sh). The Go tables must be the same, byte for byte.
func goldenFigures() (map[string]*figures, map[string]*figures) {
	loop := map[string]*figures{
		"nodedns": {qps: series{51234, 49876, 50321}, p50: series{101, 99, 120}, p99: series{900, 1200, 1010}, cpu: series{12.3, 11.9, 12.8}, rss: series{30.1, 30.4, 30.4}},
		"unbound": {qps: series{40000, 41000, 39999}, p50: series{130, 131, 129}, p99: series{2000, 2100, 1999}, cpu: series{20.0, 21.5, 19.95}, rss: series{80.0, 80.2, 80.3}, lost: 3},
		"dnsmasq": {qps: series{20001}, p50: series{150}, p99: series{3000}, cpu: series{33.3}, rss: series{5.5}},
		"coredns": {qps: series{0, 0, 0}, p50: series{0, 0, 0}, p99: series{0, 0, 0}, cpu: series{0, 0, 0}, rss: series{60, 61, 62}, lost: 17},
	}
	pod := map[string]*figures{}
	qpl := map[string]string{"nodedns": "1.00", "coredns": "1.00", "node-cache": "3.64", "nodedns-noautopath": "3.64"}
	lost := map[string]int64{"coredns": 17, "node-cache": 300}
	for s, q := range qpl {
		f := &figures{qpl: q, qps: loop["nodedns"].qps, p50: loop["unbound"].p50, p99: loop["unbound"].p99, cpu: loop["unbound"].cpu, rss: loop["unbound"].rss, lost: lost[s]}
		p := 1.0
		if q == "3.64" {
			p = 3.64
		}
		for _, v := range f.qps {
			f.lps = append(f.lps, float64(int64(v/p)))
		}
		for _, c := range f.cpu {
			f.cpul = append(f.cpul, rounded("%.1f", c*p))
		}
		pod[s] = f
	}
	return loop, pod
}

func TestTablesAsTheShellPrintedThem(t *testing.T) {
	want, err := os.ReadFile("testdata/tables.golden")
	if err != nil {
		t.Fatalf("reading the golden tables: %v", err)
	}
	loop, pod := goldenFigures()
	r := run{secs: 2, rounds: 3, qps: 2000}
	lservers := []string{"nodedns", "unbound", "dnsmasq", "coredns"}
	var b strings.Builder
	b.WriteString(loopbackTable(r, "hit", 2000, 100, lservers, loop))
	b.WriteString(loopbackTable(r, "cluster", 131, 100, lservers, loop))
	b.WriteString(perReaderLine(r, loop["nodedns"].qps))
	rp := run{secs: 2, rounds: 3, qps: 2000, cpuLimit: "1.5", churnRate: "50"}
	pservers := []string{"nodedns", "coredns", "node-cache", "nodedns-noautopath"}
	gmp := map[string]string{"nodedns": "2", "nodedns-noautopath": "2"}
	b.WriteString(podTable(rp, "pod", podCaption("pod", 1100, 100), pservers, pod, gmp))
	b.WriteString(pairsHeader(rp, 3))
	pairs := []pair{{40001, 45000, 11.1, 10.2}, {39000, 44444, 12.3, 9.9}, {41234, 0, 10.0, 0}}
	b.WriteString(pairsRow("nodedns", pairs))
	b.WriteString(pairsRow("coredns", pairs))
	glibc := map[string]*glibcFigures{}
	for _, s := range pservers {
		glibc[s] = &glibcFigures{lps: series{3000, 3100, 2950}, p50: series{500, 510, 490}, p99: series{2000, 2500, 2100},
			qpl: series{1.00, 1.02, 0.98}, rt: series{0.50, 0.51, 0.49}, cpu: series{30.5, 31.0, 29.9}}
	}
	glibc["node-cache"].lps, glibc["node-cache"].tcp, glibc["node-cache"].failed = series{1000, 1001, 999}, 12, 2
	b.WriteString(glibcTable(rp, 2, 1100, "bench-0.svc.cluster.local svc.cluster.local cluster.local", pservers, glibc))
	rows := []gmpRow{
		{server: "nodedns", ps: "2", qps: pod["nodedns"].qps.spread("%d"), cpu: pod["nodedns"].cpu.spread("%.1f"), p99: pod["nodedns"].p99.spread("%d"),
			glibcLps: glibc["nodedns"].lps.spread("%d"), glibcCPU: glibc["nodedns"].cpu.spread("%.1f")},
		{server: "nodedns-g1"},
	}
	b.WriteString(gmpTable(rp, "1 4", "pod", true, 2, rows))
	b.WriteString("\nInformer event storm meanwhile: churn: created 100\n")
	lt, err := tally([]string{"0 at 2000 QPS 127.0.0.2:5353 hit.txt", "12 unthrottled 127.0.0.3:5353 hit.txt", "? at 2000 QPS 127.0.0.3:5353 hit.txt", "2 glibc lookups (failed) node-cache round 1", ""})
	if err != nil {
		t.Fatalf("tally: %v", err)
	}
	b.WriteString("\n" + lt.line() + "\n\n") // report prints it with a line feed, as echo did
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("line %d:\n got: %q\nwant: %q", i+1, g, w)
			}
		}
	}
}

func TestSpreadAndMean(t *testing.T) {
	for _, c := range []struct {
		s        series
		f, want  string
		wantMean int
	}{
		{nil, "%d", "-", 0},
		{series{7}, "%d", "7", 7},
		{series{1, 2}, "%d", "1 (1–2)", 1},                     // 1.5 truncated, as printf %d did
		{series{10.05, 10.15}, "%.1f", "10.1 (10.1–10.2)", 10}, // binary 10.05 rounds down
		{series{0.98, 1.02, 1.00}, "%.2f", "1.00 (0.98–1.02)", 1},
		{series{-3, 3}, "%d", "0 (-3–3)", 0},
	} {
		if got := c.s.spread(c.f); got != c.want {
			t.Errorf("%v.spread(%q) = %q, want %q", c.s, c.f, got, c.want)
		}
		if got := c.s.mean(); got != c.wantMean {
			t.Errorf("%v.mean() = %d, want %d", c.s, got, c.wantMean)
		}
	}
	if got := ratio(2, 3); got != "0.67" {
		t.Errorf("ratio(2, 3) = %q, want 0.67", got)
	}
	if got := ratio(5, 0); got != "0.00" {
		t.Errorf("ratio(5, 0) = %q, want 0.00", got)
	}
	if got := percentile([]int64{1, 2, 3, 4}, 0.5); got != 3 {
		t.Errorf("percentile(1..4, 0.5) = %d, want 3 (the value at int(n·p))", got)
	}
	if got := percentile([]int64{1, 2, 3, 4}, 0.99); got != 4 {
		t.Errorf("percentile(1..4, 0.99) = %d, want 4", got)
	}
}

func TestLostTallyAndZeroLoss(t *testing.T) {
	for _, c := range []struct {
		notes    []string
		line     string
		zeroFail bool
	}{
		{nil, "Lost: 0 queries in the fixed-rate runs and glibc lookups; 0 in the unthrottled runs (overload by design); 0 runs in all.", false},
		{[]string{"0 at 2000 QPS a:53 pod.txt", "300 unthrottled a:53 pod.txt"}, "Lost: 0 queries in the fixed-rate runs and glibc lookups; 300 in the unthrottled runs (overload by design); 2 runs in all.", false},
		{[]string{"1 at 2000 QPS a:53 pod.txt"}, "Lost: 1 queries in the fixed-rate runs and glibc lookups; 0 in the unthrottled runs (overload by design); 1 runs in all.", true},
		{[]string{"3 glibc lookups (failed) nodedns round 1"}, "Lost: 3 queries in the fixed-rate runs and glibc lookups; 0 in the unthrottled runs (overload by design); 1 runs in all.", true},
		{[]string{"? at 2000 QPS a:53 pod.txt"}, "Lost: 0 queries in the fixed-rate runs and glibc lookups (1 runs printed no count); 0 in the unthrottled runs (overload by design); 1 runs in all.", true},
		{[]string{"? unthrottled a:53 pod.txt"}, "Lost: 0 queries in the fixed-rate runs and glibc lookups (1 runs printed no count); 0 in the unthrottled runs (overload by design); 1 runs in all.", true},
	} {
		lt, err := tally(c.notes)
		if err != nil {
			t.Fatalf("tally(%q): %v", c.notes, err)
		}
		if got := lt.line(); got != c.line {
			t.Errorf("tally(%q).line() =\n %q\nwant\n %q", c.notes, got, c.line)
		}
		if err := lt.zeroLoss(); (err != nil) != c.zeroFail {
			t.Errorf("tally(%q).zeroLoss() = %v, want failing %v", c.notes, err, c.zeroFail)
		}
	}
	if _, err := tally([]string{"x at 2000 QPS"}); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("tally of a note with count x: %v, want an error naming it", err)
	}
}

func TestSectionAndInvocation(t *testing.T) {
	o := options{secs: 1, rounds: 1, qps: 2000, nsvc: 100, threads: 2, serversArg: "nodedns unbound dnsmasq coredns node-cache",
		workloadsArg: "pod pod-shortcut pod-hit", dirty: true}
	if got, want := invocation(o), "scripts/bench.sh -l 1 -r 1 -Q 2000 -s 'nodedns unbound dnsmasq coredns node-cache' -w 'pod pod-shortcut pod-hit' -n 100 -T 2 -D"; got != want {
		t.Errorf("invocation = %q\nwant %q", got, want)
	}
	if got, want := setup(o), "Client and servers share the machine's cores; every server is a caching forwarder to the same local test upstream; etcd and kube-apiserver run alongside, and the central CoreDNS node-cache forwards the cluster zones to (idle during the runs unless -S)."; got != want {
		t.Errorf("setup = %q\nwant %q", got, want)
	}
	o2 := options{secs: 10, rounds: 3, qps: 20000, serversArg: "nodedns unbound dnsmasq", workloadsArg: "hit nx"}
	if got, want := invocation(o2), "scripts/bench.sh -l 10 -r 3 -Q 20000 -s 'nodedns unbound dnsmasq' -w 'hit nx'"; got != want {
		t.Errorf("invocation = %q\nwant %q", got, want)
	}
	if got, want := setup(o2), "Client and servers share the machine's cores; every server is a caching forwarder to the same local test upstream."; got != want {
		t.Errorf("setup = %q\nwant %q", got, want)
	}
	h := header{date: "2026-12-02", invocation: "scripts/bench.sh -l 1", tree: "abc1234, dirty", machine: "Machine: m.", versions: "v.", setup: "s."}
	if got, want := section(h, "\nT\n\nLost.\n"), "\n## 2026-12-02 scripts/bench.sh -l 1 (abc1234, dirty)\n\nMachine: m.\nv.\ns.\n\nT\n\nLost.\n\n"; got != want {
		t.Errorf("section = %q\nwant %q", got, want)
	}
}

// report -z fails on a fixed-rate loss, a failed glibc lookup or a run
// without a count, and not on the unthrottled runs' overload; the section
// -o appends carries the tables and the lost-query line.
func TestReportZeroLoss(t *testing.T) {
	for _, c := range []struct {
		notes string
		fail  bool
	}{
		{"0 at 2000 QPS 169.254.125.1:53 pod.txt\n300 unthrottled 169.254.125.3:53 pod.txt\n", false},
		{"0 at 2000 QPS 169.254.125.1:53 pod.txt\n1 at 2000 QPS 169.254.125.3:53 pod.txt\n", true},
		{"2 glibc lookups (failed) nodedns round 1\n", true},
		{"? at 2000 QPS 169.254.125.1:53 pod.txt\n", true},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/lost.txt", []byte(c.notes), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := appendTable(dir, "\nworkload: pod\n| x |\n"); err != nil {
			t.Fatal(err)
		}
		out := dir + "/RESULTS.md"
		err := runReport(options{work: dir, zeroLoss: true, out: out, secs: 1, rounds: 1, qps: 2000, workloadsArg: "pod", serversArg: "nodedns", tree: "clean", commit: "abc1234"})
		if (err != nil) != c.fail {
			t.Errorf("notes %q: report -z = %v, want failing %v", c.notes, err, c.fail)
		}
		b, rerr := os.ReadFile(out)
		switch {
		case c.fail && rerr == nil:
			t.Errorf("notes %q: a failing -z run appended to -o:\n%s", c.notes, b)
		case !c.fail && (rerr != nil || !strings.Contains(string(b), "(abc1234)\n") || !strings.Contains(string(b), "\nworkload: pod\n| x |\n\nLost: 0 queries")):
			t.Errorf("notes %q: -o has %q (%v), want the heading, the table and the lost line", c.notes, b, rerr)
		}
	}
}
