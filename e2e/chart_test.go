//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/e2e/framework"
)

// The Helm chart on the local cluster (scripts/chart-e2e.sh runs these,
// TestChart*): what `helm install`, `helm upgrade` and `helm uninstall`
// do to a node. They share the agent's DaemonSet name with the manifest's
// steps: run them on a cluster without it (scripts/chart-e2e.sh brings a
// fresh one up). Each makes the release state it starts from.

const (
	release         = "nodedns"
	chartSelector   = "app.kubernetes.io/name=nodedns,app.kubernetes.io/instance=nodedns"
	releaseSelector = "app.kubernetes.io/instance=nodedns"
)

// helm runs the pinned helm (NODEDNS_HELM, or scripts/helm.sh's) against
// the cluster, for at most six minutes.
func helm(t *testing.T, c *framework.Cluster, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("NODEDNS_HELM")
	if bin == "" {
		out := framework.Host(t, filepath.Join(c.Root, "scripts", "helm.sh"))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		bin = lines[len(lines)-1]
		os.Setenv("NODEDNS_HELM", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Dir = c.Root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), err
}

// chartCentralDNS: pods labelled k8s-app=kube-dns that run no DNS server
// behind the kube-dns Service (so every answer below can only come from
// the agent), and a client pod whose only nameserver is its ClusterIP.
func chartCentralDNS(t *testing.T, c *framework.Cluster) {
	t.Helper()
	client := c.Image(t, "client")
	c.Apply(t, strings.NewReplacer("CLIENT", client, "KUBE_DNS_IP", kubeDNSIP).Replace(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: central-dns, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: dns, image: CLIENT, imagePullPolicy: Never}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: KUBE_DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata: {name: chart-e2e-client, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: None
  dnsConfig:
    nameservers: ["KUBE_DNS_IP"]
    searches: ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]
  containers:
  - {name: client, image: CLIENT, imagePullPolicy: Never}
`))
	c.WaitDeployment(t, ns, "central-dns", 2*time.Minute)
	c.WaitPod(t, "default", "chart-e2e-client", 2*time.Minute)
	framework.WaitFor(t, fmt.Sprintf("kube-proxy (%s mode) has a rule for %s", c.ProxyMode, kubeDNSIP), 10*time.Second, 200*time.Millisecond, func() (bool, string) {
		return c.KubeProxyDNAT(kubeDNSIP)
	})
}

// installed says whether the release is deployed.
func installed(t *testing.T, c *framework.Cluster) bool {
	t.Helper()
	_, err := helm(t, c, "status", release, "--namespace", ns)
	return err == nil
}

// chartInstall installs the chart: the kube-dns ClusterIP intercepted,
// metrics on the node's IP; it returns helm's output.
func chartInstall(t *testing.T, c *framework.Cluster) string {
	t.Helper()
	image := c.Image(t, "nodedns")
	i := strings.LastIndex(image, ":")
	out, err := helm(t, c, "install", release, "deploy/helm/nodedns", "--namespace", ns,
		"--set", "image.repository="+image[:i], "--set", "image.tag="+image[i+1:], "--set", "image.pullPolicy=Never",
		"--set", "kubeDNS.intercept=true", "--set", "kubeDNS.clusterIP="+kubeDNSIP, "--set", "metrics.enabled=true",
		"--set", "cleanup.timeout=2m", "--wait", "--timeout", "3m")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ensureInstalled installs the release unless it is deployed (and, with
// fresh, reinstalls it when it is).
func ensureInstalled(t *testing.T, c *framework.Cluster, fresh bool) {
	t.Helper()
	chartCentralDNS(t, c)
	if installed(t, c) {
		if !fresh {
			c.WaitDaemonSet(t, ns, release, 2*time.Minute)
			return
		}
		if _, err := helm(t, c, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m"); err != nil {
			t.Fatal(err)
		}
	}
	chartInstall(t, c)
	c.WaitDaemonSet(t, ns, release, 2*time.Minute)
}

// chartRules: 16 rules for 169.254.20.10 and 10 for the kube-dns
// ClusterIP, once each, the NODEDNS-FALLBACK chain once.
func chartRules(t *testing.T, c *framework.Cluster) {
	t.Helper()
	c.RulesOnce(t, map[string]int{agentIP: framework.RulesWithFallback, kubeDNSIP: framework.RulesPerIP})
}

// TestChartInstall (step 1): helm install with the kube-dns ClusterIP
// intercepted and metrics on the node's IP: the DaemonSet Ready; the link
// holds both addresses; the agent's --cluster-dns is the kube-dns-upstream
// Service's ClusterIP (kubelet expanded $(KUBE_DNS_UPSTREAM_SERVICE_HOST));
// cluster names answered on 169.254.20.10 and on the kube-dns ClusterIP
// (which kube-proxy load-balances to pods that run no DNS server), from
// the node and from a pod, with no conntrack entry; /metrics on the node's
// IP at port 9253.
func TestChartInstall(t *testing.T) {
	c := framework.Connect(t)
	chartCentralDNS(t, c)
	ok(t, "kube-proxy (%s mode) load-balances %s to central-dns, which runs no DNS server", c.ProxyMode, kubeDNSIP)
	if installed(t, c) {
		if _, err := helm(t, c, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m"); err != nil {
			t.Fatal(err)
		}
	}
	out := chartInstall(t, c)
	if !regexp.MustCompile(`nodedns .* is rolling out`).MatchString(out) {
		t.Fatalf("helm install printed no NOTES (want a line matching \"nodedns .* is rolling out\"):\n%s", out)
	}
	c.WaitDaemonSet(t, ns, release, 2*time.Minute)
	ok(t, "helm install --wait: DaemonSet Ready")

	pod := c.AgentPodOf(t, chartSelector)
	svc, err := c.Client.CoreV1().Services(ns).Get(context.Background(), "kube-dns-upstream", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP == "" {
		t.Fatalf("Service %s/kube-dns-upstream and its ClusterIP: %v", ns, err)
	}
	upstream := svc.Spec.ClusterIP
	cmdline := strings.ReplaceAll(c.ExecIn(t, ns, pod.Name, "nodedns", "cat", "/proc/1/cmdline"), "\x00", " ")
	if !strings.Contains(cmdline, "--cluster-dns="+upstream+" ") {
		t.Fatalf("agent %s's command line %q lacks --cluster-dns=%s", pod.Name, cmdline, upstream)
	}
	ok(t, "agent runs with --cluster-dns=%s, the kube-dns-upstream Service (from its environment)", upstream)
	chartRules(t, c)
	ok(t, "link nodelocaldns holds %s and %s; their rules once each (16 and 10)", agentIP, kubeDNSIP)

	// Flows that began before the rules existed (pods started before the
	// agent query 169.254.20.10 too) stay tracked until they time out:
	// forget them, so that what is counted below is the queries sent now.
	framework.ConntrackForget(agentIP)
	framework.ConntrackForget(kubeDNSIP)
	for _, server := range []string{agentIP, kubeDNSIP} {
		got := strings.TrimSpace(framework.Host(t, "dig", "+short", "+time=2", "+tries=2", "@"+server, "kubernetes.default.svc.cluster.local", "AAAA"))
		if got != framework.KubernetesIP6 {
			t.Fatalf("dig @%s kubernetes.default.svc.cluster.local AAAA on the node: got %q, want %q", server, got, framework.KubernetesIP6)
		}
	}
	got := strings.TrimSpace(c.Exec(t, "default", "chart-e2e-client", "dig", "+short", "+search", "kubernetes", "AAAA"))
	if got != framework.KubernetesIP6 {
		t.Fatalf("pod default/chart-e2e-client (nameserver %s): dig kubernetes AAAA got %q, want %q", kubeDNSIP, got, framework.KubernetesIP6)
	}
	tracked6, tracked4 := framework.ConntrackDNS(t, kubeDNSIP), framework.ConntrackDNS(t, agentIP)
	if tracked6 != 0 || tracked4 != 0 {
		t.Fatalf("conntrack holds DNS flows: %d to %s, %d to %s, want 0 and 0", tracked6, kubeDNSIP, tracked4, agentIP)
	}
	ok(t, "cluster names answered on %s and on %s, from the node and from a pod; no conntrack entry", agentIP, kubeDNSIP)

	addr := "[" + c.Env["NODE_IP6"] + "]:9253"
	metrics := framework.HTTPGet(t, "http://"+addr+"/metrics")
	n := framework.CountPrefix(metrics, "nodedns_")
	if n == 0 {
		t.Fatalf("metrics on the node's IP %s hold no nodedns_ series", addr)
	}
	ok(t, "metrics on the node's IP %s (%d nodedns_ samples)", addr, n)
}

// TestChartUpgradeConfig (step 2): helm upgrade of a config value only:
// the same pod, no restart, the change applied live (configuration
// reloaded).
func TestChartUpgradeConfig(t *testing.T) {
	c := framework.Connect(t)
	ensureInstalled(t, c, false)
	pod := c.AgentPodOf(t, chartSelector)
	level := "debug"
	if strings.Contains(c.AgentConfig(t), "\nlog-level: debug\n") {
		level = "info" // run again on a release that has it: a change all the same
	}
	since := metav1.NewTime(time.Now().Add(-time.Second))
	if _, err := helm(t, c, "upgrade", release, "deploy/helm/nodedns", "--namespace", ns, "--reuse-values", "--set", "config.log-level="+level, "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	if cfg := c.AgentConfig(t); !strings.Contains("\n"+cfg, "\nlog-level: "+level+"\n") {
		t.Fatalf("ConfigMap %s/nodedns not updated: want a line \"log-level: %s\":\n%s", ns, level, cfg)
	}
	framework.WaitFor(t, "'configuration reloaded' in the log of "+pod.Name, 180*time.Second, 2*time.Second, func() (bool, string) {
		raw, err := c.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "nodedns", SinceTime: &since}).DoRaw(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return bytes.Contains(raw, []byte("configuration reloaded")), fmt.Sprintf("%d bytes of log since the upgrade", len(raw))
	})
	now := c.AgentPodOf(t, chartSelector)
	if now.Name != pod.Name || len(now.Status.ContainerStatuses) == 0 || now.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the agent pod was replaced or restarted: was %s, now %s (%s)", pod.Name, now.Name, framework.ToYAML(now.Status.ContainerStatuses))
	}
	ok(t, "config change (log-level: %s) applied by the running agent %s (not restarted)", level, pod.Name)
}

// TestChartUpgradeSurge (step 3): helm upgrade with --teardown=false: a
// surge rollout; the new agents will leave their link and rules behind
// when they stop, as an agent killed with SIGKILL would.
func TestChartUpgradeSurge(t *testing.T) {
	c := framework.Connect(t)
	ensureInstalled(t, c, false)
	vals, err := helm(t, c, "get", "values", release, "--namespace", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(vals), &v); err != nil {
		t.Fatalf("helm get values: %v: %s", err, vals)
	}
	if _, set := v["extraArgs"]; set {
		ensureInstalled(t, c, true) // run again: from a release without it
	}
	pod := c.AgentPodOf(t, chartSelector)
	if _, err := helm(t, c, "upgrade", release, "deploy/helm/nodedns", "--namespace", ns, "--reuse-values", "--set", "extraArgs={--teardown=false}", "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	c.WaitDaemonSet(t, ns, release, 2*time.Minute)
	now := c.AgentPodOf(t, chartSelector)
	if now.Name == pod.Name {
		t.Fatalf("the upgrade did not replace the agent pod %s", pod.Name)
	}
	chartRules(t, c)
	ok(t, "new agent %s; rules exist once each", now.Name)
}

// TestChartUninstall (step 4): helm uninstall: the pre-delete hooks stop
// the agents, run `nodedns cleanup` on the node, and succeed; no link, no
// rule in either iptables backend, no pod, no hook object left.
func TestChartUninstall(t *testing.T) {
	c := framework.Connect(t)
	ensureInstalled(t, c, false)
	t0 := time.Now()
	if _, err := helm(t, c, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m"); err != nil {
		t.Fatal(err)
	}
	ok(t, "helm uninstall succeeded in %v", time.Since(t0).Round(time.Second))
	if framework.LinkExists() {
		t.Fatal("link nodelocaldns still there after the uninstall, want none")
	}
	if n := c.AllRules(t); n != 0 {
		t.Fatalf("%d nodedns rules left after the uninstall, want 0", n)
	}
	ok(t, "no link, no rule in either backend (the cleanup hook removed what agents with --teardown=false leave)")
	// Helm waits for the hook DaemonSet's deletion, not for its pods,
	// which the garbage collector deletes right after (gracefully).
	framework.WaitFor(t, "no object of the release or its hooks left", 60*time.Second, time.Second, func() (bool, string) {
		left := releaseObjects(c)
		return len(left) == 0, strings.Join(left, ", ")
	})
	ok(t, "no object of the release or its hooks left")
}

// releaseObjects names the objects labelled with the release (its
// DaemonSets, Jobs, pods, Services, ConfigMaps, ServiceAccounts, Roles,
// RoleBindings, ClusterRoles and ClusterRoleBindings).
func releaseObjects(c *framework.Cluster) []string {
	ctx := context.Background()
	opts := metav1.ListOptions{LabelSelector: releaseSelector}
	var left []string
	add := func(kind string, n int, names func(i int) string, err error) {
		if err != nil {
			left = append(left, fmt.Sprintf("listing %s: %v", kind, err))
			return
		}
		for i := range n {
			left = append(left, kind+"/"+names(i))
		}
	}
	apps, core, rbac, batch := c.Client.AppsV1(), c.Client.CoreV1(), c.Client.RbacV1(), c.Client.BatchV1()
	if l, err := apps.DaemonSets(ns).List(ctx, opts); err == nil {
		add("daemonset", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("daemonsets", 0, nil, err)
	}
	if l, err := batch.Jobs(ns).List(ctx, opts); err == nil {
		add("job", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("jobs", 0, nil, err)
	}
	if l, err := core.Pods(ns).List(ctx, opts); err == nil {
		add("pod", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("pods", 0, nil, err)
	}
	if l, err := core.Services(ns).List(ctx, opts); err == nil {
		add("service", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("services", 0, nil, err)
	}
	if l, err := core.ConfigMaps(ns).List(ctx, opts); err == nil {
		add("configmap", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("configmaps", 0, nil, err)
	}
	if l, err := core.ServiceAccounts(ns).List(ctx, opts); err == nil {
		add("serviceaccount", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("serviceaccounts", 0, nil, err)
	}
	if l, err := rbac.Roles(ns).List(ctx, opts); err == nil {
		add("role", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("roles", 0, nil, err)
	}
	if l, err := rbac.RoleBindings(ns).List(ctx, opts); err == nil {
		add("rolebinding", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("rolebindings", 0, nil, err)
	}
	if l, err := rbac.ClusterRoles().List(ctx, opts); err == nil {
		add("clusterrole", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("clusterroles", 0, nil, err)
	}
	if l, err := rbac.ClusterRoleBindings().List(ctx, opts); err == nil {
		add("clusterrolebinding", len(l.Items), func(i int) string { return l.Items[i].Name }, nil)
	} else {
		add("clusterrolebindings", 0, nil, err)
	}
	return left
}
