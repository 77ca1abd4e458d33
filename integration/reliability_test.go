//go:build integration

package integration

// Reliability: the agent through an API server outage and through
// SIGKILLs at random moments under load, the failures a node's only DNS
// server meets in a cluster's life.
//
// API outage. /ready stays true while the API server is away, on purpose:
// readiness says whether this process should get DNS traffic, and an agent
// whose informers lost their API server still answers every cluster name
// from the last state it saw (and every external name as before). Turning
// not-ready would take the only DNS server of the node's pods out of
// rotation (or fail its probes) exactly when the control plane is in
// trouble, for no gain: no other agent on the node knows more. client-go
// relists and rewatches when the API server is back, and the changes
// appear within seconds. Two outages are tested: kube-apiserver stopped
// (StopAPIServer of the shared control plane), and the agent cut off from
// a running API server by a TCP proxy the test controls while Services
// are created and deleted through another path, which is how a node sees a
// partition or the loss of its API server replica while the cluster goes
// on changing.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// apiProxy is a TCP proxy to the API server that the test can cut: Cut
// closes every proxied connection and refuses new ones until Restore.
type apiProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
	// refused counts connections closed at once while cut.
	refused atomic.Int64
}

func startAPIProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *apiProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			p.refused.Add(1)
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// Cut drops every connection and refuses new ones.
func (p *apiProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore accepts connections again.
func (p *apiProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// relSvc creates a ClusterIP Service and returns its ClusterIP.
func relSvc(t *testing.T, cp *ControlPlane, ns, name string) string {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	got, err := cp.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		err := cp.Client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting service %s/%s: %v", ns, name, err)
		}
	})
	return got.Spec.ClusterIP
}

// lookA asks addr for name/A over UDP: the rcode and the first A.
func lookA(addr, name string) (int, string, error) {
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return -1, "", err
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return r.Rcode, a.A.String(), nil
		}
	}
	return r.Rcode, "", nil
}

func httpStatus(url string) (int, error) {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// watchDuring asks, every 100 ms until stop is closed, that every name of
// want answers with its address and that /ready is 200; it returns the
// number of checks and the first failure.
func watchDuring(addr, ready string, want map[string]string, stop <-chan struct{}) (int, error) {
	n := 0
	for {
		select {
		case <-stop:
			return n, nil
		case <-time.After(100 * time.Millisecond):
		}
		n++
		for name, ip := range want {
			rc, got, err := lookA(addr, name)
			if err != nil || rc != dns.RcodeSuccess || got != ip {
				return n, fmt.Errorf("%s: rcode %d A %q err %v, want %s", name, rc, got, err, ip)
			}
		}
		if code, err := httpStatus(ready); err != nil || code != http.StatusOK {
			return n, fmt.Errorf("/ready: %d %v", code, err)
		}
	}
}

// TestAPIServerOutage runs the agent against the real API server (through
// a proxy) and takes the API away twice: kube-apiserver stopped, then the
// agent cut off while the cluster changes.
func TestAPIServerOutage(t *testing.T) {
	cp := controlPlane(t)
	suffix := fmt.Sprint(os.Getpid())
	ns := "rel-" + suffix
	if _, err := cp.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	zone := "." + ns + ".svc.cluster.local."
	want := map[string]string{}
	for _, n := range []string{"alpha", "beta"} {
		want[n+zone] = relSvc(t, cp, ns, n)
	}
	doomed := relSvc(t, cp, ns, "doomed")

	// The agent's kubeconfig points at the proxy; the serving certificate
	// is for 127.0.0.1 and the proxy is on 127.0.0.1 too.
	proxy := startAPIProxy(t, strings.TrimPrefix(cp.URL, "https://"))
	kc, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "agent.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(strings.ReplaceAll(string(kc), cp.URL, "https://"+proxy.ln.Addr().String())), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	ready := fmt.Sprintf("http://127.0.0.1:%d/ready", ports[1])
	up := startTestUpstream(t)
	agent := startRootAgent(t, "agent", "serve", "--listen", dnsAddr, "--kubeconfig", kubeconfig,
		"--upstream", up, "--admin", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--loop-check=false",
		"--lameduck", "0s", "--log-level", "info")
	dnstest.Eventually(t, 60*time.Second, "agent answering cluster names and ready", func() error {
		if agent.Exited() {
			return fmt.Errorf("agent exited: %v", agent.err)
		}
		for name, ip := range want {
			if rc, got, err := lookA(dnsAddr, name); err != nil || rc != dns.RcodeSuccess || got != ip {
				return fmt.Errorf("%s: rcode %d A %q err %v", name, rc, got, err)
			}
		}
		if code, err := httpStatus(ready); err != nil || code != 200 {
			return fmt.Errorf("/ready %d %v", code, err)
		}
		return nil
	})
	want["doomed"+zone] = doomed

	// 1. kube-apiserver stopped for 5 s.
	stop := make(chan struct{})
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() { n, err := watchDuring(dnsAddr, ready, want, stop); done <- res{n, err} }()
	outage := time.Now()
	cp.StopAPIServer()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := cp.StartAPIServer(); err != nil {
				t.Errorf("restarting kube-apiserver: %v", err)
			}
		}
	})
	time.Sleep(5 * time.Second)
	close(stop)
	r := <-done
	if r.err != nil {
		t.Fatalf("while kube-apiserver was stopped (check %d): %v", r.n, r.err)
	}
	t.Logf("kube-apiserver stopped (down %v): %d checks of %d names and /ready, all answered",
		time.Since(outage).Round(time.Millisecond), r.n, len(want))
	if err := cp.StartAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	restarted = true
	back := time.Now()
	gammaIP := relSvc(t, cp, ns, "gamma")
	dnstest.Eventually(t, 60*time.Second, "a Service created after the restart answers", func() error {
		if rc, got, err := lookA(dnsAddr, "gamma"+zone); err != nil || rc != dns.RcodeSuccess || got != gammaIP {
			return fmt.Errorf("rcode %d A %q err %v", rc, got, err)
		}
		return nil
	})
	t.Logf("kube-apiserver restarted: a new Service answered %v after it was ready", time.Since(back).Round(time.Millisecond))

	// 2. The agent cut off while the cluster changes.
	stop = make(chan struct{})
	go func() { n, err := watchDuring(dnsAddr, ready, want, stop); done <- res{n, err} }()
	proxy.Cut()
	deltaIP := relSvc(t, cp, ns, "delta")
	if err := cp.Client.CoreV1().Services(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := proxy.refused.Load()
	time.Sleep(5 * time.Second) // the partition lasts; answers are checked throughout
	// The agent has tried to reach the API since the changes were made,
	// and was refused: it is cut off, not merely slow to see them.
	dnstest.Eventually(t, 30*time.Second, "the agent's reconnection refused by the cut proxy", func() error {
		if n := proxy.refused.Load() - refused; n < 1 {
			return fmt.Errorf("%d connections refused since the changes", n)
		}
		return nil
	})
	close(stop)
	if r := <-done; r.err != nil {
		t.Fatalf("while cut off from the API (check %d): %v", r.n, r.err)
	}
	// The last known state: delta unknown yet, doomed still there.
	if rc, _, err := lookA(dnsAddr, "delta"+zone); err != nil || rc != dns.RcodeNameError {
		t.Fatalf("delta during the partition: rcode %d err %v, want NXDOMAIN (the last known state)", rc, err)
	}
	proxy.Restore()
	back = time.Now()
	dnstest.Eventually(t, 60*time.Second, "changes made during the partition visible", func() error {
		if rc, got, err := lookA(dnsAddr, "delta"+zone); err != nil || rc != dns.RcodeSuccess || got != deltaIP {
			return fmt.Errorf("delta: rcode %d A %q err %v", rc, got, err)
		}
		if rc, _, err := lookA(dnsAddr, "doomed"+zone); err != nil || rc != dns.RcodeNameError {
			return fmt.Errorf("doomed: rcode %d err %v, want NXDOMAIN", rc, err)
		}
		return nil
	})
	t.Logf("partition healed: a Service created and one deleted during it were visible %v later", time.Since(back).Round(time.Millisecond))
	if code, err := httpStatus(ready); err != nil || code != 200 {
		t.Fatalf("/ready after the outages: %d %v", code, err)
	}
}

// startTestUpstream runs dnstest.Zone on the root namespace's loopback.
func startTestUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
				A: net.ParseIP(answerA)}}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.LocalAddr().String()
}

// startRootAgent starts the agent in the test's own network namespace.
func startRootAgent(t *testing.T, label string, args ...string) *proc {
	t.Helper()
	p := &proc{Name: label, out: &dnstest.SyncBuffer{}, done: make(chan struct{})}
	p.Cmd = exec.Command(nodednsBin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", label, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			t.Logf("output of %s:\n%s", label, p.Output())
		}
	})
	return p
}

// TestSIGKILLUnderLoad kills the intercepting agent with SIGKILL at random
// moments (during its start, while it installs its rules, while it serves)
// under a steady load from the pod namespace, and starts it again each
// time. After every restart: each rule exactly once, no socket of ours
// left but the new process's, and answers again within a second.
func TestSIGKILLUnderLoad(t *testing.T) {
	const kills = 8
	e := newInterceptEnv(t, "nft")
	needTool(t, "ss")
	agent := e.node.Start(t, "agent 0", nodednsBin, e.agentArgs("--log-level", "info")...)
	e.waitServing(t, agent)

	// Load: 500 queries/s from the pod, each from its own socket, for as
	// long as the kills go on (bounded).
	var sent, answered atomic.Int64
	loadCtx, stopLoad := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stopLoad()
	loadDone := make(chan error, 1)
	go func() {
		loadDone <- e.pod.Do(func() error {
			var wg sync.WaitGroup
			defer wg.Wait()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-loadCtx.Done():
					return nil
				case <-tick.C:
				}
				c, err := net.Dial("udp", net.JoinHostPort(localV4, "53"))
				if err != nil {
					continue
				}
				m := new(dns.Msg)
				m.SetQuestion(fmt.Sprintf("k%d.example.test.", i%500), dns.TypeA)
				wire, _ := m.Pack()
				if _, err := c.Write(wire); err != nil {
					c.Close()
					continue
				}
				sent.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					_ = c.SetReadDeadline(time.Now().Add(time.Second))
					buf := make([]byte, 1500)
					if n, err := c.Read(buf); err == nil {
						r := new(dns.Msg)
						if r.Unpack(buf[:n]) == nil && r.Id == m.Id && r.Rcode == dns.RcodeSuccess {
							answered.Add(1)
						}
					}
				}()
			}
		})
	}()

	var firsts, moments []time.Duration
	for k := 1; k <= kills; k++ {
		// A random moment: anywhere from the first milliseconds of the
		// process (binding, link, rules) to well into serving.
		moment := time.Duration(rand.IntN(1500)) * time.Millisecond
		moments = append(moments, moment)
		time.Sleep(moment)
		agent.Kill()
		if leftover := e.ourSockets(t); len(leftover) > 0 {
			t.Fatalf("kill %d: sockets on :53 with the agent dead:\n%s", k, strings.Join(leftover, "\n"))
		}
		agent = e.node.Start(t, fmt.Sprintf("agent %d", k), nodednsBin, e.agentArgs("--log-level", "info")...)
		started := time.Now()
		var first time.Duration
		for i := 0; ; i++ {
			if agent.Exited() {
				t.Fatalf("kill %d: restarted agent exited: %v", k, agent.err)
			}
			if time.Since(started) > 10*time.Second {
				t.Fatalf("kill %d: no answer within 10s of the restart", k)
			}
			if err := answerOnce(e.pod, net.JoinHostPort(localV4, "53"), fmt.Sprintf("kill%d-%d.example.test.", k, i), 100*time.Millisecond); err == nil {
				first = time.Since(started)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		firsts = append(firsts, first)
		// Rules in place once, nothing in the other backend; the link.
		dnstest.Eventually(t, 5*time.Second, fmt.Sprintf("kill %d: rules exactly once", k), e.checkRulesOnce)
		if err := e.checkLink(t); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		// Only the new process's sockets: UDP per local IP and reader, one
		// TCP listener per local IP.
		pid := agent.Cmd.Process.Pid
		for _, l := range e.ourSockets(t) {
			if !strings.Contains(l, fmt.Sprintf("pid=%d,", pid)) {
				t.Fatalf("kill %d: a socket not of the new agent (pid %d):\n%s", k, pid, l)
			}
		}
		if first > time.Second {
			t.Errorf("kill %d: first answer %v after the restart, want within 1s", k, first.Round(time.Millisecond))
		}
	}
	stopLoad()
	if err := <-loadDone; err != nil {
		t.Fatal(err)
	}
	e.expectAnswers(t, e.pod)
	t.Logf("%d SIGKILLs under load, each at a random moment after the (re)start %v; first answer after each restart %v; load %d sent, %d answered (%d lost across the kills)",
		kills, moments, roundAll(firsts), sent.Load(), answered.Load(), sent.Load()-answered.Load())
}

// ourSockets lists the sockets on port 53 of the local IPs in the node
// namespace (ss lines with their process).
func (e *interceptEnv) ourSockets(t *testing.T) []string {
	t.Helper()
	udp, err := e.node.Run("ss", "-H", "-uanp")
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := e.node.Run("ss", "-H", "-tlnp")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(udp+"\n"+tcp, "\n") {
		if strings.Contains(l, localV4+":53 ") || strings.Contains(l, "["+localV6+"]:53 ") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
