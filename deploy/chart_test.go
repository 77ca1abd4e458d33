// Package deploy holds no code: its tests check the install artifacts of
// this directory against each other. The Helm chart (helm/nodedns) is the
// source; daemonset.yaml is its default rendering (scripts/render-manifest.sh)
// and the chart ships copies of the dashboard and alert rules kept here.
// The tests that render need helm (scripts/helm.sh builds the pinned
// version; scripts/test.sh passes it as $NODEDNS_HELM).
package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const chart = "helm/nodedns"

// chartCopies maps each file the chart ships to its source in deploy/.
var chartCopies = map[string]string{
	"helm/nodedns/files/nodedns.json":       "grafana/nodedns.json",
	"helm/nodedns/files/nodedns.rules.yaml": "prometheus/nodedns.rules.yaml",
}

// missingFiles turns off the chart's optional objects whose file the chart
// does not ship (yet): the dashboard and the rules come from deploy/grafana
// and deploy/prometheus.
func missingFiles() []string {
	var out []string
	for f, value := range map[string]string{"helm/nodedns/files/nodedns.json": "dashboard.enabled=false", "helm/nodedns/files/nodedns.rules.yaml": "prometheusRule.enabled=false"} {
		if _, err := os.Stat(f); err != nil {
			out = append(out, "--set", value)
		}
	}
	return out
}

// helmBin returns the helm binary: $NODEDNS_HELM, else a cached build of
// scripts/helm.sh. Under CI a missing helm fails the test.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("NODEDNS_HELM"); h != "" {
		return h
	}
	cache := os.Getenv("NODEDNS_CACHE")
	if cache == "" {
		cache = "/var/cache/nodedns"
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "helm-*", "helm")); len(m) > 0 {
		return m[len(m)-1]
	}
	// Missing, the test fails (never skips): a run without helm tested no
	// chart. scripts/test.sh builds it (scripts/helm.sh).
	t.Fatal("prerequisite missing: helm ($NODEDNS_HELM, or a helm-*/helm in $NODEDNS_CACHE: run scripts/helm.sh)")
	return ""
}

// render runs helm template on the chart (release nodedns in kube-system
// unless args say otherwise, hooks included) and returns the output.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append(append([]string{"template", "nodedns", chart, "--namespace", "kube-system"}, args...), missingFiles()...)
	cmd := exec.Command(helmBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm template %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// objects decodes a multi-document rendering.
func objects(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("rendering, document %d: %v", len(out)+1, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// find returns the one object of kind and name, converted to T.
func find[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			v := new(T)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, v, true); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return v
		}
	}
	t.Fatalf("no %s %s in the rendering", kind, name)
	return nil
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// agentConfig returns the agent's config file from the rendering's
// ConfigMap, decoded.
func agentConfig(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "nodedns")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	return cfg
}

// TestChartCopies: the dashboard and rules the chart ships are byte for
// byte the files under deploy/ (scripts/render-manifest.sh copies them),
// and the chart ships no copy of a file that does not exist here.
func TestChartCopies(t *testing.T) {
	for dst, src := range chartCopies {
		want, serr := os.ReadFile(src)
		got, derr := os.ReadFile(dst)
		switch {
		case errors.Is(serr, os.ErrNotExist) && errors.Is(derr, os.ErrNotExist):
			t.Logf("%s does not exist (yet): the chart ships no copy", src)
		case serr != nil:
			t.Errorf("the chart ships %s, but its source: %v", dst, serr)
		case derr != nil:
			t.Errorf("%s exists but the chart has no copy (%v): run scripts/render-manifest.sh", src, derr)
		case !bytes.Equal(got, want):
			t.Errorf("%s differs from %s: run scripts/render-manifest.sh", dst, src)
		}
	}
}

// TestManifestIsChartDefault: deploy/daemonset.yaml is exactly what
// scripts/render-manifest.sh makes of the chart.
func TestManifestIsChartDefault(t *testing.T) {
	out := filepath.Join(t.TempDir(), "daemonset.yaml")
	cmd := exec.Command("../scripts/render-manifest.sh", "-o", out)
	cmd.Env = append(os.Environ(), "HELM="+helmBin(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render-manifest.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		diff, _ := exec.Command("diff", "-u", "daemonset.yaml", out).CombinedOutput()
		t.Errorf("deploy/daemonset.yaml is not the chart's default rendering; run scripts/render-manifest.sh:\n%s", diff)
	}
	// The plain manifest has no hooks: applied with kubectl, they would run
	// at once (stopping every agent).
	if strings.Contains(string(want), "helm.sh/hook") {
		t.Error("deploy/daemonset.yaml holds Helm hooks")
	}
}

// TestChartLint: helm lint --strict with the default values and each
// ci/*-values.yaml.
func TestChartLint(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	for _, f := range append([]string{""}, files...) {
		args := []string{"lint", "--strict", "--namespace", "kube-system", chart}
		if f != "" {
			args = append(append(args, "-f", f), missingFiles()...)
		}
		out, err := exec.Command(helmBin(t), args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "0 chart(s) failed") || strings.Contains(string(out), "[ERROR]") || strings.Contains(string(out), "[WARNING]") || strings.Contains(string(out), "Fail:") {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestChartDefault: the objects of the default rendering and the hooks.
func TestChartDefault(t *testing.T) {
	text, err := render(t)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, text)
	want := []string{
		"ClusterRole/nodedns", "ClusterRole/nodedns-uninstall", "ClusterRoleBinding/nodedns", "ClusterRoleBinding/nodedns-uninstall",
		"ConfigMap/nodedns", "DaemonSet/nodedns", "DaemonSet/nodedns-cleanup",
		"Job/nodedns-uninstall-await-cleanup", "Job/nodedns-uninstall-stop-agents",
		"Role/nodedns-uninstall", "RoleBinding/nodedns-uninstall", "ServiceAccount/nodedns", "ServiceAccount/nodedns-uninstall",
	}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	cfg := agentConfig(t, objs)
	if fmt.Sprint(cfg["local-ip"]) != "[169.254.20.10]" || cfg["admin-socket"] != "/run/nodedns/admin.sock" {
		t.Errorf("config %v", cfg)
	}

	// The hooks: pre-delete, in the order RBAC, stop the agents, clean up
	// every node, wait for the cleanup; the agents' selector matches none
	// of the hooks' pods.
	weight := map[string]string{}
	for _, o := range objs {
		a := o.GetAnnotations()
		if a["helm.sh/hook"] == "" {
			continue
		}
		if a["helm.sh/hook"] != "pre-delete" || !strings.Contains(a["helm.sh/hook-delete-policy"], "hook-succeeded") {
			t.Errorf("%s %s: hook annotations %v", o.GetKind(), o.GetName(), a)
		}
		weight[o.GetKind()+"/"+o.GetName()] = a["helm.sh/hook-weight"]
	}
	for obj, w := range map[string]string{"ServiceAccount/nodedns-uninstall": "-20", "Role/nodedns-uninstall": "-20",
		"Job/nodedns-uninstall-stop-agents": "-10", "DaemonSet/nodedns-cleanup": "0", "Job/nodedns-uninstall-await-cleanup": "10"} {
		if weight[obj] != w {
			t.Errorf("%s: hook weight %q, want %q", obj, weight[obj], w)
		}
	}
	ds := find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns")
	agentSel := ds.Spec.Selector.MatchLabels
	matches := func(lbl map[string]string) bool {
		for k, v := range agentSel {
			if lbl[k] != v {
				return false
			}
		}
		return true
	}
	stop := find[batchv1.Job](t, objs, "Job", "nodedns-uninstall-stop-agents")
	cleanup := find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns-cleanup")
	for name, lbl := range map[string]map[string]string{"stop-agents Job": stop.Spec.Template.Labels, "cleanup DaemonSet": cleanup.Spec.Template.Labels} {
		if matches(lbl) {
			t.Errorf("the agents' selector %v matches the %s's pods %v: stop-agents would wait for them", agentSel, name, lbl)
		}
	}
	args := strings.Join(stop.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--selector=app.kubernetes.io/instance=nodedns,app.kubernetes.io/name=nodedns") || !strings.Contains(args, "--daemonset=nodedns ") {
		t.Errorf("stop-agents args %q do not name the agents' DaemonSet and selector", args)
	}
	// The cleanup pods land where the agents do and need what cleanup
	// needs; the init container refuses to run under a live agent.
	cs := cleanup.Spec.Template.Spec
	if !cs.HostNetwork || fmt.Sprint(cs.Tolerations) != fmt.Sprint(ds.Spec.Template.Spec.Tolerations) || cs.PriorityClassName != ds.Spec.Template.Spec.PriorityClassName {
		t.Errorf("cleanup pods: hostNetwork %v, tolerations %v, priority %q; want the agents'", cs.HostNetwork, cs.Tolerations, cs.PriorityClassName)
	}
	if len(cs.InitContainers) != 1 || !slices.Contains(cs.InitContainers[0].Args, "--wait-for-agent=60s") || !slices.Contains(cs.InitContainers[0].Args, "--local-ip=169.254.20.10") {
		t.Errorf("cleanup init container %+v", cs.InitContainers)
	}
	// The Jobs may not create pods or touch other DaemonSets.
	role := find[rbacv1.Role](t, objs, "Role", "nodedns-uninstall")
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v == "create" || v == "update" || v == "patch" || v == "*" || (v == "delete" && !slices.Equal(r.ResourceNames, []string{"nodedns"})) {
				t.Errorf("uninstall Role grants %s on %v %v", v, r.Resources, r.ResourceNames)
			}
		}
	}
}

// TestChartKubeDNSIntercept: the kube-dns ClusterIP joins local-ip, the
// kube-dns-upstream Service selects kube-dns's pods, and the agent's
// cluster-dns is that Service, from the environment kubelet gives the pod
// or, with a fixed address, in the file.
func TestChartKubeDNSIntercept(t *testing.T) {
	text, err := render(t, "-f", chart+"/ci/full-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, text)
	cfg := agentConfig(t, objs)
	if fmt.Sprint(cfg["local-ip"]) != "[169.254.20.10 10.96.0.10]" {
		t.Errorf("local-ip %v, want the kube-dns ClusterIP added", cfg["local-ip"])
	}
	if _, ok := cfg["cluster-dns"]; ok {
		t.Errorf("cluster-dns %v in the file: the flag from the environment should give it", cfg["cluster-dns"])
	}
	for k, want := range map[string]string{"log-format": "json", "upstream": "[10.0.0.2 10.0.0.3]", "stub-domains": "map[corp.example:[10.0.0.53]]",
		"namespaces": "[default prod]", "fallthrough": "[]"} {
		if got := fmt.Sprint(cfg[k]); got != want {
			t.Errorf("config %s = %s, want %s", k, got, want)
		}
	}
	svc := find[corev1.Service](t, objs, "Service", "kube-dns-upstream")
	if svc.Namespace != "kube-system" || svc.Spec.Selector["k8s-app"] != "kube-dns" || len(svc.Spec.Ports) != 2 || svc.Spec.ClusterIP != "" {
		t.Errorf("kube-dns-upstream: %+v", svc)
	}
	ds := find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns")
	c := ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--cluster-dns=$(KUBE_DNS_UPSTREAM_SERVICE_HOST)", "--admin=[$(HOST_IP)]:9253", "--log-queries=0.01"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if ds.Spec.Template.Spec.EnableServiceLinks != nil && !*ds.Spec.Template.Spec.EnableServiceLinks {
		t.Error("enableServiceLinks is off: the agent would not learn the upstream Service's address")
	}
	cleanup := find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns-cleanup")
	if !slices.Contains(cleanup.Spec.Template.Spec.InitContainers[0].Args, "--local-ip=169.254.20.10,10.96.0.10") {
		t.Errorf("cleanup args %q: want both local IPs", cleanup.Spec.Template.Spec.InitContainers[0].Args)
	}
	pm := find[unstructured.Unstructured](t, objs, "PodMonitor", "nodedns")
	if eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints"); len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("PodMonitor endpoints %v, want the port named metrics", eps)
	}
	find[corev1.Service](t, objs, "Service", "nodedns-metrics")
	find[unstructured.Unstructured](t, objs, "ServiceMonitor", "nodedns")
	if want, err := os.ReadFile("grafana/nodedns.json"); err == nil {
		cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "nodedns-dashboard")
		if cm.Labels["grafana_dashboard"] != "1" || strings.TrimSpace(cm.Data["nodedns.json"]) != strings.TrimSpace(string(want)) {
			t.Errorf("dashboard ConfigMap: labels %v, JSON equal to deploy/grafana/nodedns.json: %v", cm.Labels, strings.TrimSpace(cm.Data["nodedns.json"]) == strings.TrimSpace(string(want)))
		}
	}
	if src, err := os.ReadFile("prometheus/nodedns.rules.yaml"); err == nil {
		var want map[string]any
		if err := yaml.Unmarshal(src, &want); err != nil {
			t.Fatal(err)
		}
		pr := find[unstructured.Unstructured](t, objs, "PrometheusRule", "nodedns")
		got, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
		if !reflect.DeepEqual(got, want["groups"]) {
			t.Errorf("PrometheusRule groups differ from deploy/prometheus/nodedns.rules.yaml's")
		}
		if pr.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("PrometheusRule labels %v", pr.GetLabels())
		}
	}

	text, err = render(t, "-f", chart+"/ci/ipv6-values.yaml", "--namespace", "dns")
	if err != nil {
		t.Fatal(err)
	}
	objs = objects(t, text)
	cfg = agentConfig(t, objs)
	if fmt.Sprint(cfg["local-ip"]) != "[169.254.20.10 fd00:20::10 fd00:96::a]" || cfg["cluster-dns"] != "fd00:96::b" {
		t.Errorf("IPv6: local-ip %v cluster-dns %v", cfg["local-ip"], cfg["cluster-dns"])
	}
	svc = find[corev1.Service](t, objs, "Service", "kube-dns-upstream")
	if svc.Namespace != "kube-system" || svc.Spec.ClusterIP != "fd00:96::b" {
		t.Errorf("IPv6 kube-dns-upstream: namespace %s clusterIP %s", svc.Namespace, svc.Spec.ClusterIP)
	}
	ds = find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns")
	if ds.Namespace != "dns" || slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--cluster-dns") }) {
		t.Errorf("IPv6 DaemonSet in %s with args %q", ds.Namespace, ds.Spec.Template.Spec.Containers[0].Args)
	}
}

// TestChartRefuses: values that would fail on every node, or loop, fail
// at render time with a message naming the value.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "kubeDNS.intercept=true"}, "kubeDNS.intercept needs kubeDNS.clusterIP"},
		{[]string{"--set", "kubeDNS.intercept=true,kubeDNS.clusterIP=10.96.0.10,config.cluster-dns=10.96.0.10"}, "config.cluster-dns 10.96.0.10 is the kube-dns ClusterIP"},
		{[]string{"--set", "kubeDNS.intercept=true,kubeDNS.clusterIP=10.96.0.10,config.cluster-dns=10.96.0.10:53"}, "is the kube-dns ClusterIP"},
		{[]string{"--set", "kubeDNS.intercept=true,kubeDNS.clusterIP=10.96.0.10", "--namespace", "dns"}, "set kubeDNS.upstreamService.clusterIP"},
		{[]string{"--set", "config.admin-socket=/tmp/a.sock"}, "config.admin-socket must be a path in /run/nodedns/"},
		{[]string{"--set", "metrics.enabled=false,metrics.podMonitor.enabled=true"}, "metrics.podMonitor.enabled needs metrics.enabled"},
		{[]string{"--set", "metrics.enabled=true,metrics.serviceMonitor.enabled=true"}, "needs metrics.service.enabled"},
		// values.schema.json: a misspelt key, a wrong type, a bad enum.
		{[]string{"--set", "kubedns.intercept=true"}, "additional properties 'kubedns' not allowed"},
		{[]string{"--set", "cleanup.timeout=3"}, "/cleanup/timeout"},
		{[]string{"--set", "image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
	} {
		_, err := render(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.want)
		}
	}
}

// TestChartEveryConfigKey: every flag of `nodedns serve` can be set through
// the chart's config values and reaches the agent's file unchanged, so no
// option needs a chart change.
func TestChartEveryConfigKey(t *testing.T) {
	help, _ := exec.Command("go", "run", "../cmd/nodedns", "serve", "-h").CombinedOutput()
	var keys []string
	for _, line := range strings.Split(string(help), "\n") {
		if f, ok := strings.CutPrefix(line, "  -"); ok {
			if name, _, _ := strings.Cut(f, " "); name != "config" {
				keys = append(keys, name)
			}
		}
	}
	if len(keys) < 40 {
		t.Fatalf("found %d flags in `nodedns serve -h`:\n%s", len(keys), help)
	}
	vals := map[string]any{}
	for i, k := range keys {
		vals[k] = fmt.Sprintf("value-%d", i)
	}
	vals["admin-socket"] = "/run/nodedns/x.sock" // the chart checks this one
	vals["network-mode"] = "host"                // and this one (networkMode sets it)
	js, _ := yaml.Marshal(map[string]any{"config": vals})
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, js, 0o600); err != nil {
		t.Fatal(err)
	}
	text, err := render(t, "-f", vf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agentConfig(t, objects(t, text))
	for k, v := range vals {
		if k == "local-ip" {
			v = fmt.Sprintf("[%s]", v) // the chart writes it as a list
		}
		if got := fmt.Sprint(cfg[k]); got != v {
			t.Errorf("config key %s: %q in the file, want %q", k, got, v)
		}
	}
}

// TestChartMulticlusterRBAC: the agents may list and watch ServiceImports
// only when the config answers a multicluster zone.
func TestChartMulticlusterRBAC(t *testing.T) {
	grants := func(args ...string) bool {
		text, err := render(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		role := find[rbacv1.ClusterRole](t, objects(t, text), "ClusterRole", "nodedns")
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "multicluster.x-k8s.io") {
				if !slices.Equal(r.Resources, []string{"serviceimports"}) || !slices.Equal(r.Verbs, []string{"list", "watch"}) {
					t.Errorf("multicluster rule %+v", r)
				}
				return true
			}
		}
		return false
	}
	if grants() {
		t.Error("the default rendering grants serviceimports")
	}
	if !grants("--set", "config.multicluster-domain={clusterset.local}") {
		t.Error("multicluster-domain set: no rule for serviceimports")
	}
}
