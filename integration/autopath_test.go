//go:build integration

package integration

// Search-path shortcuts for real, with the resolvers pods run rather than
// a fake: the agent, a real API server
// holding two "pods" on this node, and glibc's getent and dig inside each
// pod's network namespace with the search list and ndots:5 kubelet writes.
//
// Layout. The API server listens on 127.0.0.1 of the root namespace, so the
// agent runs there too: the root namespace plays the node. Each pod is a
// network namespace joined to the root one by a veth pair with link-local
// addresses (169.254.123.0/28; a ULA on the pod side so that glibc's
// AI_ADDRCONFIG asks AAAA as a dual-stack pod does); its IPs are registered
// as a Pod on this node. The agent listens on the root-side address of each
// pair, and each pod's resolv.conf names the address on its own link. The
// upstream is a scripted server on 127.0.0.1 where api.example.com exists
// and every other name is NXDOMAIN.
//
// Counting. An iptables rule in each pod namespace's OUTPUT chain counts the
// UDP (and TCP) packets the pod sends to the agent: the queries the agent
// received, read per lookup. The agent's /stats must agree (answers, and
// shortcuts and queries saved); the upstream counts what reached it.
//
// Figures (logged as FIGURE lines, never asserted; bench/RESULTS.md):
// wall time and agent CPU per getent lookup with shortcuts on and off.
// NODEDNS_AUTOPATH_AGENT_ARGS adds agent flags (e.g. --udp-readers
// poller); NODEDNS_AUTOPATH_DNSPERF=1 adds per-query dnsperf figures.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const (
	apZone       = "cluster.local"
	apExtra      = "corp.example" // the node's own search domain (--search)
	apExternal   = "api.example.com"
	apExternalV4 = "192.0.2.80"   // data in answers only
	apExternalV6 = "2001:db8::80" // data in answers only
	apNowhere    = "nowhere.example.net"
	apRounds     = 20             // rounds of the figures, on and off interleaved
	apSingleRuns = 5              // getent processes (one lookup each) per round and mode
	apBatch      = 50             // lookups in one getent process for the per-lookup figure
	apNodeCIDR   = "169.254.123." // every address below is in 169.254.123.0/28
)

// apPodSpec is one pod: its Kubernetes namespace and its link.
type apPodSpec struct {
	label          string // k8s namespace suffix and netns label: "a" or "b"
	nodeV4, podV4  string
	podV6          string
	namespace, pod string // filled in
}

// apEnv is the whole setup shared by the autopath-on and -off runs.
type apEnv struct {
	cp       *ControlPlane
	node     string
	nsA, nsB string // Kubernetes namespaces of the two pods
	webIP    string // ClusterIP of web in nsA (data only)
	dbIP     string // ClusterIP of db in nsB (data only)
	podA     *netNS // in nsA
	podB     *netNS // in nsB
	podC     *netNS // in nsA too: the figures' second agent serves it
	specA    apPodSpec
	specB    apPodSpec
	specC    apPodSpec
	up       *apUpstream
	// agentArgs are more flags for startAgent (another test's mode).
	agentArgs []string
}

// apUpstream is the scripted upstream: api.example.com has A and AAAA,
// every other name is NXDOMAIN (names under corp.example included). It
// records every question it gets.
type apUpstream struct {
	srv   *dnstest.Server
	mu    sync.Mutex
	names []string // "name type"
}

func (u *apUpstream) handle(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = true
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	u.mu.Lock()
	u.names = append(u.names, name+" "+dns.TypeToString[q.Qtype])
	u.mu.Unlock()
	zone := "."
	for _, z := range []string{"example.com.", apExtra + ".", "example.net."} {
		if name == z || strings.HasSuffix(name, "."+z) {
			zone = z
		}
	}
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
		Ns: "ns.invalid.", Mbox: "hostmaster.invalid.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 300}
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 300}
	switch {
	case name == apExternal+"." && q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: net.ParseIP(apExternalV4)}}
	case name == apExternal+"." && q.Qtype == dns.TypeAAAA:
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: net.ParseIP(apExternalV6)}}
	case name == apExternal+".":
		m.Ns = []dns.RR{soa}
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	}
	_ = w.WriteMsg(m)
}

// count is how many questions have arrived so far.
func (u *apUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.names)
}

// since returns the questions that arrived after the first n.
func (u *apUpstream) since(n int) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.names[n:]...)
}

// apEnvSeq numbers the environments of one test binary.
var apEnvSeq atomic.Int64

func newAutopathEnv(t *testing.T) *apEnv {
	t.Helper()
	needRoot(t)
	for _, tool := range []string{"ip", "iptables", "getent", "dig", "bash"} {
		needTool(t, tool)
	}
	// The veths live in the root namespace: refuse to run over addresses
	// someone else holds (a second run of this test, say).
	if out, err := exec.Command("ip", "-o", "addr", "show").CombinedOutput(); err != nil {
		t.Fatalf("ip addr show: %v: %s", err, out)
	} else if strings.Contains(string(out), " "+apNodeCIDR) {
		t.Fatalf("an address in %s0/24 is already configured in the root namespace:\n%s", apNodeCIDR, out)
	}

	e := &apEnv{
		cp:    controlPlane(t),
		node:  fmt.Sprintf("nd-autopath-node-%d", os.Getpid()),
		specA: apPodSpec{label: "a", nodeV4: apNodeCIDR + "1", podV4: apNodeCIDR + "2", podV6: "fd00:123:a::2"},
		specB: apPodSpec{label: "b", nodeV4: apNodeCIDR + "5", podV4: apNodeCIDR + "6", podV6: "fd00:123:b::2"},
		specC: apPodSpec{label: "c", nodeV4: apNodeCIDR + "9", podV4: apNodeCIDR + "10", podV6: "fd00:123:c::2"},
	}
	// Namespace names unique to this run: the control plane is shared by
	// every test of the binary, and a deleted namespace stays Terminating
	// (no namespace controller runs).
	// Per environment too: several tests build one (autopath, the
	// forwarded cluster zone).
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), apEnvSeq.Add(1))
	e.nsA, e.nsB = "team-a-"+suffix, "team-b-"+suffix
	e.specA.namespace, e.specB.namespace, e.specC.namespace = e.nsA, e.nsB, e.nsA
	e.specA.pod, e.specB.pod, e.specC.pod = "client-a", "client-b", "client-c"

	c := e.cp.Client
	apCreateNamespace(t, c, e.nsA)
	apCreateNamespace(t, c, e.nsB)
	e.webIP = apCreateService(t, c, e.nsA, "web")
	e.dbIP = apCreateService(t, c, e.nsB, "db")

	u := &apUpstream{}
	srv, err := dnstest.Listen("127.0.0.1:0", u.handle)
	if err != nil {
		t.Fatalf("starting the upstream: %v", err)
	}
	t.Cleanup(srv.Close)
	u.srv = srv
	e.up = u

	e.podA = e.newPod(t, &e.specA)
	e.podB = e.newPod(t, &e.specB)
	e.podC = e.newPod(t, &e.specC)
	return e
}

func apCreateNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
}

// apCreateService creates a ClusterIP Service and returns its ClusterIP.
func apCreateService(t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	got, err := c.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		if err := c.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting service %s/%s: %v", ns, name, err)
		}
	})
	if got.Spec.ClusterIP == "" || got.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("service %s/%s has no ClusterIP", ns, name)
	}
	return got.Spec.ClusterIP
}

// apCreatePod registers a running Pod on node with the given IPs, as the
// kubelet would report it.
func apCreatePod(t *testing.T, c kubernetes.Interface, ns, name, node string, ips ...string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:0"}}},
	}
	p, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Errorf("deleting pod %s/%s: %v", ns, name, err)
		}
	})
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ips[0]
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the status of pod %s/%s: %v", ns, name, err)
	}
}

// newPod creates the pod's network namespace, its veth pair to the root
// namespace, its resolv.conf and counters, and registers it in the API
// server.
func (e *apEnv) newPod(t *testing.T, s *apPodSpec) *netNS {
	t.Helper()
	ns := newNetNS(t, "appod"+s.label)
	rootIf := fmt.Sprintf("ndap%d%s", os.Getpid()%1000000, s.label)
	if out, err := exec.Command("ip", "link", "add", rootIf, "type", "veth", "peer", "name", "eth0", "netns", ns.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip link add %s: %v: %s", rootIf, err, out)
	}
	t.Cleanup(func() {
		// Deleting the namespace deletes the pair too; this runs first
		// and makes sure the root side is gone even if that fails.
		if exec.Command("ip", "link", "show", rootIf).Run() == nil {
			if out, err := exec.Command("ip", "link", "del", rootIf).CombinedOutput(); err != nil {
				t.Errorf("ip link del %s: %v: %s", rootIf, err, out)
			}
		}
	})
	for _, args := range [][]string{
		{"addr", "add", s.nodeV4 + "/30", "dev", rootIf},
		{"link", "set", rootIf, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ns.MustRun(t, "ip", "addr", "add", s.podV4+"/30", "dev", "eth0")
	ns.MustRun(t, "ip", "addr", "add", s.podV6+"/64", "dev", "eth0", "nodad")
	ns.MustRun(t, "ip", "link", "set", "eth0", "up")

	// What kubelet writes for a ClusterFirst pod, with the node's own
	// search domain after the cluster's. ip netns exec bind-mounts it
	// over /etc/resolv.conf.
	dir := filepath.Join("/etc/netns", ns.Name)
	_, statErr := os.Stat("/etc/netns")
	createdTop := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
		if createdTop {
			_ = os.Remove("/etc/netns") // only if empty: another test may use it
		}
	})
	conf := fmt.Sprintf("nameserver %s\nsearch %s.svc.%s svc.%s %s %s\noptions ndots:5\n",
		s.nodeV4, s.namespace, apZone, apZone, apZone, apExtra)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Fatalf("writing resolv.conf: %v", err)
	}

	// Counters: every UDP packet and every TCP SYN to the agent.
	ns.MustRun(t, "iptables", "-w", "-A", "OUTPUT", "-d", s.nodeV4, "-p", "udp", "--dport", "53", "-j", "ACCEPT")
	ns.MustRun(t, "iptables", "-w", "-A", "OUTPUT", "-d", s.nodeV4, "-p", "tcp", "--dport", "53", "--syn", "-j", "ACCEPT")

	apCreatePod(t, e.cp.Client, s.namespace, s.pod, e.node, s.podV4, s.podV6)
	return ns
}

// apCounts reads the pod's counters: UDP queries and TCP connections to
// the agent since the last apZero.
func apCounts(ns *netNS) (udp, tcp int, err error) {
	out, err := ns.Run("iptables", "-w", "-L", "OUTPUT", "-v", "-x", "-n")
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || !strings.Contains(l, "dpt:53") {
			continue
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			return 0, 0, fmt.Errorf("counter line %q: %w", l, err)
		}
		found++
		if strings.Contains(l, "udp dpt:53") {
			udp = n
		} else {
			tcp = n
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("counters not found in:\n%s", out)
	}
	return udp, tcp, nil
}

func apZero(t *testing.T, ns *netNS) {
	t.Helper()
	ns.MustRun(t, "iptables", "-w", "-Z", "OUTPUT")
}

// apExec runs a command in ns and returns its output and exit status (a
// non-zero status is not an error).
func apExec(ns *netNS, name string, args ...string) (out string, code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := ns.Command(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return string(b), ee.ExitCode(), nil
	}
	if err != nil {
		return string(b), -1, fmt.Errorf("in %s: %s %s: %w: %s", ns.Name, name, strings.Join(args, " "), err, b)
	}
	return string(b), 0, nil
}

// apResult is what one lookup produced.
type apResult struct {
	status  string   // dig: NOERROR, NXDOMAIN...; getent: "ok" or "exit N"
	addrs   []string // sorted, unique
	canon   string   // getent: the canonical name; dig: the owner of the address records
	chain   []string // dig: the answer section as "owner TYPE rdata"
	queries int      // UDP packets to the agent
	tcp     int      // TCP connections to the agent
}

func (r apResult) String() string {
	return fmt.Sprintf("status=%s addrs=%v canon=%q queries=%d tcp=%d chain=%q", r.status, r.addrs, r.canon, r.queries, r.tcp, r.chain)
}

// getent runs `getent ahosts name` in ns and counts its queries.
func apGetent(t *testing.T, ns *netNS, name string) apResult {
	t.Helper()
	apZero(t, ns)
	out, code, err := apExec(ns, "getent", "ahosts", name)
	if err != nil {
		t.Fatal(err)
	}
	r := apResult{status: "ok"}
	if code != 0 {
		r.status = fmt.Sprintf("exit %d", code)
	}
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if !slices.Contains(r.addrs, f[0]) {
			r.addrs = append(r.addrs, f[0])
		}
		if i == 0 && len(f) >= 3 {
			r.canon = f[2]
		}
	}
	sort.Strings(r.addrs)
	if r.queries, r.tcp, err = apCounts(ns); err != nil {
		t.Fatal(err)
	}
	return r
}

// apDigQuery runs dig in ns against the nameserver of its resolv.conf
// (with +search when search is set) and counts its queries.
func apDigQuery(t *testing.T, ns *netNS, search bool, name, qtype string) apResult {
	t.Helper()
	apZero(t, ns)
	args := []string{"+noall", "+comments", "+answer", "+tries=1", "+time=2"}
	if search {
		args = append(args, "+search")
	}
	out, code, err := apExec(ns, "dig", append(args, name, qtype)...)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("dig %s %s in %s: exit %d:\n%s", name, qtype, ns.Name, code, out)
	}
	var r apResult
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, "status: "); strings.HasPrefix(l, ";; ->>HEADER<<-") && i >= 0 {
			r.status = strings.TrimSuffix(strings.Fields(l[i+len("status: "):])[0], ",")
			continue
		}
		if l == "" || strings.HasPrefix(l, ";") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		r.chain = append(r.chain, f[0]+" "+f[3]+" "+f[4])
		if f[3] == "A" || f[3] == "AAAA" {
			r.addrs = append(r.addrs, f[4])
			r.canon = strings.TrimSuffix(f[0], ".")
		}
	}
	sort.Strings(r.addrs)
	if r.queries, r.tcp, err = apCounts(ns); err != nil {
		t.Fatal(err)
	}
	return r
}

// startAgent runs the agent in the root namespace, listening on port 53
// of the given root-side link addresses.
func (e *apEnv) startAgent(t *testing.T, autopath bool, addrs ...string) (*proc, string) {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{"serve",
		"--listen", strings.Join(addrs, ":53,") + ":53",
		"--kubeconfig", e.cp.Kubeconfig,
		"--node-name", e.node,
		"--upstream", e.up.srv.Addr,
		"--search", apExtra,
		"--loop-check=false",
		"--admin", adminAddr,
		"--lameduck", "0s",
		"--autopath=" + strconv.FormatBool(autopath),
	}
	// Extra flags for figure runs (e.g. --udp-readers poller).
	args = append(args, strings.Fields(os.Getenv("NODEDNS_AUTOPATH_AGENT_ARGS"))...)
	args = append(args, e.agentArgs...)
	label := fmt.Sprintf("nodedns (autopath=%v, %s)", autopath, strings.Join(addrs, ","))
	p := &proc{Name: label, out: &dnstest.SyncBuffer{}, done: make(chan struct{})}
	p.Cmd = exec.Command(nodednsBin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", label, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("%s exited with %v", label, err)
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", label, p.Output())
		}
	})
	return p, adminAddr
}

// waitAgent waits until the agent is ready (informers synced) and, with
// autopath, knows pod A and, unless podB is nil, pod B.
func (e *apEnv) waitAgent(t *testing.T, agent *proc, adminAddr string, autopath bool, podB *netNS) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	dnstest.Eventually(t, 30*time.Second, "agent ready", func() error {
		if agent.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", agent.Name, agent.err, agent.Output())
		}
		resp, err := hc.Get("http://" + adminAddr + "/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/ready: %s", resp.Status)
		}
		return nil
	})
	if !autopath {
		return
	}
	// A walk answered from the cluster zone alone: it takes a CNAME only
	// once the agent maps the pod's address to its namespace.
	probes := []struct {
		ns       *netNS
		name, to string
	}{
		{e.podA, "db." + e.nsB + "." + e.nsA + ".svc." + apZone + ".", "db." + e.nsB + ".svc." + apZone + "."},
	}
	if podB != nil {
		probes = append(probes, struct {
			ns       *netNS
			name, to string
		}{podB, "web." + e.nsA + "." + e.nsB + ".svc." + apZone + ".", "web." + e.nsA + ".svc." + apZone + "."})
	}
	for _, c := range probes {
		dnstest.Eventually(t, 30*time.Second, "agent knows the pod in "+c.ns.Name, func() error {
			r := apDigQuery(t, c.ns, false, c.name, "A")
			if r.status != "NOERROR" || len(r.chain) == 0 || r.chain[0] != c.name+" CNAME "+c.to {
				return fmt.Errorf("%s: %s", c.name, r)
			}
			return nil
		})
	}
}

// apLookup is one lookup from pod A with what it must give. want* are the
// numbers of queries the agent receives with autopath on and off.
type apLookup struct {
	tool, name      string
	addrs           []string
	canon           string // "" for a name that does not resolve
	wantOn, wantOff int
	// The agent's own /stats with autopath on: shortcuts taken and
	// client queries saved (both zero with autopath off).
	shortcuts, saved uint64
}

// apStats is the part of the agent's /stats document this test reads.
type apStats struct {
	Total    uint64 `json:"total"`
	Autopath struct {
		Shortcuts uint64 `json:"shortcuts"`
		Steps     uint64 `json:"steps"`
		Saved     uint64 `json:"saved"`
	} `json:"autopath"`
}

func apReadStats(t *testing.T, adminAddr string) apStats {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + adminAddr + "/stats")
	if err != nil {
		t.Fatalf("/stats: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/stats: %s", resp.Status)
	}
	var st apStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/stats: %v", err)
	}
	return st
}

// apFigure is the measured cost of one external lookup in one mode.
type apFigure struct {
	mode         string
	queries      int // per lookup, on the wire to the agent
	upstreamCold int // upstream queries of the first lookup (cold cache)
	// Wall time of a getent process doing one lookup, and per lookup of
	// a getent process doing apBatch: all samples.
	single, batched []time.Duration
	// CPU time of the agent per lookup (all its threads, from schedstat).
	agentCPU time.Duration
}

func apMs(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }

func (f apFigure) String() string {
	return fmt.Sprintf("autopath=%-3s getent ahosts %s: %2d queries/lookup, %d upstream on a cold cache; "+
		"1 lookup/process: median %s (p10 %s, p90 %s, n=%d); %d lookups/process: median %s/lookup (p10 %s, p90 %s, n=%d); "+
		"agent CPU %s/lookup",
		f.mode, apExternal, f.queries, f.upstreamCold,
		apMs(apPct(f.single, 50)), apMs(apPct(f.single, 10)), apMs(apPct(f.single, 90)), len(f.single),
		apBatch, apMs(apPct(f.batched, 50)), apMs(apPct(f.batched, 10)), apMs(apPct(f.batched, 90)), len(f.batched),
		apMs(f.agentCPU))
}

func TestAutopath(t *testing.T) {
	e := newAutopathEnv(t)
	svc := func(s, ns string) string { return s + "." + ns + ".svc." + apZone }
	lookups := []apLookup{
		// The pod's own namespace: the first expansion is the answer.
		{"getent", "web", []string{e.webIP}, svc("web", e.nsA), 2, 2, 0, 0},
		// svc.otherns: the second expansion wins (AAAA is NODATA).
		{"getent", "db." + e.nsB, []string{e.dbIP}, svc("db", e.nsB), 2, 4, 2, 2},
		// External: four search domains, then the bare name.
		{"getent", apExternal, []string{apExternalV4, apExternalV6}, apExternal, 2, 10, 2, 8},
		// Nowhere: every step is NXDOMAIN, the client walks again.
		{"getent", apNowhere, nil, "", 10, 10, 0, 0},
		{"dig", "web", []string{e.webIP}, svc("web", e.nsA), 1, 1, 0, 0},
		{"dig", "db." + e.nsB, []string{e.dbIP}, svc("db", e.nsB), 1, 2, 1, 1},
		{"dig", apExternal, []string{apExternalV4}, apExternal, 1, 5, 1, 4},
		{"dig", apNowhere, nil, "", 5, 5, 0, 0},
	}
	figures := map[bool]*apFigure{true: {mode: "on"}, false: {mode: "off"}}
	counts := map[string][2]int{}
	for _, on := range []bool{true, false} {
		f := figures[on]
		t.Run("autopath="+f.mode, func(t *testing.T) {
			agent, adminAddr := e.startAgent(t, on, e.specA.nodeV4, e.specB.nodeV4)
			e.waitAgent(t, agent, adminAddr, on, e.podB)

			// The first external lookup of this agent is a cold cache:
			// what it costs upstream.
			before := e.up.count()
			cold := apGetent(t, e.podA, apExternal)
			coldUp := e.up.since(before)
			f.upstreamCold = len(coldUp)
			t.Logf("cold getent ahosts %s: %s; upstream asked %d: %q", apExternal, cold, len(coldUp), coldUp)

			for _, lk := range lookups {
				var r apResult
				s0 := apReadStats(t, adminAddr)
				if lk.tool == "getent" {
					r = apGetent(t, e.podA, lk.name)
				} else {
					r = apDigQuery(t, e.podA, true, lk.name, "A")
				}
				s1 := apReadStats(t, adminAddr)
				t.Logf("%s %s: %s; agent /stats: %d answers, %d shortcuts, %d steps, %d saved", lk.tool, lk.name, r,
					s1.Total-s0.Total, s1.Autopath.Shortcuts-s0.Autopath.Shortcuts,
					s1.Autopath.Steps-s0.Autopath.Steps, s1.Autopath.Saved-s0.Autopath.Saved)
				// The agent's own figures agree with the wire.
				if got := s1.Total - s0.Total; got != uint64(r.queries) {
					t.Errorf("%s %s: the agent's /stats counts %d answers, the wire %d queries", lk.tool, lk.name, got, r.queries)
				}
				wantSC, wantSaved := lk.shortcuts, lk.saved
				if !on {
					wantSC, wantSaved = 0, 0
				}
				if sc, sv := s1.Autopath.Shortcuts-s0.Autopath.Shortcuts, s1.Autopath.Saved-s0.Autopath.Saved; sc != wantSC || sv != wantSaved {
					t.Errorf("%s %s (autopath=%v): /stats shortcuts +%d saved +%d, want +%d and +%d", lk.tool, lk.name, on, sc, sv, wantSC, wantSaved)
				}
				c := counts[lk.tool+" "+lk.name]
				want := lk.wantOff
				if on {
					c[0], want = r.queries, lk.wantOn
				} else {
					c[1] = r.queries
				}
				counts[lk.tool+" "+lk.name] = c
				e.checkLookup(t, lk, r, on, want)
			}
			e.checkNamespaces(t, on)
			e.checkVanished(t)
		})
	}
	if t.Failed() {
		return
	}
	t.Run("figures", func(t *testing.T) { e.figures(t, figures) })

	for _, lk := range lookups {
		c := counts[lk.tool+" "+lk.name]
		t.Logf("SUMMARY %-7s %-28s queries to the agent: autopath on %2d, off %2d", lk.tool, lk.name, c[0], c[1])
	}
	for _, on := range []bool{true, false} {
		t.Logf("SUMMARY %s", figures[on])
	}
	// Cluster names never leave the node.
	for _, n := range e.up.since(0) {
		if strings.Contains(n, "."+apZone+". ") {
			t.Errorf("the upstream was asked a cluster name: %s", n)
		}
	}
}

// figures measures the wall time of getent ahosts for the external name
// with the shortcut on and off, the two interleaved so that both see the
// same machine load: one agent with autopath serves pod A, one without
// serves pod C (same namespace, its own link), both with a warm cache.
// A numeric address, which sends no query, gives the process's own cost.
func (e *apEnv) figures(t *testing.T, figs map[bool]*apFigure) {
	agentOn, adminOn := e.startAgent(t, true, e.specA.nodeV4)
	agentOff, adminOff := e.startAgent(t, false, e.specC.nodeV4)
	e.waitAgent(t, agentOn, adminOn, true, nil)
	e.waitAgent(t, agentOff, adminOff, false, nil)
	pods := map[bool]*netNS{true: e.podA, false: e.podC}
	agents := map[bool]*proc{true: agentOn, false: agentOff}
	wantQ := map[bool]int{true: 2, false: 10}
	var baseSingle, baseBatched, diff []time.Duration
	for _, on := range []bool{true, false} {
		apTime(t, pods[on], apExternal, 1, 3) // warm the caches
	}
	load0, _ := os.ReadFile("/proc/loadavg")
	cpu0 := map[bool]time.Duration{true: apCPU(t, agentOn), false: apCPU(t, agentOff)}
	for round := 0; round < apRounds; round++ {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		var per [2]time.Duration
		for k, on := range order {
			f := figs[on]
			d, n := apTime(t, pods[on], apExternal, 1, apSingleRuns)
			f.single = append(f.single, d...)
			if n != apSingleRuns*wantQ[on] {
				t.Errorf("autopath=%s: %d lookups sent %d queries, want %d each", f.mode, apSingleRuns, n, wantQ[on])
			}
			f.queries = n / apSingleRuns
			d, n = apTime(t, pods[on], apExternal, apBatch, 1)
			f.batched = append(f.batched, d[0]/apBatch)
			per[k] = d[0] / apBatch
			if n != apBatch*wantQ[on] {
				t.Errorf("autopath=%s: %d lookups sent %d queries, want %d each", f.mode, apBatch, n, wantQ[on])
			}
		}
		if order[0] {
			diff = append(diff, per[1]-per[0])
		} else {
			diff = append(diff, per[0]-per[1])
		}
		d, n := apTime(t, e.podA, apExternalV4, 1, apSingleRuns)
		baseSingle = append(baseSingle, d...)
		d2, n2 := apTime(t, e.podA, apExternalV4, apBatch, 1)
		baseBatched = append(baseBatched, d2[0]/apBatch)
		if n+n2 != 0 {
			t.Errorf("getent ahosts %s (numeric) sent %d queries", apExternalV4, n+n2)
		}
	}
	load1, _ := os.ReadFile("/proc/loadavg")
	// Every getent lookup the rounds made, warm-up runs included.
	lookups := apRounds * (1 + apSingleRuns + 2*apBatch)
	for _, on := range []bool{true, false} {
		figs[on].agentCPU = (apCPU(t, agents[on]) - cpu0[on]) / time.Duration(lookups)
		t.Logf("FIGURE %s", figs[on])
	}
	t.Logf("FIGURE load average before and after the rounds (2-core machine): %s / %s",
		strings.TrimSpace(string(load0)), strings.TrimSpace(string(load1)))
	t.Logf("FIGURE numeric getent ahosts %s (no query): 1 lookup/process: median %s (n=%d); %d lookups/process: median %s/lookup",
		apExternalV4, apMs(apPct(baseSingle, 50)), len(baseSingle), apBatch, apMs(apPct(baseBatched, 50)))
	t.Logf("FIGURE per lookup, off minus on, paired by round: median %s (p10 %s, p90 %s, n=%d)",
		apMs(apPct(diff, 50)), apMs(apPct(diff, 10)), apMs(apPct(diff, 90)), len(diff))
	if os.Getenv("NODEDNS_AUTOPATH_DNSPERF") != "" {
		e.perQuery(t, agentOn, agentOff)
	}
}

// perQuery (NODEDNS_AUTOPATH_DNSPERF=1) sends a steady 3000 q/s of one
// kind of query with dnsperf from a pod and reports the agent's CPU time
// per query and dnsperf's average latency: a walk answered through the
// memory of winners (slow path) against plain cache hits and cluster
// answers (fast path).
func (e *apEnv) perQuery(t *testing.T, on, off *proc) {
	t.Helper()
	needTool(t, "dnsperf")
	walk := apExternal + "." + e.nsA + ".svc." + apZone + "."
	for _, c := range []struct {
		label string
		ns    *netNS
		srv   string
		agent *proc
		name  string
	}{
		{"autopath on, the walk (remembered winner)", e.podA, e.specA.nodeV4, on, walk},
		{"autopath on, a cache hit", e.podA, e.specA.nodeV4, on, apExternal + "."},
		{"autopath off, a cache hit", e.podC, e.specC.nodeV4, off, apExternal + "."},
		{"autopath off, a cluster NXDOMAIN", e.podC, e.specC.nodeV4, off, walk},
	} {
		data := filepath.Join(t.TempDir(), "queries")
		if err := os.WriteFile(data, []byte(fmt.Sprintf("%s A\n%s AAAA\n", c.name, c.name)), 0o644); err != nil {
			t.Fatal(err)
		}
		cpu0 := apCPU(t, c.agent)
		out, code, err := apExec(c.ns, "dnsperf", "-s", c.srv, "-d", data, "-l", "4", "-c", "1", "-Q", "3000")
		cpu1 := apCPU(t, c.agent)
		if err != nil || code != 0 {
			t.Fatalf("dnsperf: exit %d, %v:\n%s", code, err, out)
		}
		done, lat := 0, ""
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); strings.Contains(l, "Queries completed:") && len(f) >= 3 {
				done, _ = strconv.Atoi(f[2])
			}
			if strings.Contains(l, "Average Latency") {
				lat = strings.Join(strings.Fields(l), " ")
			}
		}
		if done == 0 {
			t.Fatalf("dnsperf completed no query:\n%s", out)
		}
		t.Logf("FIGURE dnsperf, %s: %d queries, agent CPU %v/query; %s", c.label, done, (cpu1-cpu0)/time.Duration(done), lat)
	}
}

// checkLookup asserts one lookup's answer and query count.
func (e *apEnv) checkLookup(t *testing.T, lk apLookup, r apResult, on bool, want int) {
	t.Helper()
	if r.tcp != 0 {
		t.Errorf("%s %s: %d TCP connections to the agent", lk.tool, lk.name, r.tcp)
	}
	if r.queries != want {
		t.Errorf("%s %s (autopath=%v): the agent received %d queries, want %d", lk.tool, lk.name, on, r.queries, want)
	}
	if !slices.Equal(r.addrs, lk.addrs) {
		t.Errorf("%s %s: addresses %v, want %v", lk.tool, lk.name, r.addrs, lk.addrs)
	}
	if r.canon != lk.canon {
		t.Errorf("%s %s: canonical name %q, want %q", lk.tool, lk.name, r.canon, lk.canon)
	}
	switch {
	case lk.tool == "getent" && lk.addrs == nil && r.status != "exit 2":
		t.Errorf("getent ahosts %s: %s, want exit 2 (not found)", lk.name, r.status)
	case lk.tool == "getent" && lk.addrs != nil && r.status != "ok":
		t.Errorf("getent ahosts %s: %s", lk.name, r.status)
	case lk.tool == "dig" && lk.addrs == nil && r.status != "NXDOMAIN":
		t.Errorf("dig +search %s: %s, want NXDOMAIN", lk.name, r.status)
	case lk.tool == "dig" && lk.addrs != nil && r.status != "NOERROR":
		t.Errorf("dig +search %s: %s, want NOERROR", lk.name, r.status)
	}
	// With autopath, an answer found past the first expansion comes
	// behind a CNAME from the name asked.
	if lk.tool == "dig" && on && lk.addrs != nil && lk.name != "web" {
		first := lk.name + "." + e.nsA + ".svc." + apZone + ". CNAME " + lk.canon + "."
		if len(r.chain) == 0 || r.chain[0] != first {
			t.Errorf("dig +search %s: answer %q, want it to start with %q", lk.name, r.chain, first)
		}
	}
}

// checkNamespaces asserts that the expanded name pod A's walk answers is
// pod A's alone: pod B, in another namespace, asking exactly that name (A
// and AAAA, after pod A's answer is in every cache) gets NXDOMAIN, as it
// would from any DNS server. And A and AAAA from pod A agree.
func (e *apEnv) checkNamespaces(t *testing.T, on bool) {
	t.Helper()
	name := apExternal + "." + e.nsA + ".svc." + apZone + "."
	for _, qt := range []struct{ qtype, addr string }{{"A", apExternalV4}, {"AAAA", apExternalV6}} {
		a := apDigQuery(t, e.podA, false, name, qt.qtype)
		if on {
			want := []string{name + " CNAME " + apExternal + ".", apExternal + ". " + qt.qtype + " " + qt.addr}
			if a.status != "NOERROR" || !slices.Equal(a.chain, want) || a.queries != 1 {
				t.Errorf("pod A, %s %s: %s; want NOERROR %q in 1 query", name, qt.qtype, a, want)
			}
		} else if a.status != "NXDOMAIN" {
			t.Errorf("pod A without autopath, %s %s: %s; want NXDOMAIN", name, qt.qtype, a)
		}
		b := apDigQuery(t, e.podB, false, name, qt.qtype)
		if b.status != "NXDOMAIN" || len(b.chain) != 0 || b.queries != 1 {
			t.Errorf("pod B (namespace %s), %s %s: %s; want NXDOMAIN in 1 query", e.nsB, name, qt.qtype, b)
		}
	}
	// Pod B's own walk works and names pod B's namespace.
	if on {
		nameB := apExternal + "." + e.nsB + ".svc." + apZone + "."
		b := apDigQuery(t, e.podB, false, nameB, "A")
		if want := nameB + " CNAME " + apExternal + "."; b.status != "NOERROR" || len(b.chain) != 2 || b.chain[0] != want {
			t.Errorf("pod B, %s A: %s; want NOERROR starting with %q", nameB, b, want)
		}
	}
}

// checkVanished asserts that a name the walk answered before is walked
// again once its winner is gone: a Service that pod A found through
// `svc.otherns` is deleted, and within the walk's memory of winners
// (30 s) the same lookup is NXDOMAIN, as it is for a client walking its
// own list, and not an empty NOERROR taken from the remembered step.
func (e *apEnv) checkVanished(t *testing.T) {
	t.Helper()
	c := e.cp.Client.CoreV1().Services(e.nsB)
	name := fmt.Sprintf("gone%d", time.Now().UnixNano()%1e6)
	ip := apCreateService(t, e.cp.Client, e.nsB, name)
	fqdn := name + "." + e.nsB + ".svc." + apZone + "."
	dnstest.Eventually(t, 15*time.Second, "the agent knows "+fqdn, func() error {
		if r := apDigQuery(t, e.podA, false, fqdn, "A"); r.status != "NOERROR" || !slices.Equal(r.addrs, []string{ip}) {
			return fmt.Errorf("%s A: %s", fqdn, r)
		}
		return nil
	})
	short := name + "." + e.nsB
	if r := apDigQuery(t, e.podA, true, short, "A"); r.status != "NOERROR" || !slices.Equal(r.addrs, []string{ip}) {
		t.Errorf("dig +search %s before the delete: %s", short, r)
	}
	if r := apGetent(t, e.podA, short); r.status != "ok" || !slices.Equal(r.addrs, []string{ip}) {
		t.Errorf("getent ahosts %s before the delete: %s", short, r)
	}
	if err := c.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting service %s: %v", name, err)
	}
	dnstest.Eventually(t, 15*time.Second, "the agent forgets "+fqdn, func() error {
		if r := apDigQuery(t, e.podA, false, fqdn, "A"); r.status != "NXDOMAIN" {
			return fmt.Errorf("%s A: %s", fqdn, r)
		}
		return nil
	})
	if r := apDigQuery(t, e.podA, true, short, "A"); r.status != "NXDOMAIN" || len(r.chain) != 0 || r.queries != 5 {
		t.Errorf("dig +search %s after the delete: %s; want NXDOMAIN in 5 queries, as for any name that exists nowhere", short, r)
	}
	if r := apGetent(t, e.podA, short); r.status != "exit 2" || r.queries != 10 {
		t.Errorf("getent ahosts %s after the delete: %s; want exit 2 in 10 queries", short, r)
	}
}

// apTime runs `getent ahosts` runs times in one shell inside ns, each run
// looking up name keys times in one process (getent takes several keys),
// after one unmeasured run. It returns the wall time of each run,
// process start included, and the queries all the measured runs sent.
func apTime(t *testing.T, ns *netNS, name string, keys, runs int) ([]time.Duration, int) {
	t.Helper()
	const script = `keys=(); for j in $(seq 1 "$3"); do keys+=("$1"); done
getent ahosts "${keys[@]}" >/dev/null
iptables -w -Z OUTPUT
for i in $(seq 1 "$2"); do s=$EPOCHREALTIME; getent ahosts "${keys[@]}" >/dev/null; e=$EPOCHREALTIME; echo "$s $e"; done`
	out, code, err := apExec(ns, "bash", "-c", script, "bash", name, strconv.Itoa(runs), strconv.Itoa(keys))
	if err != nil || code != 0 {
		t.Fatalf("timing getent ahosts %s (x%d): exit %d, %v:\n%s", name, keys, code, err, out)
	}
	var d []time.Duration
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("timing line %q", l)
		}
		s, err1 := apMicros(f[0])
		e, err2 := apMicros(f[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("timing line %q: %v %v", l, err1, err2)
		}
		d = append(d, time.Duration(e-s)*time.Microsecond)
	}
	if len(d) != runs {
		t.Fatalf("timing: %d runs measured, want %d", len(d), runs)
	}
	q, _, err := apCounts(ns)
	if err != nil {
		t.Fatal(err)
	}
	return d, q
}

// apCPU is the CPU time p has used so far, all threads, from
// /proc/<pid>/task/*/schedstat (nanoseconds on the CPU, first field).
func apCPU(t *testing.T, p *proc) time.Duration {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.Cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("schedstat of %s: %v (%d tasks)", p.Name, err, len(tasks))
	}
	var sum time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that just ended
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", f, b, err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// apMicros parses bash's $EPOCHREALTIME ("seconds.micros") as microseconds.
func apMicros(s string) (int64, error) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 6 {
		return 0, fmt.Errorf("not seconds.micros: %q", s)
	}
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return 0, err
	}
	b, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	return a*1e6 + b, nil
}

// apPct is the p-th percentile (nearest rank) of d.
func apPct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
