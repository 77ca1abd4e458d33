//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// forwarderAgent is a nodedns binary without a cluster: a caching
// forwarder on loopback.
type forwarderAgent struct {
	addr, admin, log string
	p                *cpProc
}

// startForwarder runs `nodedns serve` with args (no kubeconfig) and waits
// until /ready.
func startForwarder(t *testing.T, args ...string) *forwarderAgent {
	t.Helper()
	for try := 0; ; try++ {
		dnsPort, adminPort := agentPorts(t)
		a := &forwarderAgent{addr: "127.0.0.1:" + strconv.Itoa(dnsPort), admin: "127.0.0.1:" + strconv.Itoa(adminPort),
			log: filepath.Join(t.TempDir(), "nodedns.log")}
		all := append([]string{"serve", "--listen", a.addr, "--admin", a.admin, "--loop-check=false", "--lameduck", "0s",
			"--log-level", "debug"}, args...)
		p, err := startCPProcEnv("nodedns", a.log, []string{"KUBERNETES_SERVICE_HOST="}, nodednsBin, all...)
		if err != nil {
			t.Fatal(err)
		}
		a.p = p
		err = waitHTTP(p, &http.Client{Timeout: 2 * time.Second}, "http://"+a.admin+"/ready", "", 30*time.Second, func([]byte) bool { return true })
		if err != nil && try < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		if err != nil {
			t.Fatalf("agent not ready: %v\n%s", err, tailFile(a.log, 40))
		}
		t.Cleanup(func() {
			p.stop(10 * time.Second)
			if t.Failed() {
				t.Logf("nodedns log (last 60 lines):\n%s", tailFile(a.log, 60))
			}
		})
		return a
	}
}

// askA asks the agent for name's A record over UDP.
func (a *forwarderAgent) askA(name string) (string, int, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 3 * time.Second}).Exchange(m, a.addr)
	if err != nil {
		return "", 0, err
	}
	for _, rr := range r.Answer {
		if x, ok := rr.(*dns.A); ok {
			return x.A.String(), r.Rcode, nil
		}
	}
	return "", r.Rcode, nil
}

// waitA waits until names made by name(i) resolve to want.
func (a *forwarderAgent) waitA(t *testing.T, want string, name func(int) string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		got, rc, err := a.askA(name(i))
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: got %q (%s), %v; want %s", name(i), got, dns.RcodeToString[rc], err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// upstreamStats reads the agent's /stats upstream list.
func (a *forwarderAgent) upstreamStats(t *testing.T) []map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + a.admin + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Upstreams []map[string]any `json:"upstreams"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("/stats: %v\n%s", err, b)
	}
	return doc.Upstreams
}

func fixedA(ip string) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 60 IN A %s", r.Question[0].Name, ip))
			m.Answer = []dns.RR{rr}
		}
		_ = w.WriteMsg(m)
	}
}

// TestDoTUpstream: the agent resolves through a DNS-over-TLS upstream on
// loopback whose certificate comes from a CA made here, verifies it, and
// carries a burst of queries on a few reused connections. With CoreDNS
// available, the same against CoreDNS's own DoT listener.
func TestDoTUpstream(t *testing.T) {
	ca := dnstest.NewCA(t)
	caFile := ca.File(t)
	srv := dnstest.StartTLS(t, fixedA("192.0.2.53"), ca.Issue(t, []string{"dns.test"}, netip.MustParseAddr("127.0.0.1")))
	a := startForwarder(t, "--upstream", "tls://"+srv.Addr+"#dns.test", "--upstream-ca", caFile)

	if got, rc, err := a.askA("first.example."); err != nil || got != "192.0.2.53" {
		t.Fatalf("first query over TLS: %q %s %v", got, dns.RcodeToString[rc], err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	// 120 at once: within one client's share of the forwarder's slots
	// (MaxInflight/8 = 125); beyond it the agent answers SERVFAIL at once,
	// by design: one client cannot take every slot.
	for i := range 120 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("burst%d.example.", i)
			if got, _, err := a.askA(name); err != nil || got != "192.0.2.53" {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %q %v", name, got, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of 120 queries failed: %v", len(failed), failed[:min(5, len(failed))])
	}
	if srv.Count() < 121 || srv.Conns() > 8 || srv.Handshakes() != srv.Conns() {
		t.Errorf("TLS server: %d queries on %d connections, %d handshakes; want 121+ on at most 8", srv.Count(), srv.Conns(), srv.Handshakes())
	}
	t.Logf("121 queries over %d TLS connections (%d sessions resumed)", srv.Conns(), srv.Resumed())
	ups := a.upstreamStats(t)
	if len(ups) != 1 || !strings.HasPrefix(fmt.Sprint(ups[0]["addr"]), "tls://127.0.0.1:") {
		t.Errorf("/stats upstreams: %v", ups)
	}

	// A certificate that does not name the server: no answer, and the log
	// says why.
	bad := startForwarder(t, "--upstream", "tls://"+srv.Addr+"#other.test", "--upstream-ca", caFile)
	if got, rc, err := bad.askA("x.example."); err != nil || rc != dns.RcodeServerFailure || got != "" {
		t.Errorf("unverifiable upstream: %q %s %v; want SERVFAIL", got, dns.RcodeToString[rc], err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(tailFile(bad.log, 200), "certificate") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(tailFile(bad.log, 200), "certificate") {
		t.Errorf("no certificate error in the log:\n%s", tailFile(bad.log, 20))
	}

	// CoreDNS's DoT listener, when the binary is there.
	bin := coreDNSBin(t)
	cert, key := ca.IssueFiles(t, []string{"coredns.test"}, netip.MustParseAddr("127.0.0.1"))
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dotAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	corefile := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(corefile, []byte(fmt.Sprintf(`tls://.:%d {
    bind 127.0.0.1
    tls %s %s
    template IN A example {
        answer "{{ .Name }} 60 IN A 192.0.2.54"
    }
}
`, ports[0], cert, key)), 0o644); err != nil {
		t.Fatal(err)
	}
	cdLog := filepath.Join(t.TempDir(), "coredns.log")
	cd, err := startCPProc("coredns", cdLog, bin, "-conf", corefile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cd.stop(5 * time.Second) })
	c := startForwarder(t, "--upstream", "tls://"+dotAddr+"#coredns.test", "--upstream-ca", caFile)
	c.waitA(t, "192.0.2.54", func(i int) string { return fmt.Sprintf("c%d.example.", i) })
	for i := range 20 {
		if got, _, err := c.askA(fmt.Sprintf("d%d.example.", i)); err != nil || got != "192.0.2.54" {
			t.Errorf("through CoreDNS over TLS: %q %v", got, err)
		}
	}
	if t.Failed() {
		t.Logf("CoreDNS log:\n%s", tailFile(cdLog, 20))
	}
}

// TestKubeDNSConfigStubDomain: a stub domain and upstreams from a kube-dns
// ConfigMap directory laid out as kubelet mounts it, followed live.
func TestKubeDNSConfigStubDomain(t *testing.T) {
	up := dnstest.Start(t, fixedA("192.0.2.1"))
	stubA := dnstest.Start(t, fixedA("192.0.2.2"))
	stubB := dnstest.Start(t, fixedA("192.0.2.3"))
	dir := t.TempDir()
	dnstest.MountConfigMap(t, dir, map[string]string{
		"stubDomains":         fmt.Sprintf(`{"stub.test": [%q]}`, stubA.Addr),
		"upstreamNameservers": fmt.Sprintf(`[%q]`, up.Addr),
	})
	a := startForwarder(t, "--kube-dns-config", dir)
	a.waitA(t, "192.0.2.2", func(i int) string { return fmt.Sprintf("a%d.stub.test.", i) })
	a.waitA(t, "192.0.2.1", func(i int) string { return fmt.Sprintf("a%d.example.", i) })

	dnstest.MountConfigMap(t, dir, map[string]string{
		"stubDomains":         fmt.Sprintf(`{"stub.test": [%q]}`, stubB.Addr),
		"upstreamNameservers": fmt.Sprintf(`[%q]`, up.Addr),
	})
	start := time.Now()
	a.waitA(t, "192.0.2.3", func(i int) string { return fmt.Sprintf("b%d.stub.test.", i) })
	t.Logf("ConfigMap update applied in %v", time.Since(start).Round(time.Millisecond))

	dnstest.MountConfigMap(t, dir, map[string]string{"stubDomains": `{"stub.test": ["192.0.2.9"`})
	file := filepath.Join(dir, "stubDomains")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tailFile(a.log, 200), file) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming %s:\n%s", file, tailFile(a.log, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 10 {
		if got, _, err := a.askA(fmt.Sprintf("c%d.stub.test.", i)); err != nil || got != "192.0.2.3" {
			t.Fatalf("after bad JSON: %q %v; want the running settings' 192.0.2.3", got, err)
		}
	}
}

// TestStubDomainByServiceName: a stub domain's server given as a headless
// Service's name is found in the cluster index (the real API server) and
// follows its EndpointSlice. The API server refuses loopback endpoints, so
// the two DNS servers listen on ULA addresses in a namespace made here,
// joined to the root namespace by a veth pair.
func TestStubDomainByServiceName(t *testing.T) {
	needRoot(t)
	needTool(t, "ip")
	cp := controlPlane(t)
	c := cp.Client
	const prefix = "fd00:d0b:53::"
	if out, err := exec.Command("ip", "-o", "addr", "show").CombinedOutput(); err != nil {
		t.Fatalf("ip addr show: %v: %s", err, out)
	} else if strings.Contains(string(out), prefix) {
		t.Fatalf("an address in %s/64 is already configured in the root namespace:\n%s", prefix, out)
	}
	srvNS := newNetNS(t, "stubsvc")
	rootIf := fmt.Sprintf("nddb%d", os.Getpid()%1000000)
	if out, err := exec.Command("ip", "link", "add", rootIf, "type", "veth", "peer", "name", "eth0", "netns", srvNS.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip link add %s: %v: %s", rootIf, err, out)
	}
	t.Cleanup(func() {
		if exec.Command("ip", "link", "show", rootIf).Run() == nil {
			if out, err := exec.Command("ip", "link", "del", rootIf).CombinedOutput(); err != nil {
				t.Errorf("ip link del %s: %v: %s", rootIf, err, out)
			}
		}
	})
	for _, args := range [][]string{{"addr", "add", prefix + "1/64", "dev", rootIf, "nodad"}, {"link", "set", rootIf, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	srvNS.MustRun(t, "ip", "addr", "add", prefix+"2/64", "dev", "eth0", "nodad")
	srvNS.MustRun(t, "ip", "addr", "add", prefix+"3/64", "dev", "eth0", "nodad")
	srvNS.MustRun(t, "ip", "link", "set", "eth0", "up")
	var first, second *dnstest.Server
	if err := srvNS.Do(func() error {
		var err error
		if first, err = dnstest.Listen("["+prefix+"2]:53", fixedA("192.0.2.21")); err != nil {
			return err
		}
		second, err = dnstest.Listen("["+prefix+"3]:53", fixedA("192.0.2.22"))
		return err
	}); err != nil {
		t.Fatalf("DNS servers in %s: %v", srvNS.Name, err)
	}
	t.Cleanup(first.Close)
	t.Cleanup(second.Close)

	ns := clusterNS(t, c, "stubsvc")
	ready := true
	createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dns"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}}})
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{prefix + "2"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	sl, err := c.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), sl, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("EndpointSlice: %v", err)
	}
	up := dnstest.Start(t, fixedA("192.0.2.20"))
	addr := startAgent(t, cp, up.Addr, "--stub-domain", "svc.test=dns."+ns+".svc.cluster.local")
	a := &forwarderAgent{addr: addr}
	a.waitA(t, "192.0.2.21", func(i int) string { return fmt.Sprintf("a%d.svc.test.", i) })
	if got, _, err := a.askA("other.example."); err != nil || got != "192.0.2.20" {
		t.Errorf("other names: %q %v, want the upstream's", got, err)
	}
	sl.Endpoints[0].Addresses = []string{prefix + "3"}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.waitA(t, "192.0.2.22", func(i int) string { return fmt.Sprintf("b%d.svc.test.", i) })
	t.Logf("stub server followed the EndpointSlice in %v", time.Since(start).Round(time.Millisecond))
	if n := first.Count(); n == 0 {
		t.Error("the first server was never asked")
	}
}
