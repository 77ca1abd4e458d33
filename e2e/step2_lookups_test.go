//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/e2e/framework"
)

// uniqSorted is the distinct non-empty strings of ss, sorted.
func uniqSorted(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// column is field i (0-based) of each line of text.
func column(text string, i int) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > i {
			out = append(out, f[i])
		}
	}
	return out
}

// ahosts: glibc's getaddrinfo (getent ahosts) in the client pod of ns
// returns exactly the addresses want.
func ahosts(t *testing.T, c *framework.Cluster, pod, ns, name string, want ...string) {
	t.Helper()
	got := uniqSorted(column(c.Exec(t, ns, pod, "getent", "ahosts", name), 0))
	if w := uniqSorted(want); !slices.Equal(got, w) {
		t.Fatalf("getent ahosts %s in pod %s/%s: got %v, want %v", name, ns, pod, got, w)
	}
	ok(t, "getent ahosts %s (%s) -> %v", name, ns, got)
}

// musl: the static musl client's getaddrinfo returns exactly want.
func musl(t *testing.T, c *framework.Cluster, ns, name string, want ...string) {
	t.Helper()
	got := uniqSorted(column(c.Exec(t, ns, "client", "musl-resolve", name), 1))
	if w := uniqSorted(want); !slices.Equal(got, w) {
		t.Fatalf("musl getaddrinfo %s in %s: got %v, want %v", name, ns, got, w)
	}
	ok(t, "musl getaddrinfo %s (%s) -> %v", name, ns, got)
}

// digs: dig +short +search in the client pod of ns prints exactly want
// (its lines sorted, joined by spaces), within 30 s: a StatefulSet's
// pods are Ready before the EndpointSlice controller has published the
// last one's address and the agent's informer has it (seen: db-1 missing
// from the SRV answer right after the StatefulSet became Ready).
func digs(t *testing.T, c *framework.Cluster, ns, want string, args ...string) {
	t.Helper()
	framework.WaitFor(t, fmt.Sprintf("dig %s in %s prints %q", strings.Join(args, " "), ns, want), 30*time.Second, 500*time.Millisecond, func() (bool, string) {
		out := c.Exec(t, ns, "client", append([]string{"dig", "+short", "+search"}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		slices.Sort(lines)
		got := strings.Join(lines, " ")
		return got == want, fmt.Sprintf("got %q", got)
	})
	ok(t, "dig %s (%s) -> %s", strings.Join(args, " "), ns, want)
}

// serviceIPs are a Service's ClusterIPs.
func serviceIPs(t *testing.T, c *framework.Cluster, ns, name string) []string {
	t.Helper()
	s, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Service %s/%s: %v", ns, name, err)
	}
	return s.Spec.ClusterIPs
}

// TestLookups (step 2): a Deployment behind a ClusterIP Service, a
// StatefulSet behind a headless Service and an ExternalName Service in two
// namespaces; glibc getent, dig and a static musl client in client pods
// resolve them, SRV, PTR and an external name; one external lookup costs
// the agent 2 queries (A and AAAA, autopath).
func TestLookups(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	ensureWorkloads(t, c)
	ok(t, "Deployments, StatefulSet and client pods Ready")

	resolv := c.Exec(t, nsA, "client", "cat", "/etc/resolv.conf")
	for _, line := range []string{"nameserver 169.254.20.10", "search " + nsA + ".svc.cluster.local svc.cluster.local cluster.local", "options ndots:5"} {
		if !slices.Contains(strings.Split(resolv, "\n"), line) {
			t.Fatalf("kubelet's resolv.conf in pod %s/client lacks the line %q:\n%s", nsA, line, resolv)
		}
	}
	ok(t, "kubelet wrote the client's resolv.conf: nameserver 169.254.20.10, the namespace's search list, ndots:5")

	webIPs := serviceIPs(t, c, nsA, "web")
	apiIPs := serviceIPs(t, c, nsB, "api")
	db0, err := c.Client.CoreV1().Pods(nsA).Get(context.Background(), "db-0", metav1.GetOptions{})
	if err != nil || len(db0.Status.PodIPs) == 0 {
		t.Fatalf("pod %s/db-0 and its IPs: %v %v", nsA, err, db0)
	}
	db0IP := db0.Status.PodIPs[0].IP
	var webV4 string
	for _, ip := range webIPs {
		if !strings.Contains(ip, ":") {
			webV4 = ip
			break
		}
	}
	if webV4 == "" {
		t.Fatalf("Service %s/web has no IPv4 ClusterIP: %v", nsA, webIPs)
	}

	ahosts(t, c, "client", nsA, "web", webIPs...)
	ahosts(t, c, "client", nsA, "api."+nsB, apiIPs...)
	ahosts(t, c, "client", nsB, "web."+nsA+".svc", webIPs...)
	ahosts(t, c, "client", nsA, "db-0.db."+nsA+".svc.cluster.local", db0IP)
	ahosts(t, c, "client", nsA, "ext."+nsB, extV4, extV6)
	ahosts(t, c, "client", nsA, "api."+extDomain, extV4, extV6)
	musl(t, c, nsA, "web", webIPs...)
	musl(t, c, nsA, "api."+extDomain, extV4, extV6)
	// Weight 50: CoreDNS counts one SRV record per ClusterIP and port
	// before removing duplicates, and web is dual-stack.
	digs(t, c, nsA, "0 50 80 web."+nsA+".svc.cluster.local.", "SRV", "_http._tcp.web."+nsA+".svc.cluster.local")
	digs(t, c, nsA, "0 50 5432 db-0.db."+nsA+".svc.cluster.local. 0 50 5432 db-1.db."+nsA+".svc.cluster.local.", "SRV", "_pg._tcp.db."+nsA+".svc.cluster.local")
	digs(t, c, nsA, "web."+nsA+".svc.cluster.local.", "-x", webV4)
	digs(t, c, nsA, extV4+" api."+extDomain+".", "ext."+nsB+".svc.cluster.local.")

	// One external lookup through glibc: A and AAAA of the first
	// search-path expansion, answered with the CNAME to the name itself
	// (autopath): two queries where a client walking the list itself
	// needs eight.
	pod := c.AgentPod(t).Name
	before := c.Stats(t, pod).Int("total")
	ahosts(t, c, "client", nsA, "fresh-1."+extDomain, extV4, extV6)
	after := c.Stats(t, pod).Int("total")
	if after-before != 2 {
		t.Fatalf("one external lookup (glibc) cost the agent %d queries, want 2 (autopath)", after-before)
	}
	ok(t, "one external lookup (glibc getaddrinfo) = 2 queries to the agent")
	before = after
	musl(t, c, nsA, "fresh-2."+extDomain, extV4, extV6)
	after = c.Stats(t, pod).Int("total")
	if after-before != 2 {
		t.Fatalf("one external lookup (musl) cost the agent %d queries, want 2 (autopath)", after-before)
	}
	ok(t, "one external lookup (musl getaddrinfo) = 2 queries to the agent")
}
