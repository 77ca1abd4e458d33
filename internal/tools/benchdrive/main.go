// Command benchdrive is scripts/bench.sh's measuring half: the workloads
// (the query files and the names a pod looks up), the runs (dnsperf
// unthrottled and at a fixed rate, the getaddrinfo loop of scripts/gai.c,
// the server's CPU and RSS from /proc, the pod's queries counted on the
// wire), the figures over rounds (mean and min–max), the markdown tables,
// the lost-query tally that -z fails on, and the section -o appends to
// bench/RESULTS.md. bench.sh starts and stops the servers, the control
// plane and the network namespaces, and calls it once the servers answer:
//
//	benchdrive objects  -n N -kind namespaces|services|endpointslices
//	                    the API objects of the cluster workloads, "PATH JSON"
//	benchdrive loopback -work DIR -w 'hit nx cluster' -server ... (figures)
//	benchdrive pod      -work DIR -w 'pod ...' -netns NS -server ... (figures)
//	benchdrive report   -work DIR [-z] [-o FILE] (the run's description)
//
// loopback and pod append their tables to DIR/table.md and their lost
// queries to DIR/lost.txt; report prints the tables with the lost-query
// line, appends them to FILE with the run's description, and exits 1
// when -z finds a fixed-rate run that lost queries or a failed glibc
// lookup. Every run is bounded: dnsperf by -l, each client command by -l
// plus 10 minutes, each readiness wait by 90 s.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// serverList collects repeated -server flags.
type serverList []server

func (l *serverList) String() string { return fmt.Sprint(len(*l), " servers") }
func (l *serverList) Set(v string) error {
	s, err := parseServer(v)
	if err != nil {
		return err
	}
	*l = append(*l, s)
	return nil
}

// options are the flags of every subcommand.
type options struct {
	work, workloads     string
	secs, rounds, qps   int
	nsvc                int
	servers             serverList
	kind                string
	netns, resolv       string
	search              string
	threads             int
	gai                 string
	cpuLimit, churnRate string
	churn, kubeconfig   string
	gmpVariants         string
	out                 string
	zeroLoss            bool
	serversArg          string
	workloadsArg        string
	dirty               bool
	commit, tree, load  string
	corednsBin, kasBin  string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchdrive objects|loopback|pod|report [flags]")
		os.Exit(2)
	}
	var o options
	fs := flag.NewFlagSet("benchdrive "+os.Args[1], flag.ContinueOnError)
	fs.StringVar(&o.work, "work", "", "the run's temporary directory")
	fs.StringVar(&o.workloads, "w", "", "the workloads to measure")
	fs.IntVar(&o.secs, "l", 10, "seconds of each dnsperf run and glibc round")
	fs.IntVar(&o.rounds, "r", 3, "rounds")
	fs.IntVar(&o.qps, "Q", 20000, "the fixed-rate runs' QPS")
	fs.IntVar(&o.nsvc, "n", 1000, "Services of the cluster and pod workloads")
	fs.Var(&o.servers, "server", "NAME@ADDR:PORT/PID[/ADMIN]: a server to measure, in table order (repeated)")
	fs.StringVar(&o.kind, "kind", "", "objects: namespaces, services or endpointslices")
	fs.StringVar(&o.netns, "netns", "", "pod: the pod's network namespace")
	fs.StringVar(&o.resolv, "resolv", "", "pod: the pod's resolv.conf (/etc/netns/NS/resolv.conf)")
	fs.StringVar(&o.search, "search", "", "pod: the pod's search list")
	fs.IntVar(&o.threads, "T", 4, "pod: threads of the glibc lookup loop")
	fs.StringVar(&o.gai, "gai", "", "pod: the getaddrinfo program (scripts/gai.c, built)")
	fs.StringVar(&o.cpuLimit, "C", "", "pod: the servers' CPU limit, for the captions")
	fs.StringVar(&o.churnRate, "S", "", "pod: Services per second of the informer event storm")
	fs.StringVar(&o.churn, "churn", "", "pod: the churn program (internal/tools/churn), with -S")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "pod: the API server's kubeconfig, for churn")
	fs.StringVar(&o.gmpVariants, "G", "", "pod: the --gomaxprocs values of the nodedns-gN servers")
	fs.StringVar(&o.out, "o", "", "report: the file to append the section to")
	fs.BoolVar(&o.zeroLoss, "z", false, "report: fail on a query lost at a fixed rate or a failed glibc lookup")
	fs.StringVar(&o.serversArg, "servers", "", "report: the servers asked for (bench.sh -s, with -c's)")
	fs.StringVar(&o.workloadsArg, "workloads", "", "report: the workloads asked for (bench.sh -w)")
	fs.BoolVar(&o.dirty, "D", false, "report: the run was allowed on a dirty tree")
	fs.StringVar(&o.commit, "commit", "", "report: the commit the figures belong to")
	fs.StringVar(&o.tree, "tree", "", "report: clean or dirty")
	fs.StringVar(&o.load, "load", "", "report: the load average before the run")
	fs.StringVar(&o.corednsBin, "coredns", "", "report: the CoreDNS binary, for its version")
	fs.StringVar(&o.kasBin, "kube-apiserver", "", "report: the kube-apiserver binary, for its version")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "objects":
		err = runObjects(o)
	case "loopback":
		err = runLoopback(o)
	case "pod":
		err = runPod(o)
	case "report":
		err = runReport(o)
	default:
		err = fmt.Errorf("unknown subcommand %q: want objects, loopback, pod or report", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func runObjects(o options) error {
	if o.nsvc < 1 || o.nsvc > 60000 {
		return fmt.Errorf("-n %d: want 1-60000", o.nsvc)
	}
	lines, err := objects(o.kind, o.nsvc)
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	return nil
}

// check validates the flags the measuring subcommands share.
func (o options) check() error {
	switch {
	case o.work == "":
		return errors.New("-work: the run's temporary directory is required")
	case o.secs < 1 || o.secs > 3600:
		return fmt.Errorf("-l %d: want 1-3600 seconds", o.secs)
	case o.rounds < 1 || o.rounds > 100:
		return fmt.Errorf("-r %d: want 1-100 rounds", o.rounds)
	case o.qps < 0 || o.qps > 10_000_000:
		return fmt.Errorf("-Q %d: want 0-10000000", o.qps)
	case o.nsvc < 1 || o.nsvc > 60000:
		return fmt.Errorf("-n %d: want 1-60000", o.nsvc)
	case len(o.servers) == 0:
		return errors.New("no -server to measure")
	}
	return nil
}

// newMeter is the meter of the run, its clients run with prefix in.
func newMeter(o options, in []string) (*meter, error) {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return nil, fmt.Errorf("getconf CLK_TCK: %w", err)
	}
	tck, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || tck <= 0 {
		return nil, fmt.Errorf("getconf CLK_TCK printed %q, want clock ticks per second", out)
	}
	return &meter{in: in, secs: o.secs, qps: o.qps, work: o.work, tck: tck, progress: os.Stderr}, nil
}

// appendTable adds text to the run's tables.
func appendTable(work, text string) error {
	f, err := os.OpenFile(filepath.Join(work, "table.md"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("appending to the tables: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("appending to %s: %w", f.Name(), err)
	}
	return f.Close()
}

// notReady is the error of a server that does not answer as it should,
// with the last lines of its logs in the run's directory.
func notReady(work, s, what string) error {
	msg := fmt.Sprintf("%s does not answer %s", s, what)
	logs, _ := filepath.Glob(filepath.Join(work, s+".*"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		lines = lines[max(0, len(lines)-20):]
		msg += fmt.Sprintf("\n==> %s <==\n%s", l, strings.Join(lines, "\n"))
	}
	return errors.New(msg)
}
