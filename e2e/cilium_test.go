//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodedns/nodedns/e2e/framework"
)

// The agent in the pod network (networkMode pod), as the backend of
// Cilium's Local Redirect Policy. Where Cilium runs (scripts/cilium-e2e.sh
// with CILIUM set), the chart's CiliumLocalRedirectPolicy objects do the
// redirect; elsewhere (NODEDNS_E2E_LRP=standin, what this machine can run)
// a stand-in does: iptables DNAT, in the node's PREROUTING ahead of
// kube-proxy, of 169.254.20.10 (the addressMatcher policy) and of the
// kube-dns ClusterIP (the serviceMatcher policy) to the newest Ready agent
// pod's IPv4 and IPv6 addresses, and nothing while no agent pod is Ready
// (the ClusterIP then falls to kube-proxy, i.e. kube-dns: the
// serviceMatcher's fallback; 169.254.20.10 goes nowhere, as an
// addressMatcher without a backend). It follows the pods' Ready condition
// every 100 ms, as Cilium follows the endpoints, and forgets the
// conntrack entries of the frontends at each switch (Cilium's socket LB
// translates each sendmsg, so no flow sticks to a gone backend). Unlike
// Cilium it translates packets, not sockets, and it cannot enforce a
// NetworkPolicy: the NetworkPolicy check runs only on Cilium.
const (
	lrpChain   = "NODEDNS-E2E-LRP"
	lrpComment = "nodedns e2e: LocalRedirectPolicy stand-in"
	// podLoadQPS is the direct load of each stream (the 400 q/s).
	podLoadQPS = 400
)

// TestCiliumPodMode: on Cilium, the cluster first (checkCiliumCluster);
// the chart in pod mode behind the redirect; cluster
// and external names answered through the kube-dns ClusterIP and through
// 169.254.20.10 by the agent (its count against CoreDNS's); then, each
// under a direct load of 400 q/s per address and glibc getent in a loop
// through each address, with the queries lost and the longest gap: a
// rolling update, a kill -9 of the serving process, and the DaemonSet
// deleted (the ClusterIP falls back to kube-dns).
func TestCiliumPodMode(t *testing.T) {
	mode := os.Getenv("NODEDNS_E2E_LRP")
	if mode != "standin" && mode != "cilium" {
		t.Fatalf("NODEDNS_E2E_LRP=%q: want standin or cilium (scripts/cilium-e2e.sh sets it)", mode)
	}
	c := setup(t)
	ensureWorkloads(t, c)
	// The central DNS (CoreDNS behind kube-dns), with its metrics: the
	// count of what reaches it.
	central := strings.Replace(kubeDNS(c.Image(t, "coredns"), c.Image(t, "client"), c.Env["NODE_IP4"]),
		"cache 30\n", "cache 30\n        prometheus :9153\n", 1)
	if !strings.Contains(central, "prometheus :9153") {
		t.Fatal("the central DNS's Corefile changed shape: no prometheus added")
	}
	c.Apply(t, central)
	c.WaitDeployment(t, ns, "central-dns", 2*time.Minute)
	legacy := c.WaitPod(t, nsA, "legacy-client", 2*time.Minute)

	t.Run("the cluster is Cilium's", func(t *testing.T) {
		if mode != "cilium" {
			t.Log("not run: the stand-in's cluster runs kube-proxy and the bridge CNI plugin")
			return
		}
		checkCiliumCluster(t, c, legacy)
	})

	chartObjs := framework.Decode(t, renderPodChart(t, c, mode == "cilium"))
	t.Cleanup(func() { c.Delete(t, chartObjs, 2*time.Minute) })
	for _, o := range chartObjs {
		c.ApplyObject(t, o)
	}
	ds := c.WaitDaemonSet(t, ns, framework.AgentName, 3*time.Minute)
	if ds.Spec.Template.Spec.HostNetwork {
		t.Fatal("the chart's pod mode DaemonSet is on the host network")
	}
	agent := c.AgentPod(t)
	ok(t, "agent %s Ready in the pod network: %v", agent.Name, podIPs(agent))
	if framework.LinkExists() || c.AllRules(t) != 0 {
		t.Fatal("pod mode: the agent made a link or rules on the node")
	}
	ok(t, "no link nodelocaldns, no nodedns rules on the node")

	var lrp *standIn
	if mode == "standin" {
		s := startStandIn(t, c)
		lrp = s
		framework.WaitFor(t, "the stand-in redirects to "+agent.Name, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
			b := s.current()
			return b == agent.Name, "backend " + b
		})
	}

	servers := map[string]string{"169.254.20.10": "169.254.20.10:53", "kube-dns ClusterIP": "[" + kubeDNSIP + "]:53"}
	clients := map[string]string{"169.254.20.10": nsA + "/client", "kube-dns ClusterIP": nsA + "/legacy-client"}
	names := []string{"web." + nsA + ".svc.cluster.local", "api." + nsB + ".svc.cluster.local", "a." + extDomain, "b." + extDomain}

	t.Run("answered by the agent", func(t *testing.T) {
		agent := c.AgentPod(t)
		agentBefore, centralBefore := agentRequests(t, c, agent), centralRequests(t, c)
		sent := 0
		for _, what := range lrpSortedKeys(servers) {
			nsName, pod, _ := strings.Cut(clients[what], "/")
			r := c.StartDNSLoad(nsName, pod, framework.DNSLoad{Server: servers[what], Names: names, QPS: 100, For: 5 * time.Second, Timeout: 2 * time.Second}).Wait(t)
			if r.Failed != 0 || r.OK == 0 {
				t.Fatalf("through %s: %s", what, r)
			}
			sent += r.Sent
			ok(t, "through %s (%s): cluster and external names over UDP: %s; over TCP answered", what, servers[what], r)
			// TCP too (the policies name dns and dns-tcp).
			host, _, _ := strings.Cut(strings.Trim(servers[what], "[]"), "]:")
			host = strings.TrimSuffix(host, ":53")
			if out := c.Exec(t, nsName, pod, "dig", "+tcp", "+short", "@"+host, names[0], "A"); strings.TrimSpace(out) == "" {
				t.Fatalf("dig +tcp @%s %s: no answer", host, names[0])
			}
			// glibc through the pod's resolv.conf (169.254.20.10, or only
			// the ClusterIP for the legacy client): search path included.
			out := c.Exec(t, nsName, pod, "getent", "ahosts", "web")
			if !strings.Contains(out, "STREAM") {
				t.Fatalf("getent ahosts web in %s: %q", clients[what], out)
			}
		}
		agentDelta, centralDelta := agentRequests(t, c, agent)-agentBefore, centralRequests(t, c)-centralBefore
		ok(t, "counted: the agent %.0f requests, CoreDNS %.0f, for %d sent", agentDelta, centralDelta, sent)
		if agentDelta < float64(sent) {
			t.Errorf("the agent counted %.0f requests for %d sent: the redirect does not reach it", agentDelta, sent)
		}
		if centralDelta > float64(sent)/100 {
			t.Errorf("CoreDNS counted %.0f requests for %d sent: queries bypass the agent", centralDelta, sent)
		}
	})

	t.Run("default-deny egress NetworkPolicy", func(t *testing.T) {
		if mode != "cilium" {
			// Said plainly, not skipped: the stand-in's cluster has no
			// policy engine (Debian's bridge CNI plugin enforces nothing),
			// so a policy would prove nothing here.
			t.Log("not run: no policy engine on the stand-in's cluster (bridge CNI); it runs with Cilium")
			return
		}
		// The Kubernetes documentation's shape: deny all egress, allow DNS
		// to the kube-dns pods. Cilium enforces it on the translated
		// destination, the agent pod: it breaks until the agent's pods are
		// allowed too (docs/install.md, "Cilium").
		policy := func(withAgent bool) string {
			agentPeer := ""
			if withAgent {
				agentPeer = "\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n      podSelector: {matchLabels: {app.kubernetes.io/name: nodedns}}"
			}
			return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: dns-only, namespace: " + nsA + "}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n      podSelector: {matchLabels: {k8s-app: kube-dns}}" + agentPeer + "\n    ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]\n"
		}
		// probe sends a second of queries through each address from its
		// client in the policy's namespace.
		probe := func(what string, d time.Duration) framework.DNSLoadResult {
			nsName, pod, _ := strings.Cut(clients[what], "/")
			return c.StartDNSLoad(nsName, pod, framework.DNSLoad{Server: servers[what], Names: names[:1], QPS: 20, For: d, Timeout: time.Second}).Wait(t)
		}
		objs := c.Apply(t, policy(false))
		t.Cleanup(func() { c.Delete(t, objs, time.Minute) })
		// The negative control: the rule as the Kubernetes documentation
		// writes it, without the agent's peer; Cilium drops what the
		// redirect sends to the agent's pod, through either address.
		for _, what := range lrpSortedKeys(servers) {
			framework.WaitFor(t, "the kube-dns-only policy blocks the queries redirected from "+what, 30*time.Second, time.Second, func() (bool, string) {
				r := probe(what, time.Second)
				return r.OK == 0, r.String()
			})
			ok(t, "negative control: a default-deny egress policy allowing DNS to the kube-dns pods only: the queries redirected from %s to the agent are dropped (Cilium enforces it)", what)
		}
		c.Apply(t, policy(true))
		agent := c.AgentPod(t)
		for _, what := range lrpSortedKeys(servers) {
			framework.WaitFor(t, "the policy with the agent's pods lets DNS through "+what, 30*time.Second, time.Second, func() (bool, string) {
				r := probe(what, time.Second)
				return r.Failed == 0 && r.OK > 0, r.String()
			})
			agentBefore, centralBefore := agentRequests(t, c, agent), centralRequests(t, c)
			r := probe(what, 3*time.Second)
			agentDelta, centralDelta := agentRequests(t, c, agent)-agentBefore, centralRequests(t, c)-centralBefore
			if r.Failed != 0 || r.OK == 0 {
				t.Errorf("with the agent's peer, through %s: %s", what, r)
			}
			if agentDelta < float64(r.OK) || centralDelta > float64(r.Sent)/100 {
				t.Errorf("with the agent's peer, through %s: %s; the agent counted %.0f, CoreDNS %.0f: not answered by the agent", what, r, agentDelta, centralDelta)
			}
			ok(t, "with the agent's pods added as a peer (docs/install.md#networkpolicy), through %s: %s; counted: the agent %.0f, CoreDNS %.0f", what, r, agentDelta, centralDelta)
		}
	})

	type bounds struct{ lostPct, gapMS float64 }
	disrupt := func(t *testing.T, what string, dur, at time.Duration, act func(t *testing.T), want map[string]*bounds) {
		var direct = map[string]*framework.Running[framework.DNSLoadResult]{}
		var glibc = map[string]*framework.Running[framework.GlibcResult]{}
		for _, a := range lrpSortedKeys(servers) {
			nsName, pod, _ := strings.Cut(clients[a], "/")
			direct[a] = c.StartDNSLoad(nsName, pod, framework.DNSLoad{Server: servers[a], Names: names, QPS: podLoadQPS, For: dur, Timeout: 2 * time.Second})
			glibc[a] = c.StartGlibcLoop(nsName, pod, framework.GlibcLoop{Threads: 1, For: dur, PauseMS: 50, Names: []string{"web", "a." + extDomain}})
		}
		time.Sleep(at) // the loads' baseline before the disruption
		act(t)
		for _, a := range lrpSortedKeys(servers) {
			d, g := direct[a].Wait(t), glibc[a].Wait(t)
			t.Logf("%s, through %s: direct %s; glibc %s", what, a, d, g)
			b := want[a]
			if b == nil {
				ok(t, "%s, through %s: figures only (no fallback expected): direct lost %d of %d, longest gap %.0f ms; glibc failed %d of %d", what, a, d.Failed, d.Sent, d.LongestGap, g.Failed, g.Lookups)
				continue
			}
			if d.FailPct > b.lostPct || d.LongestGap > b.gapMS || d.Sent < int(float64(podLoadQPS)*dur.Seconds()*0.5) {
				t.Errorf("%s, through %s: direct %s; want at most %.1f %% lost, a gap of at most %.0f ms", what, a, d, b.lostPct, b.gapMS)
			}
			if g.FailPct > 1 {
				t.Errorf("%s, through %s: glibc %s; want at most 1 %% failed", what, a, g)
			}
			ok(t, "%s, through %s: direct lost %d of %d (%.2f %%), longest gap %.0f ms; glibc failed %d of %d, longest gap %.0f ms",
				what, a, d.Failed, d.Sent, d.FailPct, d.LongestGap, g.Failed, g.Lookups, g.LongestGap)
		}
	}
	both := func(lost, gap float64) map[string]*bounds {
		return map[string]*bounds{"169.254.20.10": {lost, gap}, "kube-dns ClusterIP": {lost, gap}}
	}

	t.Run("rolling update", func(t *testing.T) {
		disrupt(t, "rolling update", 45*time.Second, 5*time.Second, func(t *testing.T) {
			c.RolloutRestart(t, ns, framework.AgentName)
			waitRollout(t, c)
			framework.WaitFor(t, "one agent pod left", time.Minute, 200*time.Millisecond, func() (bool, string) {
				n := len(c.AgentPods(t, framework.AgentSelector))
				return n == 1, fmt.Sprintf("%d pods", n)
			})
		}, both(0.5, 1000))
	})

	t.Run("kill -9 of the serving process", func(t *testing.T) {
		agent := c.AgentPod(t)
		switches := 0
		if lrp != nil {
			switches = lrp.switched()
		}
		defer func() {
			// The restart is the supervisor's, on the same sockets: the
			// pod must stay Ready, so the redirect never leaves it.
			if lrp != nil && lrp.switched() != switches {
				t.Errorf("the redirect changed backend %d times during the kill -9 (the pod turned not ready): its readiness probe caught the restart", lrp.switched()-switches)
			}
		}()
		disrupt(t, "kill -9", 20*time.Second, 5*time.Second, func(t *testing.T) {
			pid := framework.ServingPID(string(agent.UID))
			if pid == 0 {
				t.Fatalf("no serving process of %s found", agent.Name)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill -9 %d: %v", pid, err)
			}
			framework.WaitFor(t, "a new serving process", 10*time.Second, 50*time.Millisecond, func() (bool, string) {
				p := framework.ServingPID(string(agent.UID))
				return p != 0 && p != pid, fmt.Sprintf("serving pid %d", p)
			})
		}, both(0.5, 1500))
	})

	t.Run("DaemonSet deleted", func(t *testing.T) {
		var dsObj []*unstructured.Unstructured
		for _, o := range chartObjs {
			if o.GetKind() == "DaemonSet" {
				dsObj = append(dsObj, o)
			}
		}
		disrupt(t, "DaemonSet deleted", 30*time.Second, 5*time.Second, func(t *testing.T) {
			c.Delete(t, dsObj, 2*time.Minute)
		}, map[string]*bounds{"kube-dns ClusterIP": {0.5, 2000}}) // 169.254.20.10: an addressMatcher has no fallback
		// The ClusterIP's answers now come from CoreDNS.
		before := centralRequests(t, c)
		r := c.StartDNSLoad(nsA, "legacy-client", framework.DNSLoad{Server: servers["kube-dns ClusterIP"], Names: names[:1], QPS: 50, For: 2 * time.Second, Timeout: 2 * time.Second}).Wait(t)
		if after := centralRequests(t, c); r.Failed != 0 || after-before < float64(r.OK) {
			t.Errorf("after the DaemonSet's deletion: %s; CoreDNS counted %.0f", r, after-before)
		}
		ok(t, "without an agent the kube-dns ClusterIP is answered by CoreDNS (the serviceMatcher's fallback)")
	})
}

// checkCiliumCluster: what the pod mode relies on in the cluster's Cilium
// mode (scripts/cluster.sh, CLUSTER_CNI=cilium), before the chart: the
// pod's addresses are Cilium endpoints', one a family; no kube-proxy ran
// (no KUBE-SERVICES chain in either iptables backend); Cilium's service
// table holds the kube-dns ClusterIP with an active backend, which the
// socket load balancer then serves (the tests after this one query it).
func checkCiliumCluster(t *testing.T, c *framework.Cluster, pod *corev1.Pod) {
	dir := strings.Split(strings.TrimSpace(framework.Host(t, filepath.Join(c.Root, "scripts", "cilium-bin.sh"))), "\n")
	dbg := filepath.Join(dir[len(dir)-1], "bin", "cilium-dbg")
	ips := podIPs(pod)
	if len(ips) != 2 {
		t.Fatalf("pod %s/%s has addresses %v: want one a family", pod.Namespace, pod.Name, ips)
	}
	endpoints := framework.Host(t, dbg, "endpoint", "list", "-o", "json")
	for _, ip := range ips {
		if !strings.Contains(endpoints, `"`+ip+`"`) {
			t.Errorf("no Cilium endpoint holds %s (cilium-dbg endpoint list)", ip)
		}
	}
	ok(t, "the pod's addresses %v are Cilium endpoints'", ips)
	for _, save := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		if n := framework.CountPrefix(framework.Host(t, save), ":KUBE-SERVICES"); n != 0 {
			t.Errorf("%s: a KUBE-SERVICES chain: kube-proxy ran beside Cilium's kube-proxy replacement", save)
		}
	}
	ok(t, "no kube-proxy chains in either iptables backend")
	front := "[" + kubeDNSIP + "]:53/UDP"
	services := framework.Host(t, dbg, "service", "list")
	active := false
	for _, l := range strings.Split(services, "\n") {
		if strings.Contains(l, front) && strings.Contains(l, "active") {
			active = true
		}
	}
	if !active {
		t.Fatalf("Cilium's service table has no active backend for kube-dns %s:\n%s", front, services)
	}
	ok(t, "kube-dns %s has an active backend in Cilium's service table (socket LB)", front)
}

// renderPodChart renders the chart for pod mode: this tree's image, the
// test upstream on the node's link-local address (the node's resolv.conf
// names 127.0.53.53, a loopback address no pod reaches), the kube-dns
// ClusterIP; the CiliumLocalRedirectPolicy objects only where Cilium runs.
func renderPodChart(t *testing.T, c *framework.Cluster, withPolicies bool) string {
	t.Helper()
	image := c.Image(t, "nodedns")
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		t.Fatalf("image %q: want repository:tag", image)
	}
	args := []string{"template", "nodedns", filepath.Join(c.Root, "deploy", "helm", "nodedns"), "--namespace", ns,
		"--set", "networkMode=pod", "--set", "kubeDNS.clusterIP=" + kubeDNSIP,
		"--set", "image.repository=" + image[:i], "--set", "image.tag=" + image[i+1:], "--set", "image.pullPolicy=Never",
		"--set", "config.upstream[0]=" + c.Env["NODE_IP4"],
		"--set", "cilium.localRedirectPolicy.create=" + strconv.FormatBool(withPolicies)}
	if v := os.Getenv("CILIUM_VERSION"); v != "" {
		args = append(args, "--set", "cilium.version="+v)
	}
	out, err := exec.Command(helmBin(t, c), args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("helm: %v", err)
	}
	return string(out)
}

// helmBin is $NODEDNS_HELM, else the pinned build scripts/helm.sh caches.
func helmBin(t *testing.T, c *framework.Cluster) string {
	t.Helper()
	if h := os.Getenv("NODEDNS_HELM"); h != "" {
		return h
	}
	out, err := exec.Command(filepath.Join(c.Root, "scripts", "helm.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/helm.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

func lrpSortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sumSeries sums the samples of a metric family in a Prometheus text
// exposition.
func sumSeries(text, name string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func metricsURL(ip, port string) string {
	if strings.Contains(ip, ":") {
		ip = "[" + ip + "]"
	}
	return "http://" + ip + ":" + port + "/metrics"
}

// agentRequests is the agent's coredns_dns_requests_total, from its
// metrics on the pod's IP.
func agentRequests(t *testing.T, c *framework.Cluster, p *corev1.Pod) float64 {
	t.Helper()
	return sumSeries(framework.HTTPGet(t, metricsURL(p.Status.PodIP, "9253")), "coredns_dns_requests_total")
}

// centralRequests is CoreDNS's coredns_dns_requests_total (the central
// DNS's pods), from their metrics.
func centralRequests(t *testing.T, c *framework.Cluster) float64 {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for i := range l.Items {
		if framework.PodReady(&l.Items[i]) {
			sum += sumSeries(framework.HTTPGet(t, metricsURL(l.Items[i].Status.PodIP, "9153")), "coredns_dns_requests_total")
		}
	}
	return sum
}

// standIn is the Local Redirect Policy stand-in (see the top of this
// file).
type standIn struct {
	c       *framework.Cluster
	mu      sync.Mutex
	backend string // the agent pod redirected to ("": none)
	// switches counts the changes of backend.
	switches int
	stop     chan struct{}
	done     chan struct{}
	err      error
}

func startStandIn(t *testing.T, c *framework.Cluster) *standIn {
	t.Helper()
	s := &standIn{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	for _, bin := range []string{"iptables-nft", "ip6tables-nft"} {
		framework.Host(t, bin, "-w", "-t", "nat", "-N", lrpChain)
		framework.Host(t, bin, "-w", "-t", "nat", "-I", "PREROUTING", "1", "-m", "comment", "--comment", lrpComment, "-j", lrpChain)
	}
	t.Cleanup(func() {
		close(s.stop)
		<-s.done
		for _, bin := range []string{"iptables-nft", "ip6tables-nft"} {
			for _, args := range [][]string{
				{"-w", "-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", lrpComment, "-j", lrpChain},
				{"-w", "-t", "nat", "-F", lrpChain}, {"-w", "-t", "nat", "-X", lrpChain}} {
				if out, err := framework.HostErr(bin, args...); err != nil {
					t.Errorf("removing the stand-in: %s %s: %v: %s", bin, strings.Join(args, " "), err, out)
				}
			}
		}
		framework.ConntrackForget(agentIP)
		framework.ConntrackForget(kubeDNSIP)
		if s.err != nil {
			t.Errorf("the stand-in: %v", s.err)
		}
	})
	go s.run()
	return s
}

func (s *standIn) switched() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.switches
}

func (s *standIn) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backend
}

func (s *standIn) run() {
	defer close(s.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := s.sync(); err != nil && s.err == nil {
			s.err = err
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// sync points the frontends at the newest Ready agent pod on the node.
func (s *standIn) sync() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := s.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
	if err != nil {
		return nil // the API server busy: try again at the next tick
	}
	var best *corev1.Pod
	for i := range l.Items {
		p := &l.Items[i]
		if p.Spec.NodeName != s.c.Env["NODE_NAME"] || !framework.PodReady(p) {
			continue
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	name := ""
	if best != nil {
		name = best.Name
	}
	if name == s.current() {
		return nil
	}
	var v4, v6 string
	if best != nil {
		for _, ip := range best.Status.PodIPs {
			if strings.Contains(ip.IP, ":") {
				v6 = ip.IP
			} else {
				v4 = ip.IP
			}
		}
	}
	rules := func(dst, to string) string {
		if to == "" {
			return ""
		}
		var b strings.Builder
		for _, proto := range []string{"udp", "tcp"} {
			fmt.Fprintf(&b, "-A %s -d %s -p %s --dport 53 -m comment --comment %q -j DNAT --to-destination %s\n", lrpChain, dst, proto, lrpComment, to)
		}
		return b.String()
	}
	to6 := ""
	if v6 != "" {
		to6 = "[" + v6 + "]:53"
	}
	to4 := ""
	if v4 != "" {
		to4 = v4 + ":53"
	}
	for _, r := range []struct{ bin, body string }{
		{"iptables-nft-restore", rules(agentIP+"/32", to4)},
		{"ip6tables-nft-restore", rules(kubeDNSIP+"/128", to6)},
	} {
		cmd := exec.Command(r.bin, "--noflush", "-w")
		cmd.Stdin = strings.NewReader("*nat\n-F " + lrpChain + "\n" + r.body + "COMMIT\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", r.bin, err, out)
		}
	}
	framework.ConntrackForget(agentIP)
	framework.ConntrackForget(kubeDNSIP)
	s.mu.Lock()
	s.backend = name
	s.switches++
	s.mu.Unlock()
	return nil
}

// waitRollout waits until the agents' DaemonSet has rolled out its newest
// generation (the controller given it before "rolled out" is judged).
func waitRollout(t *testing.T, c *framework.Cluster) {
	t.Helper()
	c.WaitDaemonSet(t, ns, framework.AgentName, 2*time.Minute)
}
