// Package framework is what the end-to-end tests (e2e/, build tag e2e)
// share: a client of the local single-node cluster that scripts/cluster.sh
// runs, and the steps those tests are written from. The tests run on the
// cluster's one node, as root, so "the node" is this machine: its rules,
// links, conntrack table and processes are read directly; pods are reached
// through the API server (client-go), never through kubectl.
//
// What it gives:
//   - Connect: the clientset, dynamic client and REST mapper from the
//     kubeconfig scripts/cluster.sh writes (KUBECONFIG overrides), the
//     cluster's addresses (scripts/cluster.sh env) and kube-proxy's mode;
//   - images (Image): the references scripts/e2e.sh exports, or built and
//     imported by scripts/image.sh when run alone;
//   - objects: Apply (server-side apply of YAML documents, any kind),
//     Delete (and wait until gone), the agent's manifest rendered
//     (RenderManifest), waits on DaemonSets, Deployments, StatefulSets and
//     pods by their status, rollout restarts;
//   - Exec in a pod's container (stdin, stdout and stderr), Host commands
//     on the node (the tests run there, as root), InNetns in a pod's network
//     namespace;
//   - the agent: its pod, `nodedns stats --json` (Stats), its metrics,
//     ConfigMap edits, the host PIDs of its processes;
//   - rules: the agent's iptables rules counted per address, in each
//     backend, beside kube-proxy's (RulesOnce), conntrack entries;
//   - loads: dnsload (queries straight to a server: loss and the longest
//     gap) and glibc-loop (getaddrinfo through the pod's resolv.conf) run
//     in a client pod, their JSON results decoded;
//   - Tool and Start: a program of internal/tools (resolvstub, ...) built
//     and run on the node for the length of a test;
//   - PodWatch: the pods of a selector counted from the API server's watch
//     events (a rollout's surge, which sampling could miss);
//   - Upstream: the test's external world (dnsmasq on the node's loopback
//     resolver address).
//
// Failures name the object and the figure seen against the one wanted.
// Every wait is on a condition with a deadline, never a fixed sleep.
package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// Fixed addresses and names the local cluster and the tests agree on.
const (
	// AgentIP is the agent's address (deploy/daemonset.yaml's local-ip).
	AgentIP = "169.254.20.10"
	// AgentNamespace and AgentName name the agent's DaemonSet.
	AgentNamespace = "kube-system"
	AgentName      = "nodedns"
	// AgentSelector selects the agent's pods.
	AgentSelector = "app.kubernetes.io/name=nodedns"
	// AdminSocket is the agent's admin socket inside its pod.
	AdminSocket = "/run/nodedns/admin.sock"
	// KubernetesIP6 is the kubernetes Service's ClusterIP.
	KubernetesIP6 = "fdd5:6e6f:6465:96::1"
)

// Cluster is a connection to the local cluster.
type Cluster struct {
	Root       string // the repository's top directory
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	Mapper     meta.RESTMapper
	// Env is scripts/cluster.sh env: NODE_NAME, NODE_IP4, NODE_IP6,
	// STATE, ...
	Env map[string]string
	// ProxyMode is kube-proxy's mode: iptables or nftables
	// (KUBE_PROXY_MODE, as the cluster was brought up with).
	ProxyMode string

	mu     sync.Mutex
	images map[string]string
}

var (
	connectOnce sync.Once
	connected   *Cluster
	connectErr  error
)

// Connect returns the cluster (one per test binary). A cluster that is not
// up, or a kubeconfig that does not work, fails the test: a missing
// prerequisite is a failure, never a skip.
func Connect(t testing.TB) *Cluster {
	t.Helper()
	connectOnce.Do(func() { connected, connectErr = connect() })
	if connectErr != nil {
		t.Fatalf("e2e: connecting to the local cluster: %v (bring it up with scripts/cluster.sh up, or KEEP=1 scripts/e2e.sh)", connectErr)
	}
	return connected
}

func connect() (*Cluster, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Root: root, images: map[string]string{}}
	out, err := exec.Command(filepath.Join(root, "scripts", "cluster.sh"), "env").Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/cluster.sh env: %w", err)
	}
	c.Env = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			c.Env[k] = v
		}
	}
	c.Kubeconfig = os.Getenv("KUBECONFIG")
	if c.Kubeconfig == "" {
		c.Kubeconfig = c.Env["KUBECONFIG"]
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig %q: %w", c.Kubeconfig, err)
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
	}
	c.Config.QPS, c.Config.Burst = 50, 100
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	c.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client.CoreV1().Nodes().Get(ctx, c.Env["NODE_NAME"], getOpts); err != nil {
		return nil, fmt.Errorf("node %s through %s: %w", c.Env["NODE_NAME"], c.Kubeconfig, err)
	}
	c.ProxyMode = os.Getenv("KUBE_PROXY_MODE")
	if c.ProxyMode == "" {
		c.ProxyMode = "iptables"
	}
	if c.ProxyMode != "iptables" && c.ProxyMode != "nftables" {
		return nil, fmt.Errorf("KUBE_PROXY_MODE=%s: want iptables or nftables", c.ProxyMode)
	}
	return c, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}

// Image returns the reference of an image scripts/image.sh builds
// (nodedns, client, coredns): NODEDNS_E2E_IMAGE_<WHAT> when set (as
// scripts/e2e.sh sets them), else built and imported now.
func (c *Cluster) Image(t testing.TB, what string) string {
	t.Helper()
	return c.ImageVersion(t, what, "")
}

// ImageVersion is Image with VERSION set for scripts/image.sh (empty:
// its default, git describe); a version is always built.
func (c *Cluster) ImageVersion(t testing.TB, what, version string) string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	key := what + "@" + version
	if ref, ok := c.images[key]; ok {
		return ref
	}
	if version == "" {
		if ref := os.Getenv("NODEDNS_E2E_IMAGE_" + strings.ToUpper(what)); ref != "" {
			c.images[key] = ref
			return ref
		}
	}
	cmd := exec.Command(filepath.Join(c.Root, "scripts", "image.sh"), what)
	cmd.Dir = c.Root
	cmd.Env = os.Environ()
	if version != "" {
		cmd.Env = append(cmd.Env, "VERSION="+version)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/image.sh %s (VERSION=%q): %v\n%s", what, version, err, tail(stderr.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	ref := strings.TrimSpace(lines[len(lines)-1])
	if ref == "" {
		t.Fatalf("scripts/image.sh %s printed no image reference", what)
	}
	c.images[key] = ref
	return ref
}

// Host runs a command on the node and returns its standard output; a
// non-zero exit fails the test with the command, its status and its
// output.
func Host(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := HostErr(name, args...)
	if err != nil {
		t.Fatalf("on the node: %v", err)
	}
	return out
}

// HostErr runs a command on the node (at most a minute); the error names
// the command, its status and the end of its output.
func HostErr(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s%s", name, strings.Join(args, " "), err, tail(stdout.String(), 10), tail(stderr.String(), 10))
	}
	return stdout.String(), nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitFor polls cond every interval until it returns true or the timeout
// passes; then it fails the test with what the last call returned. cond's
// string says what was seen (for the failure).
func WaitFor(t testing.TB, what string, timeout, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, timeout, seen)
		}
		time.Sleep(interval)
	}
}

// InNetns runs a command on the node inside the network namespace of the
// process pid (a pod's container process, as PodPIDs or /proc finds it)
// through nsenter(1): the pod's own view of links, routes and sockets with
// the node's tools.
func InNetns(t testing.TB, pid int, name string, args ...string) string {
	t.Helper()
	return Host(t, "nsenter", append([]string{"-t", fmt.Sprint(pid), "-n", "--", name}, args...)...)
}
