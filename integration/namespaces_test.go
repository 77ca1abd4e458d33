//go:build integration

package integration

// Per-namespace figures and Extended DNS Errors for real, as an operator
// and dig see them, not as the unit tests' fakes do: pods
// in three namespaces on this node (network namespaces registered as Pods
// in the API server, as TestAutopath's), each sending a known mix of
// queries with dig, and a client on the node itself. The agent counts at
// most two namespaces apart (--metrics-namespaces 2): the first two to
// query get their own series, exact from their first query; the third
// counts under "other", the node's own queries under "_nonpod". Then the
// Extended DNS Errors, as dig prints them, for each case the agent decides
// (the table of docs/behaviour.md), from a pod and from a second agent
// whose API server is unreachable (Not Ready) and whose in-flight bound
// is 1 (Other Error).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const nsNodeCIDR = "169.254.126." // the pods' links: 169.254.126.0/28

// nsUpstream is the scripted upstream of the namespace test.
type nsUpstream struct {
	flakyDown atomic.Bool // flaky.example.net stops answering
}

func (u *nsUpstream) handle(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 300}
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
		Ns: "ns.invalid.", Mbox: "hostmaster.invalid.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 300}
	switch {
	case strings.HasPrefix(name, "hang"):
		return // never answers: every attempt times out
	case name == "flaky.example.net." && u.flakyDown.Load():
		return
	case name == "flaky.example.net." && q.Qtype == dns.TypeA:
		hdr.Ttl = 1
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: net.ParseIP("192.0.2.91")}}
	case strings.HasPrefix(name, "broken"):
		m.Rcode = dns.RcodeServerFailure
	case name == "api.example.com." && q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: net.ParseIP("192.0.2.90")}}
	case name == "api.example.com.":
		m.Ns = []dns.RR{soa}
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	}
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	_ = w.WriteMsg(m)
}

// nsDig runs dig with args in ns (nil: the node itself) and returns its
// output; every reply's status and EDE codes are read by nsStatuses and
// nsEDE.
func nsDig(t *testing.T, ns *netNS, args ...string) string {
	t.Helper()
	out, err := nsDigErr(ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nsDigErr is nsDig returning dig's failure (no reply, say) as an error.
func nsDigErr(ns *netNS, args ...string) (string, error) {
	args = append([]string{"+tries=1", "+noall", "+comments", "+answer"}, args...)
	var out string
	var err error
	if ns == nil {
		var b []byte
		b, err = exec.Command("dig", args...).CombinedOutput()
		out = string(b)
	} else {
		var code int
		out, code, err = apExec(ns, "dig", args...)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit status %d", code)
		}
	}
	if err != nil {
		return out, fmt.Errorf("dig %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

var (
	digStatus = regexp.MustCompile(`status: ([A-Z]+),`)
	digEDE    = regexp.MustCompile(`(?m)^; EDE: ([0-9]+)`)
)

// nsStatuses counts the replies dig printed by status.
func nsStatuses(out string) map[string]int {
	m := map[string]int{}
	for _, s := range digStatus.FindAllStringSubmatch(out, -1) {
		m[s[1]]++
	}
	return m
}

// nsEDE lists the EDE codes dig printed.
func nsEDE(out string) string {
	var codes []string
	for _, s := range digEDE.FindAllStringSubmatch(out, -1) {
		codes = append(codes, s[1])
	}
	return strings.Join(codes, ",")
}

// times repeats a dig query's arguments n times (dig takes several
// queries in one run).
func times(n int, q ...string) []string {
	var out []string
	for range n {
		out = append(out, q...)
	}
	return out
}

func TestNamespaceFigures(t *testing.T) {
	needTool(t, "dig")
	e := &apEnv{cp: controlPlane(t), node: fmt.Sprintf("nd-ns-node-%d", os.Getpid())}
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), apEnvSeq.Add(1))
	nsA, nsB, nsC := "shop-"+suffix, "data-"+suffix, "tools-"+suffix
	c := e.cp.Client
	for _, n := range []string{nsA, nsB, nsC} {
		apCreateNamespace(t, c, n)
	}
	u := &nsUpstream{}
	srv, err := dnstest.Listen("127.0.0.1:0", u.handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	e.up = &apUpstream{srv: srv}

	// Three pods: a Deployment's in shop, a StatefulSet's in data, a bare
	// pod in tools.
	specs := []*apPodSpec{
		{label: "na", nodeV4: nsNodeCIDR + "1", podV4: nsNodeCIDR + "2", podV6: "fd00:126:a::2", namespace: nsA, pod: "web-5d9f8c7b6-x2k4p"},
		{label: "nb", nodeV4: nsNodeCIDR + "5", podV4: nsNodeCIDR + "6", podV6: "fd00:126:b::2", namespace: nsB, pod: "db-0"},
		{label: "nc", nodeV4: nsNodeCIDR + "9", podV4: nsNodeCIDR + "10", podV6: "fd00:126:c::2", namespace: nsC, pod: "debug"},
	}
	if out, err := exec.Command("ip", "-o", "addr", "show").CombinedOutput(); err != nil || strings.Contains(string(out), " "+nsNodeCIDR) {
		t.Fatalf("an address in %s0/24 is configured already (or ip failed: %v):\n%s", nsNodeCIDR, err, out)
	}
	pods := make([]*netNS, len(specs))
	for i, s := range specs {
		pods[i] = e.newPod(t, s)
	}
	yes := true
	owners := []struct {
		kind, name string
		labels     map[string]string
	}{{"ReplicaSet", "web-5d9f8c7b6", map[string]string{"pod-template-hash": "5d9f8c7b6"}}, {"StatefulSet", "db", nil}}
	for i, o := range owners {
		p, err := c.CoreV1().Pods(specs[i].namespace).Get(context.Background(), specs[i].pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: o.kind, Name: o.name, UID: "0d0c0b0a-0000-4000-8000-000000000001", Controller: &yes}}
		p.Labels = o.labels
		if _, err := c.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the owner of pod %s: %v", p.Name, err)
		}
	}

	closed, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.LocalAddr().String()
	closed.Close() // nothing answers there: the exchange is refused
	e.agentArgs = []string{"--metrics-namespaces", "2", "--stub-domain", "refused.test=" + refusedAddr}
	agent, admin := e.startAgent(t, true, specs[0].nodeV4, specs[1].nodeV4, specs[2].nodeV4)
	e.waitAgent(t, agent, admin, false, nil)
	// No DNS probe (it would be counted): the agent knows the pods when
	// its index holds them.
	dnstest.Eventually(t, 30*time.Second, "the agent holds the 3 pods", func() error {
		var st struct {
			Informers struct {
				Objects map[string]int `json:"objects"`
			} `json:"informers"`
		}
		if err := nsGetJSON(admin, "/stats", &st); err != nil {
			return err
		}
		if n := st.Informers.Objects["pods"]; n != 3 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})

	// The mixes, one namespace after the other: shop and data take the
	// two places, tools counts under other, the node under _nonpod.
	expand := func(ns string) string { return "api.example.com." + ns + ".svc.cluster.local." }
	mixes := []struct {
		who    *netNS
		args   []string
		counts map[string]int // what dig must print
	}{
		{pods[0], append(append(append(times(10, "api.example.com.", "A"), times(4, "nowhere.example.net.", "A")...),
			times(2, "broken.example.net.", "A")...), times(3, expand(nsA), "A")...),
			map[string]int{"NOERROR": 13, "NXDOMAIN": 4, "SERVFAIL": 2}},
		{pods[1], append(times(7, "api.example.com.", "A"), "nowhere.example.net.", "A"), map[string]int{"NOERROR": 7, "NXDOMAIN": 1}},
		{pods[2], append(times(5, "api.example.com.", "A"), times(2, "nowhere.example.net.", "A")...), map[string]int{"NOERROR": 5, "NXDOMAIN": 2}},
		{nil, append([]string{"@" + specs[0].nodeV4}, times(6, "api.example.com.", "A")...), map[string]int{"NOERROR": 6}},
	}
	for i, m := range mixes {
		out := nsDig(t, m.who, m.args...)
		if got := nsStatuses(out); fmt.Sprint(got) != fmt.Sprint(m.counts) {
			t.Fatalf("mix %d: dig printed %v, want %v:\n%s", i, got, m.counts, out)
		}
	}

	metrics := nsScrape(t, admin)
	for _, want := range []string{
		`nodedns_namespace_queries_total{namespace="` + nsA + `"} 19`,
		`nodedns_namespace_responses_total{namespace="` + nsA + `",rcode="NOERROR"} 13`,
		`nodedns_namespace_responses_total{namespace="` + nsA + `",rcode="NXDOMAIN"} 4`,
		`nodedns_namespace_responses_total{namespace="` + nsA + `",rcode="SERVFAIL"} 2`,
		`nodedns_namespace_search_expansions_total{namespace="` + nsA + `"} 3`,
		`nodedns_namespace_search_queries_saved_total{namespace="` + nsA + `"} 12`,
		`nodedns_namespace_queries_total{namespace="` + nsB + `"} 8`,
		`nodedns_namespace_responses_total{namespace="` + nsB + `",rcode="NOERROR"} 7`,
		`nodedns_namespace_responses_total{namespace="` + nsB + `",rcode="NXDOMAIN"} 1`,
		`nodedns_namespace_cache_hits_total{namespace="` + nsB + `"} 8`,
		`nodedns_namespace_queries_total{namespace="other"} 7`,
		`nodedns_namespace_responses_total{namespace="other",rcode="NOERROR"} 5`,
		`nodedns_namespace_responses_total{namespace="other",rcode="NXDOMAIN"} 2`,
		`nodedns_namespace_queries_total{namespace="_nonpod"} 6`,
		`nodedns_namespace_tracked 3`,
		`nodedns_namespace_limit 2`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, nsC) {
		t.Errorf("/metrics names %s, the third namespace, with 2 counted apart", nsC)
	}
	if n := strings.Count(metrics, "nodedns_namespace_queries_total{"); n != 4 {
		t.Errorf("%d namespace series, want 4 (2 namespaces, other, _nonpod)", n)
	}

	// The same in /stats (the key namespaces) and nodedns stats.
	var doc struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Queries   uint64 `json:"queries"`
		} `json:"namespaces"`
	}
	if err := nsGetJSON(admin, "/stats", &doc); err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, n := range doc.Namespaces {
		got += fmt.Sprintf("%s=%d ", n.Namespace, n.Queries)
	}
	if want := fmt.Sprintf("%s=19 %s=8 other=7 _nonpod=6 ", nsA, nsB); got != want {
		t.Errorf("/stats namespaces: %s, want %s", got, want)
	}
	stats := func(args ...string) string {
		out, err := exec.Command(nodednsBin, append([]string{"stats", "--admin", admin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nodedns stats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("nodedns stats %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"Namespaces    3 seen, 2 counted apart (limit 2)", nsA, nsB, "other", "_nonpod"}},
		{[]string{"--namespace", nsA}, []string{"Namespace     " + nsA, "web-5d9f8c7b6-x2k4p", "Deployment/web",
			"NXDOMAIN  nowhere.example.net.", "SERVFAIL  broken.example.net."}},
		{[]string{"--namespace", nsB}, []string{"db-0", "StatefulSet/db"}},
		{[]string{"--search-path"}, []string{nsA, "Deployment web", "api.example.com", "api.example.com.", "ndots:2"}},
	} {
		out := stats(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("nodedns stats %s lacks %q", strings.Join(c.args, " "), w)
			}
		}
	}

	// Extended DNS Errors as dig prints them, from the shop pod (dig sends
	// EDNS) and, without EDNS, none.
	u.flakyDown.Store(false)
	nsDig(t, pods[0], "broken2.example.net.", "A")
	nsDig(t, pods[0], "flaky.example.net.", "A")
	u.flakyDown.Store(true)
	time.Sleep(2500 * time.Millisecond) // flaky's TTL of 1 s is past
	for _, c := range []struct {
		name   string
		args   []string
		status string
		ede    string
	}{
		{"search-path CNAME", []string{"+search", "api.example.com", "A"}, "NOERROR", "29"},
		{"RFC 8482 ANY", []string{"example.com.", "ANY"}, "NOERROR", "29"},
		{"zone transfer", []string{"cluster.local.", "AXFR"}, "REFUSED", "18"},
		{"class CH", []string{"version.bind.", "TXT", "CH"}, "REFUSED", "21"},
		{"cached SERVFAIL", []string{"broken2.example.net.", "A"}, "SERVFAIL", "13"},
		{"stale answer", []string{"+time=8", "flaky.example.net.", "A"}, "NOERROR", "3"},
		{"every upstream timed out", []string{"+time=10", "hang.example.net.", "A"}, "SERVFAIL", "22"},
		{"upstream refused", []string{"+time=10", "x.refused.test.", "A"}, "SERVFAIL", "23"},
		{"no EDNS: no EDE", []string{"+noedns", "+time=10", "hang2.example.net.", "A"}, "SERVFAIL", ""},
	} {
		out := nsDig(t, pods[0], c.args...)
		t.Logf("%s: dig %s\n%s", c.name, strings.Join(c.args, " "), out)
		st := nsStatuses(out)
		if st[c.status] != 1 || len(st) != 1 || nsEDE(out) != c.ede {
			t.Errorf("%s: dig printed %v, EDE %q; want %s, EDE %q:\n%s", c.name, st, nsEDE(out), c.status, c.ede, out)
		}
	}

	// A second agent: its API server does not answer (Not Ready for a
	// cluster name), and its in-flight bound is 1 (Other Error).
	nsNotReadyAndBound(t, e.up.srv.Addr)
}

// nsNotReadyAndBound runs an agent whose API server does not answer and
// whose in-flight bound is one query, on the node: a cluster name gets
// SERVFAIL with EDE 14, and a query while an exchange holds the one slot
// gets SERVFAIL with EDE 0.
func nsNotReadyAndBound(t *testing.T, upstream string) {
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, ports[2])
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{"serve", "--listen", listen, "--kubeconfig", kc, "--upstream", upstream, "--loop-check=false",
		"--admin", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--lameduck", "0s", "--cluster-sync-wait", "0s", "--max-inflight", "1"}
	p := &proc{Name: "nodedns (no API server, max-inflight 1)", out: &dnstest.SyncBuffer{}, done: make(chan struct{})}
	p.Cmd = exec.Command(nodednsBin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.Name, p.Output())
		}
	})
	at := []string{"@127.0.0.1", "-p", strconv.Itoa(ports[0])}
	dnstest.Eventually(t, 20*time.Second, "the second agent answers", func() error {
		if p.Exited() {
			return fmt.Errorf("exited: %v\n%s", p.err, p.Output())
		}
		out, err := nsDigErr(nil, append(at, "+time=1", "example.com.", "ANY")...)
		if err != nil {
			return err
		}
		if st := nsStatuses(out); st["NOERROR"] != 1 {
			return fmt.Errorf("ANY: %v", st)
		}
		return nil
	})
	out := nsDig(t, nil, append(at, "web.default.svc.cluster.local.", "A")...)
	t.Logf("not synced: dig web.default.svc.cluster.local A\n%s", out)
	if st := nsStatuses(out); st["SERVFAIL"] != 1 || nsEDE(out) != "14" {
		t.Errorf("cluster name before the sync: %v, EDE %q; want SERVFAIL, EDE 14:\n%s", st, nsEDE(out), out)
	}
	// An exchange that never ends holds the only slot (the agent gives up
	// on it after its attempts, about 4 s: the holder asks again, a new
	// name each time, until the check is done); a query that must wait
	// while the slot is held, as /stats says it is, is refused at once.
	admin := fmt.Sprintf("127.0.0.1:%d", ports[1])
	stop := make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		for i := 0; i < 15; i++ {
			select {
			case <-stop:
				holder <- nil
				return
			default:
			}
			out, err := exec.Command("dig", append(at, "+tries=1", "+time=10", fmt.Sprintf("hang-hold%d.example.net.", i), "A")...).CombinedOutput()
			if err != nil {
				holder <- fmt.Errorf("dig hang-hold%d.example.net: %w: %s", i, err, out)
				return
			}
		}
		holder <- nil
	}()
	defer func() {
		close(stop)
		if err := <-holder; err != nil {
			t.Error(err)
		}
	}()
	n := 0
	dnstest.Eventually(t, 30*time.Second, "the in-flight bound refuses while the slot is held", func() error {
		var st struct {
			Server struct {
				InFlight int `json:"in_flight"`
			} `json:"server"`
		}
		if err := nsGetJSON(admin, "/stats", &st); err != nil {
			return err
		}
		if st.Server.InFlight != 1 {
			return fmt.Errorf("not yet: %d queries in flight, want the hanging one", st.Server.InFlight)
		}
		n++ // a name never asked: it must wait for an exchange
		out, err := nsDigErr(nil, append(at, "+time=3", fmt.Sprintf("probe%d.example.org.", n), "A")...)
		if err != nil {
			return err
		}
		if st := nsStatuses(out); st["SERVFAIL"] != 1 || nsEDE(out) != "0" {
			return fmt.Errorf("with the one slot held: %v, EDE %q; want SERVFAIL, EDE 0:\n%s", st, nsEDE(out), out)
		}
		t.Logf("in-flight bound: dig probe%d.example.org A\n%s", n, out)
		return nil
	})
}

func nsGetJSON(admin, path string, v any) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func nsScrape(t *testing.T, admin string) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
