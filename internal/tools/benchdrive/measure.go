package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A server under measurement, as scripts/bench.sh started it.
type server struct {
	name, addr string
	port       int
	pid        int    // the process whose tree's CPU and RSS are counted
	admin      string // host:port of its admin listener (/metrics), "" for none
}

// parseServer reads NAME@ADDR:PORT/PID[/ADMIN].
func parseServer(v string) (server, error) {
	name, rest, ok := strings.Cut(v, "@")
	hostport, tail, ok2 := strings.Cut(rest, "/")
	i := strings.LastIndexByte(hostport, ':')
	if !ok || !ok2 || name == "" || i < 1 {
		return server{}, fmt.Errorf("-server %q: want NAME@ADDR:PORT/PID[/ADMIN]", v)
	}
	s := server{name: name, addr: hostport[:i]}
	pid, admin, _ := strings.Cut(tail, "/")
	var err error
	if s.port, err = strconv.Atoi(hostport[i+1:]); err != nil || s.port < 1 || s.port > 65535 {
		return server{}, fmt.Errorf("-server %q: port %q: want 1-65535", v, hostport[i+1:])
	}
	if s.pid, err = strconv.Atoi(pid); err != nil || s.pid < 1 {
		return server{}, fmt.Errorf("-server %q: pid %q: want a process id", v, pid)
	}
	s.admin = admin
	return s, nil
}

// meter runs the clients (dnsperf, dig, the getaddrinfo loop), inside the
// pod's network namespace when in is set, and reads /proc.
type meter struct {
	in       []string // command prefix, e.g. ip netns exec NS
	secs     int
	qps      int
	work     string // the run's temporary directory (lost.txt lives there)
	tck      float64
	progress io.Writer
}

// cmd runs name args... (inside the namespace) and returns its stdout; the
// error names the command and carries its stderr's end.
func (m *meter) output(name string, args ...string) ([]byte, error) {
	argv := append(append(slices.Clone(m.in), name), args...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(m.secs)*time.Second+10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		e := stderr.Bytes()
		if len(e) > 600 {
			e = e[len(e)-600:]
		}
		return out, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(e))
	}
	return out, nil
}

// noteLost adds a run's lost queries ("?" when it printed no count) to the
// run's tally, lost.txt, checked by the report.
func (m *meter) noteLost(what, count string) error {
	if count == "" {
		count = "?"
	}
	f, err := os.OpenFile(filepath.Join(m.work, "lost.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("noting lost queries: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%s %s\n", count, what); err != nil {
		f.Close()
		return fmt.Errorf("noting lost queries in %s: %w", f.Name(), err)
	}
	return f.Close()
}

// field is the n-th (1-based) word of the first line of out that contains
// key, "" when none does.
func field(out []byte, key string, n int) string {
	for l := range strings.Lines(string(out)) {
		if strings.Contains(l, key) {
			if f := strings.Fields(l); len(f) >= n {
				return f[n-1]
			}
			return ""
		}
	}
	return ""
}

// warm sends file once (twice for passes 2) through the server; its
// outcome is not a figure.
func (m *meter) warm(s server, file string, passes int) {
	m.output("dnsperf", "-s", s.addr, "-p", strconv.Itoa(s.port), "-d", file, "-n", strconv.Itoa(passes), "-q", "100") //nolint:errcheck // warming only
}

// maxQPS is dnsperf unthrottled (500 queries outstanding): the server's
// maximum QPS, 0 when dnsperf printed none. Its lost queries are noted
// (overload, by design: they do not fail -z).
func (m *meter) maxQPS(s server, file string) (int64, error) {
	out, _ := m.output("dnsperf", "-s", s.addr, "-p", strconv.Itoa(s.port), "-d", file, "-l", strconv.Itoa(m.secs), "-c", "8", "-T", "2", "-q", "500")
	if err := m.noteLost(fmt.Sprintf("unthrottled %s:%d %s", s.addr, s.port, filepath.Base(file)), field(out, "Queries lost", 3)); err != nil {
		return 0, err
	}
	q, _ := strconv.ParseFloat(field(out, "Queries per second", 4), 64)
	return int64(q), nil
}

// fixedResult is a fixed-rate run's figures.
type fixedResult struct {
	p50, p99 int64   // µs
	cpu      float64 // server CPU µs per query answered, "%.1f"
	lost     int64
}

// fixed is dnsperf at m.qps with every latency printed (-v): p50 and p99,
// and the server's CPU (its process tree's utime+stime) over the queries
// answered.
func (m *meter) fixed(s server, file string) (fixedResult, error) {
	before := cpuTicks(s.pid)
	out, _ := m.output("dnsperf", "-s", s.addr, "-p", strconv.Itoa(s.port), "-d", file, "-l", strconv.Itoa(m.secs), "-c", "4", "-T", "1", "-Q", strconv.Itoa(m.qps), "-v")
	after := cpuTicks(s.pid)
	done, _ := strconv.ParseFloat(field(out, "Queries completed", 3), 64)
	lostStr := field(out, "Queries lost", 3)
	if err := m.noteLost(fmt.Sprintf("at %d QPS %s:%d %s", m.qps, s.addr, s.port, filepath.Base(file)), lostStr); err != nil {
		return fixedResult{}, err
	}
	var lat []int64
	for l := range strings.Lines(string(out)) {
		if !strings.HasPrefix(l, "> ") {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			lat = append(lat, int64(rounded("%.0f", v*1e6)))
		}
	}
	slices.Sort(lat)
	r := fixedResult{p50: percentile(lat, 0.50), p99: percentile(lat, 0.99)}
	if done > 0 {
		r.cpu = rounded("%.1f", float64(after-before)/m.tck*1e6/done)
	}
	r.lost, _ = strconv.ParseInt(lostStr, 10, 64)
	return r, nil
}

// tree is pid and its children (a supervised nodedns is two processes:
// the supervisor and the serving process it started; both are counted).
func tree(pid int) []int {
	ps := []int{pid}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				ps = append(ps, c)
			}
		}
	}
	return ps
}

// cpuTicks is the tree's utime+stime, in clock ticks.
func cpuTicks(pid int) int64 {
	var t int64
	for _, p := range tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue // ended meanwhile
		}
		// Past the command name, which may hold spaces and parentheses:
		// the state is field 3, utime and stime fields 14 and 15.
		_, rest, _ := strings.Cut(string(b), ") ")
		if f := strings.Fields(rest); len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			t += u + s
		}
	}
	return t
}

// rssMiB is the tree's resident memory, the pages of the executable's
// file (shared by a supervisor and its serving process) counted once.
func rssMiB(pid int) float64 {
	var kb, file int64
	for _, p := range tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for l := range strings.Lines(string(b)) {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "RssAnon:", "RssShmem:":
				kb += v
			case "RssFile:":
				file = max(file, v)
			}
		}
	}
	return rounded("%.1f", float64(kb+file)/1024)
}

// outcome asks the server once with dig: "RCODE +" (with answer records),
// "RCODE 0", or "timeout".
func (m *meter) outcome(addr string, port int, name, typ string) string {
	out, _ := m.output("dig", "+time=2", "+tries=2", "@"+addr, "-p", strconv.Itoa(port), name, typ)
	st, answers := "", 0
	for l := range strings.Lines(string(out)) {
		f := strings.Fields(l)
		if strings.Contains(l, "->>HEADER<<-") && len(f) >= 6 {
			st = strings.TrimSuffix(f[5], ",")
		}
		if strings.HasPrefix(l, ";; flags:") {
			for i := range f[:len(f)-1] {
				if f[i] == "ANSWER:" {
					answers, _ = strconv.Atoi(strings.TrimSuffix(f[i+1], ","))
				}
			}
		}
	}
	if st == "" {
		return "timeout"
	}
	if answers > 0 {
		return st + " +"
	}
	return st + " 0"
}

// metric is the value of a metric without labels on the admin listener's
// /metrics, "" when it has none.
func metric(admin, name string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		return "", fmt.Errorf("reading %s from %s/metrics: %w", name, admin, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("reading %s from %s/metrics: %w", name, admin, err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+" "); ok {
			return v, nil
		}
	}
	return "", nil
}

// writeLines writes a query or name file.
func writeLines(path string, lines []string) error {
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
