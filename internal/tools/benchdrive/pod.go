package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pod is the pod workloads' state: the servers on the pod link, the
// names, the figures kept for the GOMAXPROCS table.
type pod struct {
	o       options
	m       *meter
	r       run
	names   podNames
	servers []server
	gmp     map[string]string
	files   map[string]string // "WORKLOAD walker|walk" -> query file
}

// runPod measures the pod workloads from the pod's network namespace:
// dnsperf per workload, the search-path shortcut against a plain hit
// (with pod-shortcut and pod-hit), the getaddrinfo loop (with pod), and
// the GOMAXPROCS comparison (with -G).
func runPod(o options) error {
	if err := o.check(); err != nil {
		return err
	}
	switch {
	case o.netns == "" || o.resolv == "":
		return errors.New("pod: -netns and -resolv are required")
	case o.threads < 1 || o.threads > 64:
		return fmt.Errorf("-T %d: want 1-64 threads", o.threads)
	case o.churnRate != "" && (o.churn == "" || o.kubeconfig == ""):
		return fmt.Errorf("-S %s: -churn and -kubeconfig are required", o.churnRate)
	}
	m, err := newMeter(o, []string{"ip", "netns", "exec", o.netns})
	if err != nil {
		return err
	}
	p := &pod{o: o, m: m, r: run{secs: o.secs, rounds: o.rounds, qps: o.qps, cpuLimit: o.cpuLimit, churnRate: o.churnRate},
		names: newPodNames(o.nsvc, strings.Fields(o.search)), servers: o.servers, gmp: map[string]string{}, files: map[string]string{}}
	wls := strings.Fields(o.workloads)
	for _, wl := range wls {
		if wl != "pod" && wl != "pod-shortcut" && wl != "pod-hit" {
			return fmt.Errorf("-w: %q is not a pod workload (pod, pod-shortcut, pod-hit)", wl)
		}
	}
	if err := p.writeFiles(); err != nil {
		return err
	}
	if err := p.resolvConf(p.servers[0]); err != nil {
		return err
	}
	if err := p.ready(); err != nil {
		return err
	}
	for _, s := range p.servers {
		if strings.HasPrefix(s.name, "nodedns") && s.admin != "" {
			if p.gmp[s.name], err = metric(s.admin, "go_sched_gomaxprocs_threads"); err != nil {
				return err
			}
		}
	}
	stopChurn := func() (string, error) { return "", nil }
	if o.churnRate != "" {
		if stopChurn, err = p.startChurn(); err != nil {
			return err
		}
	}
	text, err := p.measure(wls)
	churned, cerr := stopChurn()
	if err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	text += churned
	return appendTable(o.work, text)
}

// file is the query file of workload wl for server s.
func (p *pod) file(wl, s string) string {
	if wl == "pod-hit" || walks(s) {
		return p.files[wl+" first"]
	}
	return p.files[wl+" walk"]
}

// writeFiles writes every pod workload's query files and the glibc
// loop's names.
func (p *pod) writeFiles() error {
	for _, wl := range []string{"pod", "pod-shortcut", "pod-hit"} {
		for _, kind := range []string{"first", "walk"} {
			suffix := ""
			if kind == "walk" {
				suffix = "-walk"
			}
			path := filepath.Join(p.o.work, wl+suffix+".txt")
			if err := writeLines(path, p.names.queries(wl, kind == "first")); err != nil {
				return err
			}
			p.files[wl+" "+kind] = path
		}
	}
	return writeLines(filepath.Join(p.o.work, "glibc.txt"), p.names.lookups("pod"))
}

// resolvConf is the pod's resolv.conf, as kubelet writes it, naming s (ip
// netns exec binds it over /etc/resolv.conf).
func (p *pod) resolvConf(s server) error {
	text := fmt.Sprintf("nameserver %s\nsearch %s\noptions ndots:5\n", s.addr, strings.Join(p.names.search, " "))
	if err := os.WriteFile(p.o.resolv, []byte(text), 0o644); err != nil {
		return fmt.Errorf("writing the pod's resolv.conf: %w", err)
	}
	return nil
}

// ready waits, up to 90 s a name, until every server has synced and (for
// the walkers) knows the pod: the first expansion of an external name and
// of another namespace's Service answer.
func (p *pod) ready() error {
	other := p.names.otherSvc()
	for _, s := range p.servers {
		probes := []string{"host1.example.test", other + ".svc.cluster.local", first("svc-0")}
		if walks(s.name) {
			probes = []string{first("host1.example.test"), first(other), first("svc-0")}
		}
		for _, n := range probes {
			if strings.HasPrefix(n, ".") {
				continue // every Service is in the pod's namespace
			}
			got := ""
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if got = p.m.outcome(s.addr, s.port, n, "A"); got == "NOERROR +" {
					break
				}
			}
			if got != "NOERROR +" {
				return notReady(p.o.work, s.name, fmt.Sprintf("%s A from the pod within 90 s (got: %s)", n, got))
			}
		}
	}
	return nil
}

// counts is the UDP queries and TCP connections the pod sent s since the
// counters were last zeroed (iptables OUTPUT rules bench.sh added).
func (p *pod) counts(s server) (udp, tcp int64, err error) {
	out, err := p.m.output("iptables", "-w", "-L", "OUTPUT", "-v", "-x", "-n")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the pod's counters: %w", err)
	}
	for l := range strings.Lines(string(out)) {
		f := strings.Fields(l)
		if len(f) < 9 || f[8] != s.addr {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch {
		case strings.Contains(l, " udp dpt:53"):
			udp = n
		case strings.Contains(l, " tcp dpt:53"):
			tcp = n
		}
	}
	return udp, tcp, nil
}

// zero zeroes the pod's counters.
func (p *pod) zero() error {
	if _, err := p.m.output("iptables", "-w", "-Z", "OUTPUT"); err != nil {
		return fmt.Errorf("zeroing the pod's counters: %w", err)
	}
	return nil
}

// measure runs the workloads and returns their tables.
func (p *pod) measure(wls []string) (string, error) {
	var text strings.Builder
	names := make([]string, 0, len(p.servers))
	for _, s := range p.servers {
		names = append(names, s.name)
	}
	kept := map[string]map[string]*figures{} // workload -> server -> figures
	for _, wl := range wls {
		acc := map[string]*figures{}
		lookups := len(p.names.lookups(wl))
		// Warm: twice through the file (a walker builds its shortcut on
		// the second query of a name), counting the queries on the wire
		// over the 2 x lookups of the two passes.
		for _, s := range p.servers {
			if err := p.zero(); err != nil {
				return "", err
			}
			p.m.warm(s, p.file(wl, s.name), 2)
			udp, _, err := p.counts(s)
			if err != nil {
				return "", err
			}
			if udp <= 0 {
				return "", fmt.Errorf("no query from the pod to %s counted on the wire (iptables OUTPUT counters)", s.name)
			}
			acc[s.name] = &figures{qpl: fmt.Sprintf("%.2f", float64(udp)/float64(2*lookups))}
			fmt.Fprintf(p.m.progress, "  %s %s: %d queries on the wire for 2 x %d lookups: %s per lookup\n", wl, s.name, udp, lookups, acc[s.name].qpl)
		}
		for round := 1; round <= p.o.rounds; round++ {
			for _, s := range p.servers {
				file := p.file(wl, s.name)
				q, err := p.m.maxQPS(s, file)
				if err != nil {
					return "", err
				}
				f, err := p.m.fixed(s, file)
				if err != nil {
					return "", err
				}
				a := acc[s.name]
				qpl, _ := strconv.ParseFloat(a.qpl, 64)
				a.qps = append(a.qps, float64(q))
				a.lps = append(a.lps, float64(int64(div(float64(q), qpl))))
				a.p50 = append(a.p50, float64(f.p50))
				a.p99 = append(a.p99, float64(f.p99))
				a.cpu = append(a.cpu, f.cpu)
				a.cpul = append(a.cpul, rounded("%.1f", f.cpu*qpl))
				a.rss = append(a.rss, rssMiB(s.pid))
				a.lost += f.lost
				fmt.Fprintf(p.m.progress, "  %s round %d %s: %d qps; at %d QPS: p50 %d µs, p99 %d µs, %.1f CPU µs/query\n", wl, round, s.name, q, p.o.qps, f.p50, f.p99, f.cpu)
			}
		}
		text.WriteString(podTable(p.r, wl, podCaption(wl, lookups, len(p.names.svc)), names, acc, p.gmp))
		kept[wl] = acc
	}
	if slices.Contains(wls, "pod-shortcut") && slices.Contains(wls, "pod-hit") {
		t, err := p.pairs()
		if err != nil {
			return "", err
		}
		text.WriteString(t)
	}
	var glibc map[string]*glibcFigures
	if slices.Contains(wls, "pod") {
		var err error
		if glibc, err = p.glibc(); err != nil {
			return "", err
		}
		text.WriteString(glibcTable(p.r, p.o.threads, len(p.names.lookups("pod")), strings.Join(p.names.search, " "), names, glibc))
	}
	if p.o.gmpVariants != "" {
		gwl := "pod"
		if !slices.Contains(wls, "pod") {
			gwl = wls[0]
		}
		var rows []gmpRow
		for _, s := range append([]string{"nodedns"}, prefixed("nodedns-g", strings.Fields(p.o.gmpVariants))...) {
			if !slices.Contains(names, s) {
				continue
			}
			row := gmpRow{server: s, ps: p.gmp[s]}
			if f := kept[gwl][s]; f != nil {
				row.qps, row.cpu, row.p99 = f.qps.spread("%d"), f.cpu.spread("%.1f"), f.p99.spread("%d")
			}
			if g := glibc[s]; g != nil {
				row.glibcLps, row.glibcCPU = g.lps.spread("%d"), g.cpu.spread("%.1f")
			}
			rows = append(rows, row)
		}
		text.WriteString(gmpTable(p.r, p.o.gmpVariants, gwl, glibc != nil, p.o.threads, rows))
	}
	return text.String(), nil
}

func prefixed(prefix string, vs []string) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, prefix+v)
	}
	return out
}

// pairs measures the search-path shortcut against a plain cache hit on
// each walking server (not the -G variants): single runs on a shared
// machine swing by 20 % between identical servers, so each gets
// max(rounds, 3) pairs of runs back to back on the same warm server.
func (p *pod) pairs() (string, error) {
	n := max(p.o.rounds, 3)
	text := pairsHeader(p.r, n)
	sc, hit := p.files["pod-shortcut first"], p.files["pod-hit first"]
	for _, s := range p.servers {
		if !walks(s.name) || strings.HasPrefix(s.name, "nodedns-g") {
			continue
		}
		var ps []pair
		for i := 1; i <= n; i++ {
			var pr pair
			var err error
			if pr.qpsShortcut, err = p.m.maxQPS(s, sc); err != nil {
				return "", err
			}
			if pr.qpsHit, err = p.m.maxQPS(s, hit); err != nil {
				return "", err
			}
			a, err := p.m.fixed(s, sc)
			if err != nil {
				return "", err
			}
			b, err := p.m.fixed(s, hit)
			if err != nil {
				return "", err
			}
			pr.cpuShortcut, pr.cpuHit = a.cpu, b.cpu
			fmt.Fprintf(p.m.progress, "  pair %d %s: shortcut %d qps %.1f µs/query, hit %d qps %.1f µs/query\n", i, s.name, pr.qpsShortcut, a.cpu, pr.qpsHit, b.cpu)
			ps = append(ps, pr)
		}
		text += pairsRow(s.name, ps)
	}
	return text, nil
}

// glibc runs the getaddrinfo loop from the pod against each server in
// turn, each warmed once, the queries it took counted on the wire.
func (p *pod) glibc() (map[string]*glibcFigures, error) {
	if p.o.gai == "" {
		return nil, errors.New("pod: the pod workload needs -gai, the getaddrinfo program")
	}
	names := filepath.Join(p.o.work, "glibc.txt")
	acc := map[string]*glibcFigures{}
	for _, s := range p.servers {
		if err := p.resolvConf(s); err != nil {
			return nil, err
		}
		if _, err := p.m.output(p.o.gai, "loop", itoa(p.o.threads), "3", names); err != nil {
			return nil, fmt.Errorf("warming %s with the glibc loop: %w", s.name, err)
		}
		acc[s.name] = &glibcFigures{}
	}
	for round := 1; round <= p.o.rounds; round++ {
		for _, s := range p.servers {
			if err := p.resolvConf(s); err != nil {
				return nil, err
			}
			if err := p.zero(); err != nil {
				return nil, err
			}
			before := cpuTicks(s.pid)
			out, err := p.m.output(p.o.gai, "loop", itoa(p.o.threads), itoa(p.o.secs), names)
			if err != nil {
				return nil, fmt.Errorf("the glibc loop against %s: %w", s.name, err)
			}
			after := cpuTicks(s.pid)
			udp, tcp, err := p.counts(s)
			if err != nil {
				return nil, err
			}
			line := strings.TrimSpace(string(out))
			fmt.Fprintf(p.m.progress, "  glibc round %d %s: %s; %d UDP queries, %d TCP connections\n", round, s.name, line, udp, tcp)
			v, err := gaiLoopLine(line)
			if err != nil {
				return nil, fmt.Errorf("the glibc loop against %s: %w", s.name, err)
			}
			if err := p.m.noteLost(fmt.Sprintf("glibc lookups (failed) %s round %d", s.name, round), strconv.FormatInt(int64(v["failed"]), 10)); err != nil {
				return nil, err
			}
			n := v["lookups"]
			g := acc[s.name]
			qpl := rounded("%.2f", div(float64(udp), n))
			g.lps = append(g.lps, float64(int64(v["lookups_per_s"])))
			g.p50 = append(g.p50, float64(int64(v["p50_us"])))
			g.p99 = append(g.p99, float64(int64(v["p99_us"])))
			g.qpl = append(g.qpl, qpl)
			// glibc sends A and AAAA of a step together: a round trip is
			// two queries.
			g.rt = append(g.rt, rounded("%.2f", qpl/2))
			g.cpu = append(g.cpu, rounded("%.1f", div(float64(after-before)/p.m.tck*1e6, n)))
			g.tcp += tcp
			g.failed += int64(v["failed"])
		}
	}
	return acc, nil
}

// gaiLoopLine reads the loop's line, "KEY VALUE ..." pairs.
func gaiLoopLine(line string) (map[string]float64, error) {
	f := strings.Fields(line)
	v := map[string]float64{}
	for i := 0; i+1 < len(f); i += 2 {
		x, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %s %q is not a number", line, f[i], f[i+1])
		}
		v[f[i]] = x
	}
	for _, k := range []string{"lookups", "failed", "lookups_per_s", "p50_us", "p99_us"} {
		if _, ok := v[k]; !ok {
			return nil, fmt.Errorf("line %q has no %s", line, k)
		}
	}
	return v, nil
}

// startChurn starts the informer event storm (-S) and returns what stops
// it and the line the tables end with.
func (p *pod) startChurn() (func() (string, error), error) {
	logPath := filepath.Join(p.o.work, "churn.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("churn: %w", err)
	}
	c := exec.Command(p.o.churn, "-kubeconfig", p.o.kubeconfig, "-rate", p.o.churnRate, "-keep", "100", "-for", "2h")
	c.Stdout, c.Stderr = log, log
	if err := c.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting churn: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	time.Sleep(3 * time.Second) // its first Services, before the measurements
	return func() (string, error) {
		defer log.Close()
		c.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have ended: Wait says
		select {
		case err := <-done:
			if err != nil {
				return "", fmt.Errorf("churn: %w (its log: %s)", err, logPath)
			}
		case <-time.After(40 * time.Second):
			c.Process.Kill() //nolint:errcheck // Wait says
			<-done
			return "", fmt.Errorf("churn did not stop within 40 s of SIGTERM (its log: %s)", logPath)
		}
		b, err := os.ReadFile(logPath)
		if err != nil {
			return "", fmt.Errorf("churn: %w", err)
		}
		firstLine, _, _ := strings.Cut(string(b), "\n")
		return fmt.Sprintf("\nInformer event storm meanwhile: %s\n", firstLine), nil
	}, nil
}
