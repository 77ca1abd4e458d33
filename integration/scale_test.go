//go:build integration && scale

package integration

// The cluster zone at scale, against the real API server: 10,000 Services
// and 100,000 endpoint addresses, then the nodedns binary started against
// them. It reports the agent's RSS, the time from start to ready and the
// time from a Service create to its name resolving (p50/p99). Figures, not
// asserts: run it with scripts/k8s-scale.sh.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/k8s"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// scaleLoad is the loaded cluster every scale test shares: it is loaded
// once per test binary (the control plane is too), so `-run` may pick
// several of the tests and they measure the same objects.
type scaleLoad struct {
	cp        *ControlPlane
	nss       []string
	nsvc      int
	perSvc    int
	lastName  string // the last Service created, as a query name
	lastIP    string // its ClusterIP ("" when it is headless)
	loadTook  time.Duration
	loadError error
}

var (
	scaleOnce sync.Once
	scaleData *scaleLoad
)

// scaleCluster returns the loaded cluster, loading it on first use.
// SCALE_SERVICES (10000) and SCALE_ENDPOINTS (10 per service) set the
// load. The namespaces are not deleted: no namespace controller runs here
// to remove their objects, and the control plane goes at the end.
func scaleCluster(t *testing.T) *scaleLoad {
	t.Helper()
	cp := controlPlane(t)
	scaleOnce.Do(func() { scaleData = loadScale(t, cp) })
	if scaleData.loadError != nil {
		t.Fatalf("loading the cluster: %v", scaleData.loadError)
	}
	return scaleData
}

func loadScale(t *testing.T, cp *ControlPlane) *scaleLoad {
	c := cp.Client
	l := &scaleLoad{cp: cp, nsvc: envInt("SCALE_SERVICES", 10000), perSvc: envInt("SCALE_ENDPOINTS", 10)}
	const namespaces = 100

	// Load: every tenth service is headless with hostnames (a StatefulSet),
	// the rest ClusterIP; each has one slice of perSvc ready addresses.
	l.nss = make([]string, namespaces)
	for i := range l.nss {
		l.nss[i] = fmt.Sprintf("scale%02d", i)
		if _, err := c.CoreV1().Namespaces().Create(ctxBG, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.nss[i]}}, metav1.CreateOptions{}); err != nil {
			l.loadError = fmt.Errorf("creating namespace %s: %w", l.nss[i], err)
			return l
		}
	}
	start := time.Now()
	var created, failed atomic.Int64
	var firstErr atomic.Value
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := createScaleService(c, l.nss[i%namespaces], i, l.perSvc); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("service %d: %w", i, err))
					continue
				}
				created.Add(1)
			}
		}()
	}
	for i := range l.nsvc {
		work <- i
	}
	close(work)
	wg.Wait()
	if failed.Load() > 0 {
		l.loadError = fmt.Errorf("%d services failed to create, the first: %v", failed.Load(), firstErr.Load())
		return l
	}
	l.loadTook = time.Since(start)
	t.Logf("created %d services and %d endpoint addresses in %v (%.0f objects/s)",
		created.Load(), created.Load()*int64(l.perSvc), l.loadTook.Round(time.Second), float64(2*created.Load())/l.loadTook.Seconds())

	last := l.nsvc - 1
	ns := l.nss[last%namespaces]
	s, err := c.CoreV1().Services(ns).Get(ctxBG, fmt.Sprintf("svc%d", last), metav1.GetOptions{})
	if err != nil {
		l.loadError = fmt.Errorf("reading the last service: %w", err)
		return l
	}
	l.lastName = fmt.Sprintf("svc%d.%s.svc.cluster.local.", last, ns)
	if s.Spec.ClusterIP != corev1.ClusterIPNone {
		l.lastIP = s.Spec.ClusterIP
	}
	return l
}

// TestClusterScale loads the API server, starts the agent and measures.
// SCALE_PROBES (300 creates timed) changes the number of creates.
func TestClusterScale(t *testing.T) {
	l := scaleCluster(t)
	cp, c, nss := l.cp, l.cp.Client, l.nss
	nsvc, perSvc := l.nsvc, l.perSvc
	probes := envInt("SCALE_PROBES", 300)
	const namespaces = 100

	// The index alone, in this process: its live heap once synced.
	heap, took := indexHeap(t, cp)
	t.Logf("index in-process: synced in %v, live heap %.1f MiB", took.Round(time.Millisecond), float64(heap)/(1<<20))

	// The agent without a cluster zone, for its baseline.
	up := dnstest.Start(t, dnstest.Rcode(dns.RcodeNameError))
	base := startScaleAgentArgs(t, up.Addr, nil)
	time.Sleep(2 * time.Second)
	baseRSS, _, baseAnon := procMemAnon(t, base.p.cmd.Process.Pid)
	base.stop()

	// Start the agent and time it to ready, counting the list requests
	// it costs the API server.
	m0 := readAPIMetrics(t, cp)
	a := startScaleAgent(t, cp, up.Addr, nil)
	time.Sleep(time.Second) // the API server counts a request when it ends
	lists := readAPIMetrics(t, cp).sub(m0)
	addr, admin := a.addr, a.admin
	// A sample of names answers as it should.
	for i := 0; i < nsvc; i += nsvc / 10 {
		name := fmt.Sprintf("svc%d.%s.svc.cluster.local.", i, nss[i%namespaces])
		r, err := dnstest.Query(addr, "udp", name, dns.TypeA)
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Errorf("%s: %v %s", name, err, formatMsg(r))
		}
	}

	// Service create to resolvable, a few creates in flight at a time.
	lat := make([]time.Duration, probes)
	afterAPI := make([]time.Duration, probes) // from the create call's return
	sem := make(chan struct{}, 4)
	var pwg sync.WaitGroup
	for i := range probes {
		pwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer pwg.Done()
			defer func() { <-sem }()
			ns := nss[i%namespaces]
			name := fmt.Sprintf("probe%d.%s.svc.cluster.local.", i, ns)
			begin := time.Now()
			s, err := c.CoreV1().Services(ns).Create(ctxBG, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("probe%d", i)},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80)}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("probe %d: %v", i, err)
				return
			}
			created := time.Now()
			for {
				r, err := dnstest.Query(addr, "udp", name, dns.TypeA)
				if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 &&
					r.Answer[0].(*dns.A).A.String() == s.Spec.ClusterIP {
					lat[i], afterAPI[i] = time.Since(begin), time.Since(created)
					return
				}
				if time.Since(begin) > 10*time.Second {
					t.Errorf("probe %d: not resolvable after 10 s", i)
					lat[i] = time.Since(begin)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	pwg.Wait()
	slices.Sort(lat)
	slices.Sort(afterAPI)
	q := func(d []time.Duration, f float64) time.Duration {
		return d[int(f*float64(len(d)-1))].Round(10 * time.Microsecond)
	}

	time.Sleep(3 * time.Second)
	rssAfter, hwm, anonAfter := procMemAnon(t, a.p.cmd.Process.Pid)
	st := scaleStats(t, admin)
	a.stop()
	report := fmt.Sprintf(`cluster zone at scale (%d services, %d endpoint addresses, %d namespaces; load average %s)
  agent without a cluster zone:   RSS %.1f MiB, of which anonymous %.1f MiB (the rest is the binary's pages)
  start to ready:                 %v
  API server LISTs for the start: %s
  agent RSS at ready:             %.1f MiB (peak so far %.1f MiB)
  agent RSS after the creates:    %.1f MiB (peak %.1f MiB), of which anonymous %.1f MiB
  index live heap (in-process):   %.1f MiB (%.0f bytes per service+endpoint address), synced in %v
  Service create to resolvable:   p50 %v  p99 %v  max %v  (%d creates, 4 in flight, UDP polling every 1 ms)
    from the create call's return: p50 %v  p99 %v
  /stats informers:               %s`,
		nsvc, nsvc*perSvc, namespaces, loadAvg(), mib(baseRSS), mib(baseAnon), a.ready.Round(time.Millisecond), lists.listSummary(),
		mib(a.rss), mib(a.hwm), mib(rssAfter), mib(hwm), mib(anonAfter),
		float64(heap)/(1<<20), float64(heap)/float64(nsvc+nsvc*perSvc), took.Round(time.Millisecond),
		q(lat, 0.5), q(lat, 0.99), lat[len(lat)-1].Round(10*time.Microsecond), probes,
		q(afterAPI, 0.5), q(afterAPI, 0.99), st)
	// The same cluster under other runtime settings of the agent (the Go
	// GC's headroom is most of the gap between RSS and the live heap).
	for _, env := range strings.Split(os.Getenv("SCALE_AGENT_ENVS"), ";") {
		if env = strings.TrimSpace(env); env == "" {
			continue
		}
		v := startScaleAgent(t, cp, up.Addr, strings.Fields(env))
		time.Sleep(3 * time.Second)
		rss, hwm, anon := procMemAnon(t, v.p.cmd.Process.Pid)
		v.stop()
		report += fmt.Sprintf("\n  with %s: ready in %v, RSS at ready %.1f MiB, 3 s later %.1f MiB (anonymous %.1f MiB), peak %.1f MiB",
			env, v.ready.Round(time.Millisecond), mib(v.rss), mib(rss), mib(anon), mib(hwm))
	}
	t.Log("\n" + report)
	scaleWriteReport(t, report)
}

// createScaleService creates service i with one EndpointSlice of n ready
// addresses (10.128.0.0/9, data only).
func createScaleService(c kubernetes.Interface, ns string, i, n int) error {
	name := fmt.Sprintf("svc%d", i)
	spec := corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80), svcPort("metrics", 9090)}}
	headless := i%10 == 0
	if headless {
		spec.ClusterIP = corev1.ClusterIPNone
	}
	if _, err := c.CoreV1().Services(ns).Create(ctxBG, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service: %w", err)
	}
	eps := make([]testEP, n)
	for j := range eps {
		k := uint32(i*n + j)
		ip := netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)})
		eps[j] = testEP{ip: ip.String()}
		if headless {
			eps[j].hostname = fmt.Sprintf("%s-%d", name, j)
		}
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctxBG,
		endpointSlice(ns, name+"-x1", name, discoveryv1.AddressTypeIPv4, 8080, eps...), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating endpointslice: %w", err)
	}
	return nil
}

// scaleAgent is a nodedns started against the loaded cluster.
type scaleAgent struct {
	p           *cpProc
	addr, admin string
	ready       time.Duration // start to /ready
	rss, hwm    int64         // kB at ready
}

func (a *scaleAgent) stop() { a.p.stop(10 * time.Second) }

// startScaleAgent starts the agent with env added to its environment and
// waits for /ready.
func startScaleAgent(t *testing.T, cp *ControlPlane, upstream string, env []string) *scaleAgent {
	return startScaleAgentArgs(t, upstream, env, "--kubeconfig", cp.Kubeconfig)
}

// startScaleAgentArgs starts the agent with extra flags.
func startScaleAgentArgs(t *testing.T, upstream string, env []string, extra ...string) *scaleAgent {
	t.Helper()
	dnsPort, adminPort := agentPorts(t)
	a := &scaleAgent{addr: "127.0.0.1:" + strconv.Itoa(dnsPort), admin: "127.0.0.1:" + strconv.Itoa(adminPort)}
	logPath := filepath.Join(t.TempDir(), "nodedns.log")
	t0 := time.Now()
	var err error
	a.p, err = startCPProcEnv("nodedns", logPath, env, nodednsBin, append([]string{"serve",
		"--listen", a.addr, "--upstream", upstream,
		"--cluster-domain", "cluster.local", "--cluster-ttl", "5s", "--pods", "insecure",
		"--admin", a.admin, "--loop-check=false", "--lameduck", "0s"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			t.Logf("nodedns log:\n%s", tailFile(logPath, 60))
		}
	})
	hc := &http.Client{Timeout: time.Second}
	for {
		if a.p.exited() {
			t.Fatalf("agent exited: %v\n%s", a.p.err, tailFile(logPath, 40))
		}
		if resp, err := hc.Get("http://" + a.admin + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				a.ready = time.Since(t0)
				break
			}
		}
		if time.Since(t0) > 5*time.Minute {
			t.Fatalf("agent not ready after 5 minutes\n%s", tailFile(logPath, 40))
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.rss, a.hwm = procMem(t, a.p.cmd.Process.Pid)
	return a
}

// indexHeap runs a pkg/k8s Index in this process until it has synced and
// returns the heap it holds (after a GC, before and after) and how long the
// sync took. SCALE_HEAPPROFILE names a file for a heap profile.
func indexHeap(t *testing.T, cp *ControlPlane) (uint64, time.Duration) {
	t.Helper()
	if os.Getenv("SCALE_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 4096
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rc, err := k8s.RESTConfig(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := k8s.New(client, k8s.Config{Zone: "cluster.local", TTL: 5, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxBG)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		_ = ix.Run(ctx)
	}()
	for !ix.Synced() {
		if time.Since(start) > 5*time.Minute {
			t.Fatal("in-process index not synced after 5 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if path := os.Getenv("SCALE_HEAPPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	runtime.KeepAlive(ix)
	cancel()
	<-done
	return after.HeapAlloc - before.HeapAlloc, took
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

// procMem reads VmRSS and VmHWM (kB) of pid.
func procMem(t *testing.T, pid int) (rss, hwm int64) {
	rss, hwm, _ = procMemAnon(t, pid)
	return rss, hwm
}

// procMemAnon is procMem plus RssAnon: the part of RSS that is not the
// binary's own pages (file-backed, shared and reclaimable).
func procMemAnon(t *testing.T, pid int) (rss, hwm, anon int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading agent memory: %v", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		case "RssAnon:":
			anon = v
		}
	}
	return rss, hwm, anon
}

// scaleStats returns the "informers" part of the agent's /stats.
func scaleStats(t *testing.T, admin string) string {
	resp, err := http.Get("http://" + admin + "/stats")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var doc map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return err.Error()
	}
	return strings.Join(strings.Fields(string(doc["informers"])), " ")
}
