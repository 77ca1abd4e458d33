package main

import (
	"fmt"
	"slices"
	"strings"
)

// figures are one server's measurements on one workload, a value per
// round.
type figures struct {
	qps, lps, p50, p99, cpu, cpul, rss series
	lost                               int64
	qpl                                string // queries per lookup on the wire, "%.2f" (pod workloads)
}

// glibcFigures are one server's figures from the getaddrinfo loop.
type glibcFigures struct {
	lps, p50, p99, qpl, rt, cpu series
	tcp, failed                 int64
}

// run is what every table's caption says of the run.
type run struct {
	secs, rounds, qps int
	cpuLimit          string // -C
	churnRate         string // -S
}

// roundsNote is the part of every workload's caption that says how its
// figures were taken.
func (r run) roundsNote() string {
	return fmt.Sprintf("every figure the mean of %d rounds (min–max), the servers taking turns: max QPS unthrottled for %ds, then latency/CPU at %d QPS for %ds; RSS after each round",
		r.rounds, r.secs, r.qps, r.secs)
}

// nsCount is the number of namespaces the Services are spread over.
const nsCount = 5

// caption of a loopback workload, given the servers measured on it.
func caption(wl string, nsvc int, servers []string) string {
	switch wl {
	case "hit":
		return "external names, A and AAAA, from the cache"
	case "nx":
		return "NXDOMAIN external names, from the negative cache"
	}
	c := fmt.Sprintf("names of %d Services in %d namespaces of a real kube-apiserver: A for each, SRV for every 10th and the headless ones, PTR for every 10th ClusterIP", nsvc, nsCount)
	if slices.Contains(servers, "nodedns") || slices.Contains(servers, "nodedns-poller") {
		c += "; nodedns answers from its informer index"
	}
	var peers []string
	for _, x := range []string{"unbound", "dnsmasq"} {
		if slices.Contains(servers, x) {
			peers = append(peers, x)
		}
	}
	if len(peers) > 0 {
		c += "; " + strings.Join(peers, " and ") + " forward cluster.local and 96.10.in-addr.arpa to a separate nodedns (as node-cache forwards to the central CoreDNS) and answer from their caches (TTL 5 s)"
	}
	if slices.Contains(servers, "coredns") {
		c += "; coredns: kubernetes plugin + cache against the same API server"
	}
	return c
}

// loopbackTable is one loopback workload's table, the blank line before
// it included.
func loopbackTable(r run, wl string, names, nsvc int, servers []string, acc map[string]*figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nworkload: %s (%d names: %s; cache warm; %s)\n", wl, names, caption(wl, nsvc, servers), r.roundsNote())
	b.WriteString("| server | max QPS | vs best | p50 µs | p99 µs | CPU µs/query | lost | RSS MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	top := best(acc, servers, func(f *figures) series { return f.qps })
	for _, s := range servers {
		f := acc[s]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %s |\n", s, f.qps.spread("%d"),
			ratio(float64(f.qps.mean()), float64(top)), f.p50.spread("%d"), f.p99.spread("%d"),
			f.cpu.spread("%.1f"), f.lost, f.rss.spread("%.1f"))
	}
	return b.String()
}

// perReaderLine is the "QPS per reader" figure, from nodedns-1r's max QPS
// on the hit workload.
func perReaderLine(r run, qps series) string {
	return fmt.Sprintf("\nQPS per reader: %s (nodedns-1r: one UDP reader, --udp-sockets 1 on one listen address, nodedns_server_udp_readers 1; max QPS on the hit workload, mean of %d unthrottled %ds runs, min–max).\n",
		qps.spread("%d"), r.rounds, r.secs)
}

// podCaption of a pod workload.
func podCaption(wl string, lookups, svcLookups int) string {
	switch wl {
	case "pod":
		return fmt.Sprintf("what a pod of %s sends for %d lookups (1000 external names, %d Services by short name or <svc>.<ns>), A and AAAA", podNamespace, lookups, svcLookups)
	case "pod-shortcut":
		return "the first search-path expansion of 1000 external names from the pod, A and AAAA: search-path shortcuts"
	default:
		return "the same 1000 external names asked directly from the pod, A and AAAA: plain cache hits"
	}
}

// podTable is one pod workload's table; gmp holds each nodedns's
// GOMAXPROCS.
func podTable(r run, wl, caption string, servers []string, acc map[string]*figures, gmp map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nworkload: %s (from the pod's network namespace: %s; cache warm; %s; queries/lookup: what the client sent this server per lookup, A and AAAA, counted on the wire over two passes of the file", wl, caption, r.roundsNote())
	if r.cpuLimit != "" {
		fmt.Fprintf(&b, "; every server limited to %s CPU", r.cpuLimit)
	}
	if r.churnRate != "" {
		fmt.Fprintf(&b, "; %s Services/s created and deleted meanwhile", r.churnRate)
	}
	b.WriteString(")\n")
	b.WriteString("| server | queries/lookup | max QPS | lookups/s | vs best | p50 µs | p99 µs | CPU µs/query | CPU µs/lookup | lost | RSS MiB | GOMAXPROCS |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	top := best(acc, servers, func(f *figures) series { return f.lps })
	for _, s := range servers {
		f := acc[s]
		ps := gmp[s]
		if ps == "" {
			ps = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s |\n", s, f.qpl, f.qps.spread("%d"),
			f.lps.spread("%d"), ratio(float64(f.lps.mean()), float64(top)), f.p50.spread("%d"), f.p99.spread("%d"),
			f.cpu.spread("%.1f"), f.cpul.spread("%.1f"), f.lost, f.rss.spread("%.1f"), ps)
	}
	return b.String()
}

// pair is one pair of runs of the shortcut comparison: the shortcut's and
// the hit's max QPS and CPU µs per query.
type pair struct {
	qpsShortcut, qpsHit int64
	cpuShortcut, cpuHit float64
}

// pairsHeader is the caption and header of the shortcut-against-hit table.
func pairsHeader(r run, pairs int) string {
	return fmt.Sprintf("\nSearch-path shortcut (pod-shortcut) against a plain cache hit (pod-hit) on the same server: %d pairs of runs back to back (shortcut, hit; %ds each, unthrottled for max QPS, at %d QPS for CPU), means:\n", pairs, r.secs, r.qps) +
		"| server | max QPS shortcut / hit | ratio | CPU µs/query shortcut / hit | ratio | per pair (QPS ratio, CPU ratio) |\n|---|---|---|---|---|---|\n"
}

// pairsRow is one server's row of that table.
func pairsRow(s string, ps []pair) string {
	var qs, qh int64
	var cs, ch float64
	each := make([]string, 0, len(ps))
	for _, p := range ps {
		qs += p.qpsShortcut
		qh += p.qpsHit
		cs, ch = g6(cs+p.cpuShortcut), g6(ch+p.cpuHit)
		each = append(each, fmt.Sprintf("%.2f, %.2f", div(float64(p.qpsShortcut), float64(p.qpsHit)), div(p.cpuShortcut, p.cpuHit)))
	}
	n := float64(len(ps))
	return fmt.Sprintf("| %s | %d / %d | %.2f | %.1f / %.1f | %.2f | %s |\n", s, int64(float64(qs)/n), int64(float64(qh)/n),
		div(float64(qs), float64(qh)), cs/n, ch/n, div(cs, ch), strings.Join(each, "; "))
}

// div is a/b, 0 when b is 0.
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// glibcTable is the getaddrinfo loop's table and its caption.
func glibcTable(r run, threads, lookups int, search string, servers []string, acc map[string]*glibcFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nglibc: getaddrinfo (AF_UNSPEC, AI_ADDRCONFIG: A and AAAA) in a loop from %d threads inside the pod's namespace for %ds over the %d names as the pod writes them (resolv.conf: search %s; ndots:5), warmed 3 s; mean of %d rounds (min–max), the servers taking turns; queries/lookup counted on the wire; glibc sends a step's A and AAAA together, so round trips/lookup are half of them; TCP connections and failed lookups summed over the rounds; CPU of the server process only\n",
		threads, r.secs, lookups, search, r.rounds)
	b.WriteString("| server | lookups/s | vs best | p50 µs/lookup | p99 µs/lookup | queries/lookup | round trips/lookup | TCP conns | failed | server CPU µs/lookup |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	top := 0
	for _, s := range servers {
		top = max(top, acc[s].lps.mean())
	}
	for _, s := range servers {
		g := acc[s]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n", s, g.lps.spread("%d"),
			ratio(float64(g.lps.mean()), float64(top)), g.p50.spread("%d"), g.p99.spread("%d"), g.qpl.spread("%.2f"),
			g.rt.spread("%.2f"), g.tcp, g.failed, g.cpu.spread("%.1f"))
	}
	return b.String()
}

// gmpRow is one row of the GOMAXPROCS table, its figures as the other
// tables printed them ("" for a figure not measured).
type gmpRow struct {
	server, ps                        string
	qps, cpu, p99, glibcLps, glibcCPU string
}

// gmpTable compares nodedns's default Ps with the -G values.
func gmpTable(r run, variants, workload string, glibcRan bool, threads int, rows []gmpRow) string {
	name := "plain"
	if r.churnRate != "" {
		name = "storm (-S " + r.churnRate + ")"
	}
	if r.cpuLimit != "" {
		name = fmt.Sprintf("%s-CPU limit (-C %s)", r.cpuLimit, r.cpuLimit)
		if r.churnRate != "" {
			name = "storm (-S " + r.churnRate + "), " + name
		}
	}
	var b strings.Builder
	notRun := ""
	if !glibcRan {
		notRun = " (not run: the glibc loop runs with the pod workload)"
	}
	fmt.Fprintf(&b, "\nGOMAXPROCS: nodedns with its default Ps and with --gomaxprocs %s; max QPS, CPU µs/query and p99 from dnsperf on the %s workload (unthrottled; at %d QPS), glibc from %d threads of getaddrinfo%s; mean of %d rounds (min–max); Ps as each agent's go_sched_gomaxprocs_threads reports them\n",
		variants, workload, r.qps, threads, notRun, r.rounds)
	b.WriteString("| run | Ps | max QPS | CPU µs/query | p99 µs | glibc lookups/s | glibc CPU µs/lookup |\n|---|---|---|---|---|---|---|\n")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, row := range rows {
		ps := dash(row.ps)
		if row.server == "nodedns" {
			ps += " (default)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", name, ps, dash(row.qps), dash(row.cpu), dash(row.p99), dash(row.glibcLps), dash(row.glibcCPU))
	}
	return b.String()
}

// lostTally sums the lost-query notes of a run ("COUNT WHAT" lines, COUNT
// "?" when a run printed none).
type lostTally struct {
	runs, fixed, unknown, overload int64
	nonzero                        []string // the notes of runs that lost queries or printed no count
}

// tally reads the notes.
func tally(lines []string) (lostTally, error) {
	var t lostTally
	for _, l := range lines {
		if l == "" {
			continue
		}
		t.runs++
		count, what, _ := strings.Cut(l, " ")
		if count != "0" {
			t.nonzero = append(t.nonzero, l)
		}
		if count == "?" {
			t.unknown++
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(count, "%d", &n); err != nil {
			return t, fmt.Errorf("lost-query note %q: count %q is not a number", l, count)
		}
		if strings.HasPrefix(what, "unthrottled ") {
			t.overload += n
		} else {
			t.fixed += n
		}
	}
	return t, nil
}

// line is the table's last line.
func (t lostTally) line() string {
	s := fmt.Sprintf("Lost: %d queries in the fixed-rate runs and glibc lookups", t.fixed)
	if t.unknown > 0 {
		s += fmt.Sprintf(" (%d runs printed no count)", t.unknown)
	}
	return s + fmt.Sprintf("; %d in the unthrottled runs (overload by design); %d runs in all.", t.overload, t.runs)
}

// zeroLoss is -z's verdict: nil when no fixed-rate run or glibc lookup
// lost anything and every run printed its count.
func (t lostTally) zeroLoss() error {
	if t.fixed > 0 || t.unknown > 0 {
		return fmt.Errorf("-z: %d queries lost at a fixed rate or in glibc lookups, %d runs without a count: failing", t.fixed, t.unknown)
	}
	return nil
}

// header is what the RESULTS section says of the run before its tables.
type header struct {
	date, invocation, tree   string
	machine, versions, setup string
}

// section is the text -o appends: a blank line, the heading, the machine,
// the versions, the setup, and the tables as printed.
func section(h header, table string) string {
	return fmt.Sprintf("\n## %s %s (%s)\n\n%s\n%s\n%s\n%s\n", h.date, h.invocation, h.tree, h.machine, h.versions, h.setup, table)
}
