package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// runLoopback measures the loopback workloads (hit, nx, cluster), every
// server in turn in each round, and appends one table per workload.
func runLoopback(o options) error {
	if err := o.check(); err != nil {
		return err
	}
	m, err := newMeter(o, nil)
	if err != nil {
		return err
	}
	r := run{secs: o.secs, rounds: o.rounds, qps: o.qps}
	var names []string
	byName := map[string]server{}
	for _, s := range o.servers {
		names = append(names, s.name)
		byName[s.name] = s
	}
	files := map[string]string{}
	wls := strings.Fields(o.workloads)
	for _, wl := range wls {
		if wl != "hit" && wl != "nx" && wl != "cluster" {
			return fmt.Errorf("-w: %q is not a loopback workload (hit, nx, cluster)", wl)
		}
		q := loopbackQueries(wl, o.nsvc)
		files[wl] = filepath.Join(o.work, wl+".txt")
		if err := writeLines(files[wl], q); err != nil {
			return err
		}
		// Every server must answer as intended (not, say, from a
		// built-in local zone).
		want := "NOERROR +"
		if wl == "nx" {
			want = "NXDOMAIN 0"
		}
		for _, s := range o.servers {
			for _, l := range samples(q) {
				name, typ, _ := strings.Cut(l, " ")
				if got := m.outcome(s.addr, s.port, name, typ); got != want {
					return notReady(o.work, s.name, fmt.Sprintf("%s %s as expected (%s), got: %s", name, typ, want, got))
				}
			}
		}
	}
	var text strings.Builder
	perReader := ""
	for _, wl := range wls {
		file := files[wl]
		for _, s := range o.servers {
			m.warm(s, file, 1)
		}
		acc := map[string]*figures{}
		for _, s := range o.servers {
			acc[s.name] = &figures{}
		}
		for round := 1; round <= o.rounds; round++ {
			for _, s := range o.servers {
				q, err := m.maxQPS(s, file)
				if err != nil {
					return err
				}
				f, err := m.fixed(s, file)
				if err != nil {
					return err
				}
				a := acc[s.name]
				a.qps = append(a.qps, float64(q))
				a.p50 = append(a.p50, float64(f.p50))
				a.p99 = append(a.p99, float64(f.p99))
				a.cpu = append(a.cpu, f.cpu)
				a.rss = append(a.rss, rssMiB(s.pid))
				a.lost += f.lost
				fmt.Fprintf(m.progress, "  %s round %d %s: %d qps; at %d QPS: p50 %d µs, p99 %d µs, %.1f CPU µs/query\n", wl, round, s.name, q, o.qps, f.p50, f.p99, f.cpu)
			}
		}
		text.WriteString(loopbackTable(r, wl, len(loopbackQueries(wl, o.nsvc)), o.nsvc, names, acc))
		if s, ok := byName["nodedns-1r"]; ok && wl == "hit" {
			readers, err := metric(s.admin, "nodedns_server_udp_readers")
			if err != nil {
				return err
			}
			if readers != "1" {
				if readers == "" {
					readers = "an unknown number of"
				}
				return fmt.Errorf("nodedns-1r runs %s UDP readers (its /metrics), want 1", readers)
			}
			perReader = perReaderLine(r, acc["nodedns-1r"].qps)
		}
	}
	text.WriteString(perReader)
	return appendTable(o.work, text.String())
}

// itoa is strconv.Itoa, for brevity in the pod workloads.
func itoa(i int) string { return strconv.Itoa(i) }
