//go:build integration

package integration

// The Helm chart deploy/helm/nodedns against a real kube-apiserver (issue
// 16), as TestDeployManifest does for the plain manifest (which is the
// chart's default rendering): rendered by the pinned helm with every
// optional part on (ci/full-values.yaml), hooks included, and every object
// applied server-side with strict field validation, after the Prometheus
// Operator's CRDs are installed so that the PodMonitor, ServiceMonitor and
// PrometheusRule are judged by their real schemas. Pods of each workload's
// template go through admission (dry run). The uninstall hooks' RBAC is
// checked by running `nodedns uninstall` with the hooks' own service
// account token.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const chartDir = "../deploy/helm/nodedns"

// ssa applies objects to the API server the way `kubectl apply
// --server-side` does (strict field validation), and deletes what it
// applied when the test ends.
type ssa struct {
	t      *testing.T
	ctx    context.Context
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newSSA(t *testing.T, ctx context.Context, cp *ControlPlane) *ssa {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &ssa{t: t, ctx: ctx, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

func (s *ssa) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		s.mapper.Reset() // a CRD installed since the last discovery
		if m, err = s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, fmt.Errorf("%s: no such resource on the API server: %w", gvk, err)
		}
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s: namespaced, but no namespace given", o.GetKind(), o.GetName())
		}
		return s.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return s.dyn.Resource(m.Resource), nil
}

func (s *ssa) apply(o *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	r, err := s.resource(o)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return r.Patch(s.ctx, o.GetName(), types.ApplyPatchType, body, opts)
}

// applyAll refuses to touch objects that exist already, dry-runs every
// object, then applies them for real, deleting each at the end of the test.
func (s *ssa) applyAll(objs []*unstructured.Unstructured) {
	t := s.t
	t.Helper()
	for _, o := range objs {
		r, err := s.resource(o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(s.ctx, o.GetName(), metav1.GetOptions{}); err == nil {
			t.Fatalf("%s %s already exists on the API server; not touching it", o.GetKind(), o.GetName())
		} else if !apierrors.IsNotFound(err) {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, o := range objs {
		if _, err := s.apply(o, true); err != nil {
			t.Errorf("dry run: %s %s refused by the API server: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, o := range objs {
		got, err := s.apply(o, false)
		if err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		r, _ := s.resource(o)
		t.Cleanup(func() {
			bg := metav1.DeletePropagationBackground
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Delete(dctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
				return
			}
			for i := 0; i < 100; i++ {
				if _, err := r.Get(dctx, o.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Errorf("%s %s still present 10s after its deletion", o.GetKind(), o.GetName())
		})
		t.Logf("applied %s %s (uid %s)", got.GetKind(), got.GetName(), got.GetUID())
	}
	// Applying the same objects again changes nothing.
	for _, o := range objs {
		r, _ := s.resource(o)
		before, err := r.Get(s.ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading %s %s back: %v", o.GetKind(), o.GetName(), err)
		}
		after, err := s.apply(o, false)
		if err != nil {
			t.Errorf("re-applying %s %s: %v", o.GetKind(), o.GetName(), err)
		} else if d := appliedDiff(before, after); d != "" {
			t.Errorf("re-applying %s %s changed it: %s", o.GetKind(), o.GetName(), d)
		}
	}
}

// appliedDiff says how two reads of an object differ in what an apply
// owns: everything but status and the bookkeeping that moves with it. The
// API server's own controllers write status between the two reads (a CRD's
// Established and NamesAccepted conditions arrive asynchronously), which
// bumps the resourceVersion without anything applied having changed.
func appliedDiff(before, after *unstructured.Unstructured) string {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy().Object
		delete(c, "status")
		unstructured.RemoveNestedField(c, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(c, "metadata", "managedFields")
		return c
	}
	b, a := strip(before), strip(after)
	if reflect.DeepEqual(b, a) {
		return ""
	}
	bj, _ := json.Marshal(b)
	aj, _ := json.Marshal(a)
	return fmt.Sprintf("before %s, after %s", bj, aj)
}

// installCRDs installs the Prometheus Operator CRDs the chart uses, from
// $NODEDNS_PROMETHEUS_CRDS (scripts/prometheus-crds.sh), and waits until
// they are served.
func installCRDs(t *testing.T, s *ssa) {
	t.Helper()
	dir := os.Getenv("NODEDNS_PROMETHEUS_CRDS")
	need(t, dir != "", "$NODEDNS_PROMETHEUS_CRDS (scripts/prometheus-crds.sh)")
	var files []string
	for _, k := range []string{"podmonitors", "servicemonitors", "prometheusrules"} {
		files = append(files, filepath.Join(dir, "monitoring.coreos.com_"+k+".yaml"))
	}
	installCRDFiles(t, s, files)
}

// installCRDFiles applies the CRDs of files and waits until each is
// established.
func installCRDFiles(t *testing.T, s *ssa, files []string) {
	t.Helper()
	var crds []*unstructured.Unstructured
	for _, f := range files {
		crds = append(crds, readManifest(t, f)...)
	}
	s.applyAll(crds)
	for _, c := range crds {
		dnstest.Eventually(t, 30*time.Second, "CRD "+c.GetName()+" established", func() error {
			r, _ := s.resource(c)
			got, err := r.Get(s.ctx, c.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cd := range conds {
				m := cd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return errors.New("not established")
		})
	}
	s.mapper.Reset()
}

// renderChart runs the pinned helm on the chart with extra arguments.
func renderChart(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	helm := os.Getenv("NODEDNS_HELM")
	need(t, helm != "", "$NODEDNS_HELM (scripts/helm.sh)")
	for f, off := range map[string]string{"files/nodedns.json": "dashboard.enabled=false", "files/nodedns.rules.yaml": "prometheusRule.enabled=false"} {
		if _, err := os.Stat(filepath.Join(chartDir, f)); err != nil {
			t.Logf("the chart ships no %s yet: %s", f, off)
			args = append(args, "--set", off)
		}
	}
	cmd := exec.Command(helm, append([]string{"template", "nodedns", chartDir, "--namespace", "kube-system"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, errb.String())
	}
	f := filepath.Join(t.TempDir(), "rendering.yaml")
	if err := os.WriteFile(f, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return readManifest(t, f)
}

// TestDeployChart applies the chart with every option on.
func TestDeployChart(t *testing.T) {
	cp := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs := renderChart(t, "-f", filepath.Join(chartDir, "ci/full-values.yaml"))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for k, n := range map[string]int{"DaemonSet": 2, "Job": 2, "Service": 2, "PodMonitor": 1, "ServiceMonitor": 1, "ConfigMap": 1} {
		if kinds[k] < n {
			t.Errorf("rendering holds %d %s, want at least %d: %v", kinds[k], k, n, kinds)
		}
	}
	dnstest.Eventually(t, 30*time.Second, "namespace kube-system and PriorityClass system-node-critical", func() error {
		if _, err := cp.Client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
		_, err := cp.Client.SchedulingV1().PriorityClasses().Get(ctx, "system-node-critical", metav1.GetOptions{})
		return err
	})

	s := newSSA(t, ctx, cp)
	installCRDs(t, s)
	s.applyAll(objs)

	var cfg map[string]any
	t.Run("ConfigMap", func(t *testing.T) {
		cm, err := cp.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(cfg["local-ip"]); got != "[169.254.20.10 10.96.0.10]" {
			t.Errorf("local-ip %s", got)
		}
	})

	t.Run("workloads", func(t *testing.T) {
		ds, err := cp.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkDaemonSet(t, ds, cfg)
		// A pod of every workload's template through validation and
		// admission (dry run).
		templates := map[string]corev1.PodTemplateSpec{"agent": ds.Spec.Template}
		cds, err := cp.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "nodedns-cleanup", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		templates["cleanup"] = cds.Spec.Template
		for _, j := range []string{"nodedns-uninstall-stop-agents", "nodedns-uninstall-await-cleanup"} {
			job, err := cp.Client.BatchV1().Jobs("kube-system").Get(ctx, j, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			templates[j] = job.Spec.Template
		}
		for name, tmpl := range templates {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dry-run-" + name, Namespace: "kube-system", Labels: tmpl.Labels},
				Spec: *tmpl.Spec.DeepCopy()}
			pod.Spec.NodeName = "node-a"
			if _, err := cp.Client.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("a pod of the %s template is refused: %v", name, err)
			}
		}
	})

	t.Run("kube-dns-upstream", func(t *testing.T) {
		svc, err := cp.Client.CoreV1().Services("kube-system").Get(ctx, "kube-dns-upstream", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP == "" || svc.Spec.Selector["k8s-app"] != "kube-dns" {
			t.Errorf("kube-dns-upstream: clusterIP %q selector %v", svc.Spec.ClusterIP, svc.Spec.Selector)
		}
	})

	t.Run("monitoring objects", func(t *testing.T) {
		for _, o := range objs {
			if o.GroupVersionKind().Group != "monitoring.coreos.com" {
				continue
			}
			r, err := s.resource(o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
				continue
			}
			t.Logf("%s %s stored (%d bytes of spec)", got.GetKind(), got.GetName(), len(fmt.Sprint(got.Object["spec"])))
		}
	})

	t.Run("uninstall hooks RBAC", func(t *testing.T) {
		sa := "system:serviceaccount:kube-system:nodedns-uninstall"
		groups := []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
		can := func(verb, group, res, name string) bool {
			r, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: sa, Groups: groups,
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "kube-system", Verb: verb, Group: group, Resource: res, Name: name},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return r.Status.Allowed
		}
		dnstest.Eventually(t, 10*time.Second, sa+" may delete daemonsets/nodedns", func() error {
			if !can("delete", "apps", "daemonsets", "nodedns") {
				return errors.New("denied")
			}
			return nil
		})
		for _, c := range []struct {
			verb, group, res, name string
			want                   bool
		}{
			{"get", "apps", "daemonsets", "nodedns-cleanup", true}, {"list", "", "pods", "", true}, {"list", "", "nodes", "", true},
			{"delete", "apps", "daemonsets", "kube-proxy", false}, {"delete", "apps", "daemonsets", "nodedns-cleanup", false},
			{"create", "", "pods", "", false}, {"create", "apps", "daemonsets", "", false}, {"delete", "", "pods", "", false},
			{"get", "", "secrets", "", false},
		} {
			if got := can(c.verb, c.group, c.res, c.name); got != c.want {
				t.Errorf("%s may %s %s/%s %s: %v, want %v", sa, c.verb, c.group, c.res, c.name, got, c.want)
			}
		}

		// The real command with the hooks' own token: stop-agents deletes
		// the agents' DaemonSet (no pods run here); await-cleanup reads
		// what it needs and times out, as no node exists to run a pod.
		tr, err := cp.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "nodedns-uninstall",
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for nodedns-uninstall: %v", err)
		}
		kc := tokenKubeconfig(t, cp, tr.Status.Token)
		out, err := exec.Command(nodednsBin, "uninstall", "stop-agents", "--kubeconfig", kc, "--namespace", "kube-system",
			"--daemonset", "nodedns", "--selector", "app.kubernetes.io/name=nodedns,app.kubernetes.io/instance=nodedns", "--timeout", "30s").CombinedOutput()
		if err != nil {
			t.Fatalf("nodedns uninstall stop-agents: %v\n%s", err, out)
		}
		if _, err := cp.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "nodedns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the agents' DaemonSet is still there after stop-agents: %v\n%s", err, out)
		}
		out, err = exec.Command(nodednsBin, "uninstall", "await-cleanup", "--kubeconfig", kc, "--namespace", "kube-system",
			"--daemonset", "nodedns-cleanup", "--timeout", "3s").CombinedOutput()
		if err == nil || strings.Contains(string(out), "forbidden") || !strings.Contains(string(out), "--timeout 3s reached") {
			t.Errorf("nodedns uninstall await-cleanup: %v, want a timeout and no refusal:\n%s", err, out)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

// tokenKubeconfig writes a kubeconfig for the control plane with a bearer token.
func tokenKubeconfig(t *testing.T, cp *ControlPlane, token string) string {
	t.Helper()
	admin, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var kc map[string]any
	if err := yaml.Unmarshal(admin, &kc); err != nil {
		t.Fatal(err)
	}
	kc["users"] = []any{map[string]any{"name": "sa", "user": map[string]any{"token": token}}}
	ctxs, _ := kc["contexts"].([]any)
	for _, c := range ctxs {
		if m, ok := c.(map[string]any)["context"].(map[string]any); ok {
			m["user"] = "sa"
		}
	}
	b, err := yaml.Marshal(kc)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
