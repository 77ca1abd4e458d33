//go:build integration && scale

package integration

// Start-up at scale against the loaded API server of scale_test.go:
//
//   - TestClusterScaleRace (scripts/k8s-scale.sh race): nodedns and
//     CoreDNS's kubernetes plugin started the same way, one after the
//     other, each polled for the last Service's name until it answers;
//     time to answer and peak RSS for each, several runs.
//   - TestClusterScaleFleet (scripts/k8s-scale.sh fleet): ten agents started
//     at once, as after a node-pool restart or an API-server upgrade; how
//     many LIST requests the API server served from etcd and how many from
//     its watch cache.
//
// Both read the API server's own metrics for the list requests: every
// LIST (apiserver_request_total{verb="LIST"}), those served from the watch
// cache (apiserver_cache_list_total) and those served from etcd
// (apiserver_storage_list_total; one per page) with the etcd range reads
// they made (etcd_requests_total{operation="list"}). Figures, not asserts.

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// The resources the DNS servers list.
var scaleResources = []string{"services", "endpointslices", "namespaces", "pods"}

// apiMetrics are counters of the API server, keyed "kind/resource":
// kind is list (every LIST request), cache (served from the watch cache),
// etcd (served from etcd) or range (etcd range reads for lists).
type apiMetrics map[string]float64

var metricLine = regexp.MustCompile(`^([a-zA-Z_:]+)\{([^}]*)\} ([0-9.eE+-]+)$`)

// readAPIMetrics scrapes the API server's /metrics.
func readAPIMetrics(t *testing.T, cp *ControlPlane) apiMetrics {
	t.Helper()
	raw, err := cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctxBG)
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	m := apiMetrics{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		f := metricLine.FindStringSubmatch(sc.Text())
		if f == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(f[2], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(v, `"`)
			}
		}
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			continue
		}
		res := labels["resource"]
		if !slices.Contains(scaleResources, res) {
			continue
		}
		switch {
		case f[1] == "apiserver_request_total" && labels["verb"] == "LIST":
			m["list/"+res] += v
		case f[1] == "apiserver_cache_list_total":
			m["cache/"+res] += v
		case f[1] == "apiserver_storage_list_total":
			m["etcd/"+res] += v
		case f[1] == "etcd_requests_total" && labels["operation"] == "list":
			m["range/"+res] += v
		}
	}
	return m
}

func (m apiMetrics) sub(o apiMetrics) apiMetrics {
	d := apiMetrics{}
	for k, v := range m {
		d[k] = v - o[k]
	}
	return d
}

func (m apiMetrics) total(kind string) int {
	n := 0.0
	for _, r := range scaleResources {
		n += m[kind+"/"+r]
	}
	return int(n)
}

// listSummary says how many LISTs there were and who served them.
func (m apiMetrics) listSummary() string {
	var per []string
	for _, r := range scaleResources {
		if n := m["list/"+r]; n > 0 {
			per = append(per, fmt.Sprintf("%s %d (etcd %d)", r, int(n), int(m["etcd/"+r])))
		}
	}
	return fmt.Sprintf("%d LIST requests: %d from the watch cache, %d from etcd (%d etcd range reads) [%s]",
		m.total("list"), m.total("cache"), m.total("etcd"), m.total("range"), strings.Join(per, ", "))
}

// raceServer is one DNS server of the race.
type raceServer struct {
	name  string
	start func(t *testing.T, addr, admin, logPath string) *cpProc
}

// raceResult is one start of one server.
type raceResult struct {
	answer   time.Duration // exec to the first right answer for the last Service
	hwm      int64         // VmHWM (kB) when it answered
	hwmAfter int64         // VmHWM (kB) 3 s later
	lists    apiMetrics
	synced   string // the server's own sync figure, from its log
}

// TestClusterScaleRace starts each server against the loaded API server
// and polls the last Service's name until it answers. SCALE_RUNS (5) sets
// the runs; the servers take turns, in a different order each run.
// NODEDNS_COREDNS is the CoreDNS binary (scripts/coredns.sh);
// SCALE_BASE_BIN, when set, is an older nodedns raced as "nodedns-base".
func TestClusterScaleRace(t *testing.T) {
	l := scaleCluster(t)
	runs := envInt("SCALE_RUNS", 5)
	up := dnstest.Start(t, dnstest.Rcode(dns.RcodeNameError))

	nodedns := func(bin string) func(t *testing.T, addr, admin, logPath string) *cpProc {
		return func(t *testing.T, addr, admin, logPath string) *cpProc {
			p, err := startCPProc("nodedns", logPath, bin, "serve",
				"--listen", addr, "--upstream", up.Addr, "--kubeconfig", l.cp.Kubeconfig,
				"--cluster-domain", "cluster.local", "--cluster-ttl", "5s", "--pods", "insecure",
				"--admin", admin, "--loop-check=false", "--lameduck", "0s")
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	servers := []raceServer{{"nodedns", nodedns(nodednsBin)}}
	if base := os.Getenv("SCALE_BASE_BIN"); base != "" {
		servers = append(servers, raceServer{"nodedns-base", nodedns(base)})
	}
	coredns := os.Getenv("NODEDNS_COREDNS")
	need(t, coredns != "", "NODEDNS_COREDNS: the CoreDNS binary (scripts/coredns.sh)")
	servers = append(servers, raceServer{"coredns", func(t *testing.T, addr, admin, logPath string) *cpProc {
		host, port, _ := strings.Cut(addr, ":")
		// CoreDNS's kubernetes plugin as kubeadm deploys it (pods
		// insecure, ttl 5), with the same API server, credentials and
		// upstream as the agent.
		conf := fmt.Sprintf(`.:%s {
  bind %s
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig %s test
    pods insecure
    ttl 5
    fallthrough in-addr.arpa ip6.arpa
  }
  forward . %s
}
`, port, host, l.cp.Kubeconfig, up.Addr)
		cf := filepath.Join(filepath.Dir(logPath), "Corefile")
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := startCPProc("coredns", logPath, coredns, "-conf", cf)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}})

	results := map[string][]raceResult{}
	for run := range runs {
		for i := range servers {
			s := servers[(i+run)%len(servers)]
			r := raceOnce(t, l, s)
			results[s.name] = append(results[s.name], r)
			t.Logf("run %d %-13s answered in %v, VmHWM %.1f MiB at the answer, %.1f MiB 3 s later; %s; %s",
				run+1, s.name, r.answer.Round(time.Millisecond), mib(r.hwm), mib(r.hwmAfter), r.synced, r.lists.listSummary())
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "start race (%d services, %d endpoint addresses; the last Service %s; %d runs; load average %s)\n",
		l.nsvc, l.nsvc*l.perSvc, l.lastName, runs, loadAvg())
	fmt.Fprintf(&b, "  %-13s %-26s %-22s %-22s %s\n", "server", "time to answer: median", "(min .. max)", "peak RSS: median (max)", "LISTs per start (etcd)")
	for _, s := range servers {
		rs := results[s.name]
		ans := make([]time.Duration, len(rs))
		peaks := make([]int64, len(rs))
		lists, etcd := 0, 0
		for i, r := range rs {
			ans[i], peaks[i] = r.answer, r.hwmAfter
			lists += r.lists.total("list")
			etcd += r.lists.total("etcd")
		}
		slices.Sort(ans)
		slices.Sort(peaks)
		fmt.Fprintf(&b, "  %-13s %-26v %-22s %-22s %.1f (%.1f)\n", s.name, ans[len(ans)/2].Round(time.Millisecond),
			fmt.Sprintf("(%v .. %v)", ans[0].Round(time.Millisecond), ans[len(ans)-1].Round(time.Millisecond)),
			fmt.Sprintf("%.1f MiB (%.1f)", mib(peaks[len(peaks)/2]), mib(peaks[len(peaks)-1])),
			float64(lists)/float64(len(rs)), float64(etcd)/float64(len(rs)))
	}
	t.Log("\n" + b.String())
	scaleWriteReport(t, b.String())
}

// raceOnce starts s, polls the last Service until it answers, and stops s.
func raceOnce(t *testing.T, l *scaleLoad, s raceServer) raceResult {
	t.Helper()
	dnsPort, adminPort := agentPorts(t)
	addr := "127.0.0.1:" + strconv.Itoa(dnsPort)
	logPath := filepath.Join(t.TempDir(), s.name+".log")
	m0 := readAPIMetrics(t, l.cp)
	q := new(dns.Msg)
	q.SetQuestion(l.lastName, dns.TypeA)
	cl := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}

	t0 := time.Now()
	p := s.start(t, addr, "127.0.0.1:"+strconv.Itoa(adminPort), logPath)
	defer p.stop(10 * time.Second)
	var r raceResult
	for {
		if p.exited() {
			t.Fatalf("%s exited: %v\n%s", s.name, p.err, tailFile(logPath, 40))
		}
		if time.Since(t0) > 2*time.Minute {
			t.Fatalf("%s: %s not answered after 2 minutes\n%s", s.name, l.lastName, tailFile(logPath, 40))
		}
		m, _, err := cl.Exchange(q, addr)
		if err == nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
			if a, ok := m.Answer[0].(*dns.A); ok && (l.lastIP == "" || a.A.String() == l.lastIP) {
				r.answer = time.Since(t0)
				break
			}
			t.Fatalf("%s: %s answered %v, want %s", s.name, l.lastName, m.Answer, l.lastIP)
		}
		if err == nil && m.Rcode == dns.RcodeNameError {
			t.Errorf("%s: a false NXDOMAIN for %s before its informers synced", s.name, l.lastName)
		}
		time.Sleep(2 * time.Millisecond)
	}
	_, r.hwm = procMem(t, p.cmd.Process.Pid)
	time.Sleep(3 * time.Second)
	_, r.hwmAfter = procMem(t, p.cmd.Process.Pid)
	r.lists = readAPIMetrics(t, l.cp).sub(m0)
	r.synced = syncFigure(logPath)
	return r
}

var (
	syncedRE = regexp.MustCompile(`cluster zone synced.* took=([0-9.a-zµ]+)`)
	listedRE = regexp.MustCompile(`msg=listed .*?resource=([a-z]+) items=([0-9]+) bytes=([0-9]+) .*?took=([0-9.a-zµ]+)`)
)

// syncFigure is the agent's own account of its start, from its log: each
// list (items, bytes, time from request to decoded) and the sync.
func syncFigure(logPath string) string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	var parts []string
	for _, f := range listedRE.FindAllSubmatch(data, -1) {
		parts = append(parts, fmt.Sprintf("%s (%s, %s B) listed in %s", f[1], f[2], f[3], f[4]))
	}
	if f := syncedRE.FindSubmatch(data); f != nil {
		parts = append(parts, "index synced after "+string(f[1]))
	}
	if len(parts) == 0 {
		return "no sync line in its log"
	}
	return strings.Join(parts, ", ")
}

// TestClusterScaleFleet starts SCALE_AGENTS (10) agents at once against the
// loaded API server and counts the list requests that reach etcd until all
// are ready. With SCALE_BASE_BIN set, a fleet of that binary goes first.
// Then each fleet again through an API server restart (an upgrade): the
// API server is stopped, the agents started, the API server started again,
// so their first lists meet a watch cache that is still initializing.
func TestClusterScaleFleet(t *testing.T) {
	l := scaleCluster(t)
	n := envInt("SCALE_AGENTS", 10)
	up := dnstest.Start(t, dnstest.Rcode(dns.RcodeNameError))
	bins := [][2]string{}
	if base := os.Getenv("SCALE_BASE_BIN"); base != "" {
		bins = append(bins, [2]string{"nodedns-base", base})
	}
	bins = append(bins, [2]string{"nodedns", nodednsBin})

	var b strings.Builder
	fmt.Fprintf(&b, "fleet start (%d agents at once; %d services, %d endpoint addresses; load average %s)\n",
		n, l.nsvc, l.nsvc*l.perSvc, loadAvg())
	for _, restart := range []bool{false, true} {
		if restart {
			fmt.Fprintf(&b, "  through an API server restart (counters from its start, its own start-up lists included):\n")
		}
		for _, bin := range bins {
			b.WriteString(fleetOnce(t, l, up.Addr, n, bin[0], bin[1], restart))
			time.Sleep(2 * time.Second)
		}
	}
	t.Log("\n" + b.String())
	scaleWriteReport(t, b.String())
}

// fleetOnce starts n agents of bin at once and reports when all were ready
// and the LISTs the API server served meanwhile.
func fleetOnce(t *testing.T, l *scaleLoad, upstream string, n int, name, bin string, restart bool) string {
	t.Helper()
	var m0 apiMetrics
	if restart {
		l.cp.StopAPIServer()
	} else {
		m0 = readAPIMetrics(t, l.cp)
	}
	t0 := time.Now()
	var mu sync.Mutex
	var readies []time.Duration
	var peak int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dnsPort, adminPort := agentPorts(t)
			addr, admin := "127.0.0.1:"+strconv.Itoa(dnsPort), "127.0.0.1:"+strconv.Itoa(adminPort)
			logPath := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.log", name, i))
			p, err := startCPProc("nodedns", logPath, bin, "serve",
				"--listen", addr, "--upstream", upstream, "--kubeconfig", l.cp.Kubeconfig,
				"--cluster-domain", "cluster.local", "--pods", "insecure", "--node-name", fmt.Sprintf("node-%d", i),
				"--admin", admin, "--loop-check=false", "--lameduck", "0s")
			if err != nil {
				t.Error(err)
				return
			}
			defer p.stop(10 * time.Second)
			hc := &http.Client{Timeout: time.Second}
			for {
				if p.exited() || time.Since(t0) > 5*time.Minute {
					t.Errorf("%s agent %d not ready: %v\n%s", name, i, p.err, tailFile(logPath, 20))
					return
				}
				if resp, err := hc.Get("http://" + admin + "/ready"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			d := time.Since(t0)
			time.Sleep(2 * time.Second)
			_, hwm := procMem(t, p.cmd.Process.Pid)
			mu.Lock()
			readies = append(readies, d)
			peak = max(peak, hwm)
			mu.Unlock()
			// Stay up until every agent is ready and counted.
			for {
				mu.Lock()
				done := len(readies) == n || t.Failed()
				mu.Unlock()
				if done {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	if restart {
		time.Sleep(2 * time.Second) // every agent has tried and is backing off
		if err := l.cp.StartAPIServer(); err != nil {
			t.Fatalf("restarting the API server: %v", err)
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	lists := readAPIMetrics(t, l.cp).sub(m0)
	sort.Slice(readies, func(i, j int) bool { return readies[i] < readies[j] })
	return fmt.Sprintf("  %-13s all ready in %v (first %v); peak RSS of one agent %.1f MiB\n    lists: %s\n", name,
		readies[len(readies)-1].Round(time.Millisecond), readies[0].Round(time.Millisecond), mib(peak), lists.listSummary())
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// scaleWriteReport appends report to SCALE_REPORT, when set.
func scaleWriteReport(t *testing.T, report string) {
	out := os.Getenv("SCALE_REPORT")
	if out == "" {
		return
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("writing %s: %v", out, err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(report + "\n"); err != nil {
		t.Errorf("writing %s: %v", out, err)
	}
}
