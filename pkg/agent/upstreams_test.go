package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startAgentWith runs the agent of a config file until the test ends; the
// file (and the kube-dns ConfigMap directory) is read every 50 ms.
func startAgentWith(t *testing.T, content string, logs io.Writer) (*Agent, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("listen: [%s]\nadmin: \"\"\nloop-check: false\nlameduck: 0s\n", addr)+content), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", p}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logs, nil))
	a, err := Build(cfg, Options{Log: log, Args: args, reloadPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dnstest.RunUntilCleanup(t, "run", a.Run)
	return a, addr
}

// askA returns the first A record's address for name, or an error.
func askA(addr, name string) (string, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, addr)
	if err != nil {
		return "", err
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return "", fmt.Errorf("%s: rcode %s, %d answers", name, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	a, ok := r.Answer[0].(*dns.A)
	if !ok {
		return "", fmt.Errorf("%s: %v", name, r.Answer[0])
	}
	return a.A.String(), nil
}

// eventuallyA waits until name resolves to want through addr.
func eventuallyA(t *testing.T, addr, want string, name func(i int) string) {
	t.Helper()
	i := 0
	dnstest.Eventually(t, 10*time.Second, "an answer "+want, func() error {
		n := name(i)
		i++
		got, err := askA(addr, n)
		if err == nil && got == want {
			return nil
		}
		return fmt.Errorf("%s: got %q, %v; want %s", n, got, err, want)
	})
}

// TestKubeDNSConfigLive: the ConfigMap's stub domains are served under the
// agent's own settings, follow a kubelet update, and survive bad JSON.
func TestKubeDNSConfigLive(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	own := dnstest.Start(t, answerWith("192.0.2.2"))
	cm1 := dnstest.Start(t, answerWith("192.0.2.3"))
	cm2 := dnstest.Start(t, answerWith("192.0.2.4"))
	ignored := dnstest.Start(t, answerWith("192.0.2.5"))
	dir := t.TempDir()
	dnstest.MountConfigMap(t, dir, map[string]string{
		"stubDomains": fmt.Sprintf(`{"cm.example": [%q], "own.example": [%q]}`, cm1.Addr, ignored.Addr),
	})
	logs := &dnstest.SyncBuffer{}
	a, addr := startAgentWith(t, fmt.Sprintf("upstream: [%s]\nkube-dns-config: %s\nstub-domains:\n  own.example: [%s]\n", up.Addr, dir, own.Addr), logs)

	eventuallyA(t, addr, "192.0.2.3", func(i int) string { return fmt.Sprintf("a%d.cm.example.", i) })
	if got, err := askA(addr, "a.own.example."); err != nil || got != "192.0.2.2" {
		t.Errorf("a zone the agent forwards itself: %q %v, want its own server's 192.0.2.2", got, err)
	}
	if got, err := askA(addr, "a.other.example."); err != nil || got != "192.0.2.1" {
		t.Errorf("other names: %q %v, want the upstream's", got, err)
	}

	// kubelet swaps the ConfigMap: the new server answers.
	dnstest.MountConfigMap(t, dir, map[string]string{"stubDomains": fmt.Sprintf(`{"cm.example": [%q]}`, cm2.Addr)})
	eventuallyA(t, addr, "192.0.2.4", func(i int) string { return fmt.Sprintf("b%d.cm.example.", i) })

	// Bad JSON: the running settings stay, one warning names the file.
	dnstest.MountConfigMap(t, dir, map[string]string{"stubDomains": `{"cm.example": [`})
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), filepath.Join(dir, "stubDomains")) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming %s; log:\n%s", filepath.Join(dir, "stubDomains"), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Two more reads of the directory: the bad file weighed again, and
	// not warned about again.
	polls := a.configPolls.Load()
	for a.configPolls.Load() < polls+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent stopped reading its configuration: %d reads", a.configPolls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := askA(addr, "c.cm.example."); err != nil || got != "192.0.2.4" {
		t.Errorf("after bad JSON: %q %v, want the running settings' 192.0.2.4", got, err)
	}
	if n := strings.Count(logs.String(), "kube-dns config not applied"); n != 1 {
		t.Errorf("%d warnings for one bad file, want 1", n)
	}
	// Fixed again.
	dnstest.MountConfigMap(t, dir, map[string]string{"stubDomains": fmt.Sprintf(`{"cm.example": [%q]}`, cm1.Addr)})
	eventuallyA(t, addr, "192.0.2.3", func(i int) string { return fmt.Sprintf("d%d.cm.example.", i) })
}

// TestKubeDNSUpstreams: upstreamNameservers replace the node's resolvers
// when the agent names no upstream, and not when it does.
func TestKubeDNSUpstreams(t *testing.T) {
	cmUp := dnstest.Start(t, answerWith("192.0.2.7"))
	agentUp := dnstest.Start(t, answerWith("192.0.2.8"))
	dir := t.TempDir()
	dnstest.MountConfigMap(t, dir, map[string]string{"upstreamNameservers": fmt.Sprintf(`[%q]`, cmUp.Addr)})
	_, addr := startAgentWith(t, "kube-dns-config: "+dir+"\n", io.Discard)
	eventuallyA(t, addr, "192.0.2.7", func(i int) string { return fmt.Sprintf("u%d.example.", i) })
	_, addr2 := startAgentWith(t, fmt.Sprintf("kube-dns-config: %s\nupstream: [%s]\n", dir, agentUp.Addr), io.Discard)
	eventuallyA(t, addr2, "192.0.2.8", func(i int) string { return fmt.Sprintf("v%d.example.", i) })

	// A bad directory at start: the agent starts without it.
	bad := t.TempDir()
	dnstest.MountConfigMap(t, bad, map[string]string{"upstreamNameservers": `not json`})
	logs := &dnstest.SyncBuffer{}
	_, addr3 := startAgentWith(t, fmt.Sprintf("kube-dns-config: %s\nupstream: [%s]\n", bad, agentUp.Addr), logs)
	eventuallyA(t, addr3, "192.0.2.8", func(i int) string { return fmt.Sprintf("w%d.example.", i) })
	if !strings.Contains(logs.String(), filepath.Join(bad, "upstreamNameservers")) {
		t.Errorf("no warning naming the bad file; log:\n%s", logs.String())
	}
}

// TestStubServerByClusterName: a stub domain's server given as a Service
// name is resolved from the cluster index and follows the Service's
// endpoints.
func TestStubServerByClusterName(t *testing.T) {
	// Two endpoints of one Service share its port.
	first, _ := dnstest.StartPair(t, answerWith("192.0.2.11"), answerWith("192.0.2.12"))
	port := netip.MustParseAddrPort(first.Addr).Port()

	ptr := func(b bool) *bool { return &b }
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "corp", Name: "dns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"},
			Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: int32(port)}}}}
	slice := func(ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "corp", Name: "dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
		}
	}
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "corp"}}, svc, slice("127.0.0.1"))
	ix, err := k8s.New(client, k8s.Config{Zones: []string{"cluster.local"}, TTL: 5, Pods: k8s.PodMode("disabled"), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = ix.Run(ctx) }()

	cfg := config.Default()
	cfg.Stubs = config.StubsMap{"corp.test": {Servers: config.List{fmt.Sprintf("dns.corp.svc.cluster.local:%d", port)}}}
	fc := forwarderConfig(cfg, []string{first.Addr}, kubedns.Config{}, indexResolver{ix: func() *k8s.Index { return ix }}, quietLog())
	fc.ProbeInterval = 20 * time.Millisecond
	fwd, err := upstream.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	go fwd.Run(ctx)
	ask := func(name string) string {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, err := fwd.Exchange(context.Background(), stage.Origin{}, m)
		if err != nil || len(r.Answer) == 0 {
			return fmt.Sprint(err)
		}
		return r.Answer[0].(*dns.A).A.String()
	}
	wait := func(want string) {
		t.Helper()
		i := 0
		dnstest.Eventually(t, 10*time.Second, "corp.test to answer "+want, func() error {
			got := ask(fmt.Sprintf("n%d-%d.corp.test.", i, time.Now().UnixNano()))
			i++
			if got != want {
				return fmt.Errorf("corp.test answered %q, want %s", got, want)
			}
			return nil
		})
	}
	wait("192.0.2.11")
	// The endpoint moves: the stub follows.
	if _, err := client.DiscoveryV1().EndpointSlices("corp").Update(ctx, slice("127.0.0.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("192.0.2.12")
}

// TestForwarderConfig: the kube-dns ConfigMap's stub domains sit under the
// agent's own; the zones' options reach the forwarder.
func TestForwarderConfig(t *testing.T) {
	want := config.StubsMap{
		"a.example": {Servers: config.List{"10.0.0.1"}},
		"c.example": {Servers: config.List{"tcp://10.0.0.4"}, PreferUDP: true, Policy: "sequential"},
	}
	fc := forwarderConfig(config.Config{Stubs: want, ForceTCP: true, Policy: "random"}, []string{"192.0.2.1"}, kubedns.Config{
		StubDomains: map[string][]string{"a.example": {"10.9.9.9"}, "e.example": {"10.0.0.5"}},
	}, nil, quietLog())
	if got := fc.Stubs["a.example"]; len(got) != 1 || got[0] != "10.0.0.1" {
		t.Errorf("a zone of both the agent and the ConfigMap: %v, want the agent's", got)
	}
	if got := fc.Stubs["e.example"]; len(got) != 1 || got[0] != "10.0.0.5" {
		t.Errorf("a zone of the ConfigMap only: %v", got)
	}
	if o := fc.StubOptions["c.example"]; !o.PreferUDP || o.Policy != upstream.Sequential || !fc.Options.ForceTCP {
		t.Errorf("options: %+v %+v", o, fc.Options)
	}
}

// TestHostNameUpstreamWithoutIndex: an upstream given by a name outside
// the cluster zone is resolved through --upstream-resolver, so an agent
// without the cluster index (no kubeconfig, not in a pod) starts with it
// and forwards to it; one given by a cluster-zone name cannot be
// resolved without the index, and Build says which.
func TestHostNameUpstreamWithoutIndex(t *testing.T) {
	up := dnstest.Start(t, dnstest.Records(dns.RcodeSuccess, "www.example.com. 60 IN A 192.0.2.7"))
	_, port, _ := strings.Cut(up.Addr, ":")
	res := dnstest.Start(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA && strings.EqualFold(q.Name, "ns.upstreams.example.") {
			rr, _ := dns.NewRR(q.Name + " 60 IN A 127.0.0.1")
			m.Answer = []dns.RR{rr}
		}
		_ = w.WriteMsg(m)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t))
	args := []string{"--listen", addr, "--admin=", "--loop-check=false", "--lameduck=0s",
		"--upstream", "ns.upstreams.example:" + port, "--upstream-resolver", res.Addr}
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: quietLog(), Args: args})
	if err != nil {
		t.Fatalf("an upstream given by a host name, without the cluster index: %v", err)
	}
	dnstest.RunUntilCleanup(t, "run", a.Run)
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	var r *dns.Msg
	dnstest.Eventually(t, 5*time.Second, "an answer through the upstream given by name", func() error {
		var err error
		if r, _, err = c.Exchange(m, addr); err == nil && len(r.Answer) == 1 {
			return nil
		}
		return fmt.Errorf("%v %v", r, err)
	})
	if a, ok := r.Answer[0].(*dns.A); !ok || a.A.String() != "192.0.2.7" {
		t.Errorf("answer %v, want 192.0.2.7", r.Answer[0])
	}

	args = []string{"--listen", fmt.Sprintf("127.0.0.1:%d", dnstest.FreePort(t)), "--admin=", "--loop-check=false",
		"--upstream", "dns.tools.svc.cluster.local"}
	if cfg, err = config.Load(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(cfg, Options{Log: quietLog(), Args: args}); err == nil || !strings.Contains(err.Error(), "dns.tools.svc.cluster.local names a server of the cluster zone") {
		t.Errorf("a cluster-zone name without the index: got %v, want an error naming it", err)
	}
}
