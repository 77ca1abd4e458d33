//go:build integration

package integration

// The ClusterRole of deploy/daemonset.yaml against what each `--pods` mode
// of the index needs, on the real API server with its RBAC authorizer: a
// ServiceAccount bound to exactly that role (and to the role without its
// pods rule) runs the index in each mode, with this node's name set as the
// DaemonSet sets it.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/k8s"
)

// refusedPods counts the answers 403 Forbidden to the index's requests
// for pods, as its client receives them.
type refusedPods struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (r refusedPods) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusForbidden && strings.HasSuffix(req.URL.Path, "/pods") {
		r.n.Add(1)
	}
	return resp, err
}

// manifestRole returns the rules of the manifest's ClusterRole.
func manifestRole(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	for _, o := range readManifest(t, manifestPath) {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		var cr rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cr); err != nil {
			t.Fatal(err)
		}
		return cr.Rules
	}
	t.Fatalf("%s has no ClusterRole", manifestPath)
	return nil
}

// saKubeconfig makes a ServiceAccount bound to a ClusterRole of rules and
// returns a kubeconfig with a token of it. Everything is removed at the end.
func saKubeconfig(t *testing.T, cp *ControlPlane, ns, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	c := cp.Client
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctxBG, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctxBG, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctxBG, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctxBG, name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(ctxBG, name, metav1.DeleteOptions{})
	})
	exp := int64(3600)
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctxBG, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", name, err)
	}
	kc := filepath.Join(t.TempDir(), name+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %s, certificate-authority: %s}
users:
- name: sa
  user: {token: %s}
contexts:
- name: test
  context: {cluster: test, user: sa}
current-context: test
`, cp.URL, filepath.Join(cp.Dir, "certs", "apiserver.crt"), tok.Status.Token)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestRBACPodModes runs the index as the manifest's ServiceAccount would,
// in each pod mode: with the manifest's ClusterRole every mode syncs and
// answers (this node's pods for the search-path walk, every pod for
// verified records); with the role less its pods rule, insecure and
// disabled still sync and answer (the walk is off, said once), and
// verified does not sync.
func TestRBACPodModes(t *testing.T) {
	cp := controlPlane(t)
	c := cp.Client
	ns := clusterNS(t, c, "rbac")
	createSvc(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("http", 80)}}})
	p, err := c.CoreV1().Pods(ns).Create(ctxBG, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, "10.244.77.7", []corev1.PodIP{{IP: "10.244.77.7"}}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctxBG, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	full := manifestRole(t)
	var noPods []rbacv1.PolicyRule
	for _, r := range full {
		if r.Resources[0] != "pods" {
			noPods = append(noPods, r)
		}
	}
	if len(noPods) == len(full) {
		t.Fatalf("the manifest's ClusterRole has no rule of its own for pods: %+v", full)
	}
	suffix := strings.TrimPrefix(ns, "rbac-")
	roles := map[string]string{
		"manifest": saKubeconfig(t, cp, ns, "nodedns-rbac-"+suffix, full),
		"no-pods":  saKubeconfig(t, cp, ns, "nodedns-nopods-"+suffix, noPods),
	}
	podName := "10-244-77-7." + ns + ".pod.cluster.local."
	svcName := "web." + ns + ".svc.cluster.local."

	for _, role := range []string{"manifest", "no-pods"} {
		for _, mode := range []k8s.PodMode{k8s.PodsDisabled, k8s.PodsInsecure, k8s.PodsVerified} {
			t.Run(role+"/"+string(mode), func(t *testing.T) {
				rc, err := k8s.RESTConfig(roles[role])
				if err != nil {
					t.Fatal(err)
				}
				var refused atomic.Int64
				rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return refusedPods{rt: rt, n: &refused} })
				client, err := kubernetes.NewForConfig(rc)
				if err != nil {
					t.Fatal(err)
				}
				var logs dnstest.SyncBuffer
				ix, err := k8s.New(client, k8s.Config{Zone: "cluster.local", TTL: 5, Pods: mode, NodeName: "node-a",
					Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(ctxBG)
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = ix.Run(ctx)
				}()
				defer func() {
					cancel()
					<-done
					if t.Failed() {
						t.Logf("index log:\n%s", logs.String())
					}
				}()
				if role == "no-pods" && mode == k8s.PodsVerified {
					// The refused list is logged once it is known; a look
					// of the sync waiter made after that, with every other
					// informer synced, has weighed it: only then does "not
					// synced" say that the missing grant keeps the zone
					// from syncing.
					dnstest.Eventually(t, 30*time.Second, "the error naming the missing grant", func() error {
						if !strings.Contains(logs.String(), "pods verified needs list and watch on pods") {
							return fmt.Errorf("not logged")
						}
						return nil
					})
					p0 := ix.Stats().SyncPasses
					dnstest.Eventually(t, 30*time.Second, "a sync look with only the pods pending", func() error {
						if st := ix.Stats(); !st.Synced && (st.SyncPasses < p0+2 || st.SyncPending != 1) {
							return fmt.Errorf("%d looks since the error, %d informers pending", st.SyncPasses-p0, st.SyncPending)
						}
						return nil
					})
					if ix.Synced() {
						t.Fatal("verified mode synced without leave to list pods")
					}
					return
				}
				dnstest.Eventually(t, 30*time.Second, "index synced", func() error {
					if !ix.Synced() {
						return fmt.Errorf("not synced")
					}
					return nil
				})
				if r, _ := ix.Lookup(svcName, dns.TypeA); r.Msg.Rcode != dns.RcodeSuccess || len(r.Msg.Answer) != 1 {
					t.Errorf("%s: %s", svcName, formatResult(r))
				}
				ip := netip.MustParseAddr("10.244.77.7")
				switch role {
				case "manifest":
					dnstest.Eventually(t, 10*time.Second, "this node's pod known", func() error {
						if got, _ := ix.PodNamespace(ip); got != ns {
							return fmt.Errorf("PodNamespace = %q", got)
						}
						return nil
					})
				case "no-pods":
					// The refusal is known (and may sync the zone) a
					// moment before it is logged; once logged, two more
					// refused lists of pods (the client's count) show
					// it is said once, not per retry, and that the pods
					// stay unknown because they cannot be listed.
					dnstest.Eventually(t, 30*time.Second, "the refused pods list logged", func() error {
						if !strings.Contains(logs.String(), "listing this node's pods is forbidden") {
							return fmt.Errorf("not logged")
						}
						return nil
					})
					r0 := refused.Load()
					dnstest.Eventually(t, 60*time.Second, "two more refused pods lists", func() error {
						if n := refused.Load() - r0; n < 2 {
							return fmt.Errorf("%d refused since the log line", n)
						}
						return nil
					})
					if got, ok := ix.PodNamespace(ip); ok {
						t.Errorf("PodNamespace = %q without leave to list pods", got)
					}
					if n := strings.Count(logs.String(), "listing this node's pods is forbidden"); n != 1 {
						t.Errorf("the forbidden list said %d times, want once", n)
					}
				}
				r, _ := ix.Lookup(podName, dns.TypeA)
				wantPod := dns.RcodeSuccess
				if mode == k8s.PodsDisabled {
					wantPod = dns.RcodeNameError
				}
				if r.Msg.Rcode != wantPod {
					t.Errorf("%s in %s mode: %s", podName, mode, formatResult(r))
				}
			})
		}
	}
}
