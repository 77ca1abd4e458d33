//go:build integration

package integration

// Soak: the agent under a mixed workload for a long time, with
// upstream faults on a schedule and Service churn in the API server. It
// runs only when NODEDNS_SOAK is set to a duration (scripts/soak.sh does
// that); the plain integration run skips it.
//
// Layout, as in the autopath test: the root namespace plays the node (the
// API server is on its 127.0.0.1), the agent runs there and listens on the
// root side of one veth pair per "pod"; each pod is a network namespace
// registered as a Pod on this node, so the agent walks its search path.
// One client per pod sends queries from inside its namespace at a fixed
// rate, each from a fresh socket, and waits for every answer (6 s, the
// patience of a glibc stub with its 5 s timeout, without retry).
//
// The mix, per client: names of Services that never change (answered by
// the agent alone: none may be lost or fail), the short form of those names
// walked by autopath (the same), names of Services being created and
// deleted (NOERROR or NXDOMAIN), cached external names, unique external
// names (each a miss), NXDOMAIN, and external names reached through the
// search path. The upstream is a scripted server in this process that
// cycles through healthy, stopped (port unreachable), SERVFAIL and silent.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const (
	soakZone      = "cluster.local"
	soakPods      = 4
	soakStable    = 50 // Services that never change
	soakChurnKeep = 20 // churned Services alive at once
	soakTimeout   = 6 * time.Second
	soakSample    = 10 * time.Second
)

// soakKind is a category of the query mix.
type soakKind int

const (
	kStable           soakKind = iota // svc-N.<stable ns>.svc.<zone>: NOERROR, an A
	kAutopathCluster                  // svc-N.<stable ns>.<pod ns>.svc.<zone>: walked, NOERROR
	kChurn                            // churn-N.<churn ns>.svc.<zone>: NOERROR or NXDOMAIN
	kCached                           // cN.example.test.: NOERROR (stale or SERVFAIL in faults)
	kUnique                           // u-….example.test.: a miss each time
	kNX                               // nxN.example.test.: NXDOMAIN
	kAutopathExternal                 // cN.example.test.<pod ns>.svc.<zone>: walked upstream
	kKinds
)

var soakKindNames = [kKinds]string{"cluster", "autopath-cluster", "churn", "external-cached", "external-unique", "nxdomain", "autopath-external"}

// soakCounts tallies one kind.
type soakCounts struct {
	sent, answered, lost, servfail, nxdomain, wrong atomic.Int64
}

// soakUpstream is the scripted upstream: dnstest.Zone, or a fault.
type soakUpstream struct {
	srv  *dnstest.Server
	mode atomic.Value // "ok", "servfail", "drop"
}

func (u *soakUpstream) handle(w dns.ResponseWriter, r *dns.Msg) {
	switch u.mode.Load().(string) {
	case "servfail":
		dnstest.Rcode(dns.RcodeServerFailure)(w, r)
	case "drop":
	default:
		dnstest.Zone(30)(w, r)
	}
}

// soakSampleRow is one sample of the agent's figures.
type soakSampleRow struct {
	at                   time.Duration
	rssKB, threads       int64
	goroutines           int64
	liveKB               int64 // live heap after the last GC: half the GC's heap goal (GOGC 100)
	cacheEntries, panics int64
	sent                 int64
}

func TestSoak(t *testing.T) {
	spec := os.Getenv("NODEDNS_SOAK")
	if spec == "" {
		t.Skip("soak runs only with NODEDNS_SOAK=DURATION (scripts/soak.sh)")
	}
	duration, err := time.ParseDuration(spec)
	if err != nil || duration <= 0 {
		t.Fatalf("NODEDNS_SOAK=%q: want a positive Go duration", spec)
	}
	qps := 100
	if v := os.Getenv("SOAK_QPS"); v != "" {
		if qps, err = strconv.Atoi(v); err != nil || qps <= 0 || qps > 2000 {
			t.Fatalf("SOAK_QPS=%q: want 1-2000 per client", v)
		}
	}
	cp := controlPlane(t)
	ctx := context.Background()
	c := cp.Client
	suffix := strconv.Itoa(os.Getpid())
	node := "soak-node-" + suffix
	stableNS, churnNS := "soak-stable-"+suffix, "soak-churn-"+suffix

	soakNamespace(t, c, stableNS)
	soakNamespace(t, c, churnNS)
	for i := 0; i < soakStable; i++ {
		soakService(t, c, stableNS, fmt.Sprintf("svc-%d", i))
	}

	// The upstream, on the root namespace's loopback.
	up := &soakUpstream{}
	up.mode.Store("ok")
	up.srv = dnstest.StartStable(t, up.handle)

	// Pods: a netns each, a veth pair to the root namespace, a Pod on this
	// node with the pod side's address.
	type pod struct {
		ns            *netNS
		k8sNS, server string
		nodeV4        string
	}
	var pods []pod
	var listen []string
	for i := 0; i < soakPods; i++ {
		nodeV4 := fmt.Sprintf("169.254.124.%d", 4*i+1)
		podV4 := fmt.Sprintf("169.254.124.%d", 4*i+2)
		pns := newNetNS(t, fmt.Sprintf("soak%d", i))
		rootIf := fmt.Sprintf("ndsk%d-%d", os.Getpid()%100000, i)
		soakIP(t, "link", "add", rootIf, "type", "veth", "peer", "name", "eth0", "netns", pns.Name)
		t.Cleanup(func() {
			if exec.Command("ip", "link", "show", rootIf).Run() == nil {
				_ = exec.Command("ip", "link", "del", rootIf).Run()
			}
		})
		soakIP(t, "addr", "add", nodeV4+"/30", "dev", rootIf)
		soakIP(t, "link", "set", rootIf, "up")
		pns.MustRun(t, "ip", "addr", "add", podV4+"/30", "dev", "eth0")
		pns.MustRun(t, "ip", "link", "set", "eth0", "up")
		k8sNS := fmt.Sprintf("soak-pod%d-%s", i, suffix)
		soakNamespace(t, c, k8sNS)
		soakPod(t, c, k8sNS, "client", node, podV4)
		pods = append(pods, pod{ns: pns, k8sNS: k8sNS, server: net.JoinHostPort(nodeV4, "53"), nodeV4: nodeV4})
		listen = append(listen, net.JoinHostPort(nodeV4, "53"))
	}

	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	agent := exec.Command(nodednsBin, "serve",
		"--listen", strings.Join(listen, ","),
		"--kubeconfig", cp.Kubeconfig,
		"--node-name", node,
		"--upstream", up.srv.Addr,
		"--admin", adminAddr,
		"--search", "corp.example",
		"--cache-size", "5000",
		"--loop-check=false",
		"--lameduck", "0s",
		"--log-level", "warn")
	agent.Stdout, agent.Stderr = logf, logf
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()
	t.Cleanup(func() {
		select {
		case <-agentDone:
		default:
			_ = agent.Process.Kill()
			<-agentDone
		}
	})
	alive := func() bool {
		select {
		case err := <-agentDone:
			agentDone <- err
			return false
		default:
			return true
		}
	}
	// Ready: synced, and the pods' namespaces known (a walked name answers).
	probeName := fmt.Sprintf("svc-0.%s.%s.svc.%s.", stableNS, pods[0].k8sNS, soakZone)
	dnstest.Eventually(t, 60*time.Second, "agent serving cluster names through autopath", func() error {
		if !alive() {
			return errors.New("agent exited")
		}
		var r *dns.Msg
		err := pods[0].ns.Do(func() error {
			cl := &dns.Client{Timeout: time.Second}
			var err error
			r, _, err = cl.Exchange(soakQuery(probeName), pods[0].server)
			return err
		})
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) < 2 {
			return fmt.Errorf("probe: %s", dns.RcodeToString[r.Rcode])
		}
		return nil
	})

	var counts [kKinds]soakCounts
	var failures sync.Mutex
	var examples []string
	start := time.Now()
	note := func(format string, args ...any) {
		failures.Lock()
		defer failures.Unlock()
		if len(examples) < 30 {
			examples = append(examples, fmt.Sprintf("+%v ", time.Since(start).Round(time.Second))+fmt.Sprintf(format, args...))
		}
	}
	runCtx, stopRun := context.WithTimeout(ctx, duration)
	defer stopRun()

	// Faults: a 60 s cycle (shortened for runs under 5 minutes).
	cycle := 60 * time.Second
	if duration < 5*time.Minute {
		cycle = 20 * time.Second
	}
	var faultLog []string
	var faultWG sync.WaitGroup
	faultWG.Add(1)
	go func() {
		defer faultWG.Done()
		stopped := false
		defer func() {
			if stopped {
				up.srv.Restart(t)
			}
			up.mode.Store("ok")
		}()
		phase := func(frac float64) time.Duration { return time.Duration(float64(cycle) * frac) }
		steps := []struct {
			at   time.Duration
			what string
		}{{phase(0.35), "stop"}, {phase(0.5), "start"}, {phase(0.65), "servfail"}, {phase(0.8), "drop"}, {phase(0.9), "ok"}}
		for n := 0; ; n++ {
			base := time.Duration(n) * cycle
			for _, s := range steps {
				wait := time.Until(start.Add(base + s.at))
				select {
				case <-runCtx.Done():
					return
				case <-time.After(wait):
				}
				switch s.what {
				case "stop":
					up.srv.Stop()
					stopped = true
				case "start":
					up.srv.Restart(t)
					stopped = false
				default:
					up.mode.Store(s.what)
				}
				if n == 0 {
					faultLog = append(faultLog, fmt.Sprintf("+%v %s", s.at, s.what))
				}
			}
		}
	}()

	// Service churn: one created and the oldest deleted every second.
	var churned atomic.Int64
	var churnWG sync.WaitGroup
	churnWG.Add(1)
	go func() {
		defer churnWG.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", n), Namespace: churnNS},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}}}
			if _, err := c.CoreV1().Services(churnNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				note("churn: create %s: %v", svc.Name, err)
				continue
			}
			churned.Add(1)
			if old := n - soakChurnKeep; old >= 0 {
				_ = c.CoreV1().Services(churnNS).Delete(ctx, fmt.Sprintf("churn-%d", old), metav1.DeleteOptions{})
			}
		}
	}()

	// Samples of the agent's figures.
	var samples []soakSampleRow
	var sampleWG sync.WaitGroup
	sampleWG.Add(1)
	total := func() int64 {
		var n int64
		for i := range counts {
			n += counts[i].sent.Load()
		}
		return n
	}
	go func() {
		defer sampleWG.Done()
		tick := time.NewTicker(soakSample)
		defer tick.Stop()
		for {
			row := soakSampleAgent(agent.Process.Pid, adminAddr)
			row.at = time.Since(start).Round(time.Second)
			row.sent = total()
			samples = append(samples, row)
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// Clients: one per pod, inside its namespace.
	var clientWG sync.WaitGroup
	for pi, p := range pods {
		clientWG.Add(1)
		go func() {
			defer clientWG.Done()
			var waits sync.WaitGroup
			defer waits.Wait()
			period := time.Second / time.Duration(qps)
			err := p.ns.Do(func() error {
				for i := 0; ; i++ {
					at := start.Add(time.Duration(i) * period)
					if d := time.Until(at); d > 0 {
						time.Sleep(d)
					}
					if runCtx.Err() != nil {
						return nil
					}
					kind, name := soakMix(pi, i, stableNS, churnNS, p.k8sNS, int(churned.Load()))
					conn, err := net.Dial("udp", p.server)
					if err != nil {
						note("client %d: socket: %v", pi, err)
						continue
					}
					m := soakQuery(name)
					wire, _ := m.Pack()
					sentAt := time.Now()
					if _, err := conn.Write(wire); err != nil {
						conn.Close()
						note("client %d: send: %v", pi, err)
						continue
					}
					cnt := &counts[kind]
					cnt.sent.Add(1)
					waits.Add(1)
					go func() {
						defer waits.Done()
						defer conn.Close()
						_ = conn.SetReadDeadline(sentAt.Add(soakTimeout))
						buf := make([]byte, 4096)
						for {
							n, err := conn.Read(buf)
							if err != nil {
								cnt.lost.Add(1)
								note("%s %s: no answer within %v: %v", soakKindNames[kind], name, soakTimeout, err)
								return
							}
							r := new(dns.Msg)
							if r.Unpack(buf[:n]) != nil || r.Id != m.Id {
								continue
							}
							cnt.answered.Add(1)
							soakCheck(kind, name, r, cnt, note)
							return
						}
					}()
				}
			})
			if err != nil {
				note("client %d: %v", pi, err)
			}
		}()
	}
	clientWG.Wait()
	stopRun()
	churnWG.Wait()
	faultWG.Wait()
	sampleWG.Wait()
	final := soakSampleAgent(agent.Process.Pid, adminAddr)
	final.at = time.Since(start).Round(time.Second)
	final.sent = total()
	samples = append(samples, final)
	crashed := !alive()

	// The report.
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %v, %d clients x %d q/s, fault cycle %v (%s), %d Services churned\n",
		duration, soakPods, qps, cycle, strings.Join(faultLog, ", "), churned.Load())
	fmt.Fprintf(&b, "%-18s %9s %9s %6s %9s %9s %6s\n", "kind", "sent", "answered", "lost", "SERVFAIL", "NXDOMAIN", "wrong")
	var sum soakTotals
	for k := soakKind(0); k < kKinds; k++ {
		cn := &counts[k]
		fmt.Fprintf(&b, "%-18s %9d %9d %6d %9d %9d %6d\n", soakKindNames[k], cn.sent.Load(), cn.answered.Load(),
			cn.lost.Load(), cn.servfail.Load(), cn.nxdomain.Load(), cn.wrong.Load())
		sum.add(cn)
	}
	fmt.Fprintf(&b, "%-18s %9d %9d %6d %9d %9d %6d\n", "total", sum.sent, sum.answered, sum.lost, sum.servfail, sum.nxdomain, sum.wrong)
	fmt.Fprintf(&b, "agent crashed: %v\n", crashed)
	fmt.Fprintf(&b, "%8s %10s %10s %8s %10s %8s %7s %10s\n", "t", "rss_kb", "live_kb", "threads", "goroutines", "cache", "panics", "sent")
	for _, s := range samples {
		fmt.Fprintf(&b, "%8v %10d %10d %8d %10d %8d %7d %10d\n", s.at, s.rssKB, s.liveKB, s.threads, s.goroutines, s.cacheEntries, s.panics, s.sent)
	}
	soakWindows(&b, samples, duration)
	if len(examples) > 0 {
		fmt.Fprintf(&b, "first failures:\n  %s\n", strings.Join(examples, "\n  "))
	}
	report := b.String()
	t.Log("\n" + report)
	if p := os.Getenv("SOAK_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Errorf("writing %s: %v", p, err)
		}
	}

	if crashed {
		t.Errorf("the agent exited during the soak; log:\n%s", tailFile(logPath, 40))
	}
	for _, k := range []soakKind{kStable, kAutopathCluster} {
		cn := &counts[k]
		if cn.lost.Load() != 0 || cn.servfail.Load() != 0 || cn.wrong.Load() != 0 || cn.nxdomain.Load() != 0 {
			t.Errorf("%s: %d lost, %d SERVFAIL, %d NXDOMAIN, %d wrong: cluster names must always be answered",
				soakKindNames[k], cn.lost.Load(), cn.servfail.Load(), cn.nxdomain.Load(), cn.wrong.Load())
		}
	}
	if final.panics != 0 {
		t.Errorf("%d panics recovered in the agent", final.panics)
	}
	// Memory: a gross leak check only (the figures are the report): the
	// largest RSS of the last quarter within 1.5x (+16 MiB) of the largest
	// of the second quarter, once the cache has filled.
	if n := len(samples); n >= 8 {
		q2, q4 := maxRSS(samples[n/4:n/2]), maxRSS(samples[3*n/4:])
		if q4 > q2*3/2+16<<10 {
			t.Errorf("RSS grew from %d kB (second quarter) to %d kB (last quarter)", q2, q4)
		}
	}
}

type soakTotals struct{ sent, answered, lost, servfail, nxdomain, wrong int64 }

func (s *soakTotals) add(c *soakCounts) {
	s.sent += c.sent.Load()
	s.answered += c.answered.Load()
	s.lost += c.lost.Load()
	s.servfail += c.servfail.Load()
	s.nxdomain += c.nxdomain.Load()
	s.wrong += c.wrong.Load()
}

// soakWindows summarises memory over six equal windows: the smallest live
// heap sample of each (a single sample swings with the GC cycle) and the
// RSS range, then the live heap's change per minute over the second half.
func soakWindows(b *strings.Builder, samples []soakSampleRow, duration time.Duration) {
	const windows = 6
	w := duration / windows
	if w <= 0 {
		return
	}
	fmt.Fprintf(b, "%-13s %12s %14s\n", "window", "min live_kb", "rss_kb")
	mins := make([]int64, windows)
	for i := range windows {
		lo, hi := time.Duration(i)*w, time.Duration(i+1)*w
		minLive, minRSS, maxRSS := int64(-1), int64(-1), int64(0)
		for _, s := range samples {
			if s.at < lo || s.at >= hi || s.liveKB == 0 {
				continue
			}
			if minLive < 0 || s.liveKB < minLive {
				minLive = s.liveKB
			}
			if minRSS < 0 || s.rssKB < minRSS {
				minRSS = s.rssKB
			}
			maxRSS = max(maxRSS, s.rssKB)
		}
		mins[i] = minLive
		fmt.Fprintf(b, "%-13s %12d %7d-%d\n", fmt.Sprintf("%v-%v", lo.Round(time.Second), hi.Round(time.Second)), minLive, minRSS, maxRSS)
	}
	// The second half: the cache has long filled by then.
	if h := windows / 2; mins[h] > 0 && mins[windows-1] > 0 {
		span := time.Duration(windows-1-h) * w
		fmt.Fprintf(b, "live heap change over the second half (window %d to %d): %+d kB (%+.1f kB/min)\n", h+1, windows,
			mins[windows-1]-mins[h], float64(mins[windows-1]-mins[h])/span.Minutes())
	}
}

func maxRSS(rows []soakSampleRow) int64 {
	var m int64
	for _, r := range rows {
		m = max(m, r.rssKB)
	}
	return m
}

// soakMix is query i of client pi.
func soakMix(pi, i int, stableNS, churnNS, podNS string, churned int) (soakKind, string) {
	k := i / 20
	switch i % 20 {
	case 0, 1, 2, 3, 4:
		return kStable, fmt.Sprintf("svc-%d.%s.svc.%s.", (k+i)%soakStable, stableNS, soakZone)
	case 5, 6:
		return kAutopathCluster, fmt.Sprintf("svc-%d.%s.%s.svc.%s.", k%soakStable, stableNS, podNS, soakZone)
	case 7, 8:
		// Around the live window of churned Services: some exist, some
		// were deleted, some are about to be created.
		n := churned - soakChurnKeep - 5 + (k*7+i)%(soakChurnKeep+10)
		return kChurn, fmt.Sprintf("churn-%d.%s.svc.%s.", max(n, 0), churnNS, soakZone)
	case 9, 10, 11, 12, 13:
		return kCached, fmt.Sprintf("c%d.example.test.", (k*3+i)%200)
	case 14, 15:
		return kUnique, fmt.Sprintf("u%d-%d.example.test.", pi, i)
	case 16, 17:
		return kNX, fmt.Sprintf("nx%d.example.test.", k%50)
	default:
		return kAutopathExternal, fmt.Sprintf("c%d.example.test.%s.svc.%s.", k%200, podNS, soakZone)
	}
}

func soakQuery(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	return m
}

// soakCheck classifies an answer to a query of kind.
func soakCheck(kind soakKind, name string, r *dns.Msg, c *soakCounts, note func(string, ...any)) {
	switch r.Rcode {
	case dns.RcodeServerFailure:
		c.servfail.Add(1)
		if kind == kStable || kind == kAutopathCluster || kind == kChurn {
			note("%s %s: SERVFAIL", soakKindNames[kind], name)
		}
		return
	case dns.RcodeNameError:
		c.nxdomain.Add(1)
		switch kind {
		case kChurn, kNX, kAutopathExternal:
			// autopath-external: NXDOMAIN is the walk's fallback when an
			// upstream step failed (the client walks its list itself).
		default:
			c.wrong.Add(1)
			note("%s %s: NXDOMAIN", soakKindNames[kind], name)
		}
		return
	case dns.RcodeSuccess:
		if kind == kNX {
			c.wrong.Add(1)
			note("%s %s: NOERROR", soakKindNames[kind], name)
			return
		}
		var a bool
		for _, rr := range r.Answer {
			if rr.Header().Rrtype == dns.TypeA {
				a = true
			}
		}
		if !a {
			c.wrong.Add(1)
			note("%s %s: NOERROR without an A record", soakKindNames[kind], name)
		}
		return
	}
	c.wrong.Add(1)
	note("%s %s: %s", soakKindNames[kind], name, dns.RcodeToString[r.Rcode])
}

// soakSampleAgent reads the agent's RSS and threads from /proc, its
// goroutines from /metrics and its cache size and panics from /stats.
func soakSampleAgent(pid int, admin string) soakSampleRow {
	var row soakSampleRow
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			switch fields[0] {
			case "VmRSS:":
				row.rssKB = v
			case "Threads:":
				row.threads = v
			}
		}
		f.Close()
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	defer hc.CloseIdleConnections()
	if resp, err := hc.Get("http://" + admin + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				row.goroutines = int64(f)
			}
			if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_next_gc_bytes "); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				row.liveKB = int64(f) >> 11
			}
		}
		resp.Body.Close()
	}
	if resp, err := hc.Get("http://" + admin + "/stats"); err == nil {
		var doc struct {
			Cache *struct {
				Entries int64 `json:"entries"`
			} `json:"cache"`
			Server *struct {
				Panics int64 `json:"panics"`
			} `json:"server"`
		}
		if json.NewDecoder(resp.Body).Decode(&doc) == nil {
			if doc.Cache != nil {
				row.cacheEntries = doc.Cache.Entries
			}
			if doc.Server != nil {
				row.panics = doc.Server.Panics
			}
		}
		resp.Body.Close()
	}
	return row
}

func soakIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func soakNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func soakService(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if _, err := c.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// soakPod registers a running Pod on node with ip, as a kubelet would.
func soakPod(t *testing.T, c kubernetes.Interface, ns, name, node, ip string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:0"}}}}
	p, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = c.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the status of pod %s/%s: %v", ns, name, err)
	}
}
