package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"
)

// runReport prints the run's tables with the lost-query line, names the
// runs that lost queries on stderr, fails -z, and appends the section to
// -o.
func runReport(o options) error {
	if o.work == "" {
		return errors.New("-work: the run's temporary directory is required")
	}
	table, err := os.ReadFile(filepath.Join(o.work, "table.md"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading the tables: %w", err)
	}
	notes, err := os.ReadFile(filepath.Join(o.work, "lost.txt"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading the lost-query notes: %w", err)
	}
	t, err := tally(strings.Split(string(notes), "\n"))
	if err != nil {
		return err
	}
	text := string(table) + "\n" + t.line() + "\n"
	fmt.Println(text)
	if t.fixed > 0 || t.unknown > 0 || t.overload > 0 {
		fmt.Fprintln(os.Stderr, "bench: runs with lost queries (or no count):")
		for _, n := range t.nonzero {
			fmt.Fprintln(os.Stderr, "  "+n)
		}
	}
	if o.zeroLoss {
		if err := t.zeroLoss(); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	h := header{date: time.Now().UTC().Format("2006-01-02"), invocation: invocation(o), tree: o.commit}
	if h.tree == "" {
		h.tree = "unknown"
	}
	// Run directly in a namespace (without bench.sh's check of the tree):
	// dirty, as far as anyone can tell.
	if o.tree != "clean" {
		h.tree += ", dirty"
	}
	h.machine = fmt.Sprintf("Machine: %s; load before the run: %s.", machine(), o.load)
	h.versions = versions(o) + "."
	h.setup = setup(o)
	f, err := os.OpenFile(o.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	if _, err := f.WriteString(section(h, text)); err != nil {
		f.Close()
		return fmt.Errorf("-o %s: %w", o.out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-o %s: %w", o.out, err)
	}
	fmt.Println("appended to " + o.out)
	return nil
}

// workloadKinds says whether the workloads asked for include the cluster
// workload or one of the pod workloads (which need the control plane too),
// and whether a loopback workload is the cluster one.
func workloadKinds(workloads string) (cluster, podwl, lcluster bool) {
	for _, w := range strings.Fields(workloads) {
		switch {
		case strings.HasPrefix(w, "pod"):
			podwl, cluster = true, true
		case w == "cluster":
			cluster, lcluster = true, true
		}
	}
	return cluster, podwl, lcluster
}

// invocation is the command line the section's heading gives: the flags
// that shape the figures.
func invocation(o options) string {
	cluster, podwl, _ := workloadKinds(o.workloadsArg)
	s := fmt.Sprintf("scripts/bench.sh -l %d -r %d -Q %d -s '%s' -w '%s'", o.secs, o.rounds, o.qps, o.serversArg, o.workloadsArg)
	if cluster {
		s += fmt.Sprintf(" -n %d", o.nsvc)
	}
	if podwl {
		s += fmt.Sprintf(" -T %d", o.threads)
	}
	if o.gmpVariants != "" {
		s += fmt.Sprintf(" -G '%s'", o.gmpVariants)
	}
	if o.cpuLimit != "" {
		s += " -C " + o.cpuLimit
	}
	if o.churnRate != "" {
		s += " -S " + o.churnRate
	}
	if o.dirty {
		s += " -D"
	}
	return s
}

// setup is the sentence on what ran beside the servers.
func setup(o options) string {
	cluster, podwl, lcluster := workloadKinds(o.workloadsArg)
	s := "Client and servers share the machine's cores; every server is a caching forwarder to the same local test upstream"
	if cluster {
		s += "; etcd and kube-apiserver run alongside"
		if lcluster {
			s += ", with the separate nodedns that unbound and dnsmasq forward cluster names to"
		}
		if podwl && slices.Contains(strings.Fields(o.serversArg), "node-cache") {
			s += ", and the central CoreDNS node-cache forwards the cluster zones to"
		}
		s += " (idle during the runs unless -S)"
	}
	return s + "."
}

// run1 is the output of a command, "" when it fails (a version the
// section then leaves blank, as the shell did).
func run1(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}

// word is the n-th (1-based) word of the first line of out matching re,
// "" when none does.
func word(out, re string, n int) string {
	r := regexp.MustCompile(re)
	for l := range strings.Lines(out) {
		if r.MatchString(l) {
			if f := strings.Fields(l); len(f) >= n {
				return f[n-1]
			}
			return ""
		}
	}
	return ""
}

// machine describes the host: cores, memory, kernel, CPU model.
func machine() string {
	cores := strings.TrimSpace(run1("nproc"))
	if cores == "" {
		cores = fmt.Sprint(runtime.NumCPU())
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(word(string(b), "^MemTotal", 2), "%g", &kb); err == nil {
			mem = fmt.Sprintf("%.0f GiB", kb/1048576)
		}
	}
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "model name") {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s cores, %s, %s, %s", cores, mem, strings.TrimSpace(run1("uname", "-sr")), model)
}

// versions of the clients and servers the run used.
func versions(o options) string {
	cluster, podwl, _ := workloadKinds(o.workloadsArg)
	v := fmt.Sprintf("dnsperf %s, unbound %s, dnsmasq %s, %s", word(run1("dnsperf", "-h"), "Version", 2),
		word(run1("unbound", "-V"), "Version", 2), word(run1("dnsmasq", "-v"), "", 3), runtime.Version())
	if o.corednsBin != "" {
		first, _, _ := strings.Cut(run1(o.corednsBin, "-version"), "\n")
		_, ver, _ := strings.Cut(first, "-")
		ver, _, _ = strings.Cut(ver, "-")
		v += ", CoreDNS " + ver
	}
	if cluster {
		v += fmt.Sprintf(", kube-apiserver %s, etcd %s", word(run1(o.kasBin, "--version"), "", 2), word(run1("etcd", "--version"), "", 3))
	}
	if podwl {
		first, _, _ := strings.Cut(run1("ldd", "--version"), "\n")
		v += ", " + strings.TrimPrefix(first, "ldd ")
	}
	return v
}
