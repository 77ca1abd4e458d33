//go:build integration

package integration

// deploy/daemonset.yaml against a real kube-apiserver, because a manifest
// that only parses can still be refused, defaulted into something else or
// grant too much: every object of the file is applied server-side (strict
// field validation, as `kubectl apply --server-side` does), so the API
// server's own defaulting, validation and admission judge it, not a YAML
// lint. Then each object is read back and checked for what a node-local
// DNS agent needs of it (host network, the capabilities its interception
// takes, a rolling update that never leaves a node without DNS), and the
// RBAC it grants is checked through SubjectAccessReviews. Everything created is
// deleted at the end, whether the test passes or not.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const (
	manifestPath = "../deploy/daemonset.yaml"
	fieldManager = "nodedns-integration"
	// systemNodeCritical is the value the API server gives the
	// system-node-critical PriorityClass it creates on start.
	systemNodeCritical = 2000001000
)

// readManifest decodes every object of a multi-document YAML file.
func readManifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: document %d: %v", path, len(out)+1, err)
		}
		if len(m) == 0 {
			continue // a document of comments only
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// TestDeployManifest applies deploy/daemonset.yaml to the API server.
func TestDeployManifest(t *testing.T) {
	cp := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	objs := readManifest(t, manifestPath)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"} {
		if kinds[k] != 1 {
			t.Errorf("%s holds %d objects of kind %s, want 1", manifestPath, kinds[k], k)
		}
	}
	if len(objs) != 5 {
		t.Errorf("%s holds %d objects, want 5: %v", manifestPath, len(objs), kinds)
	}

	// kube-system is made by the API server itself (its system namespaces
	// controller); create it only if this one has not yet.
	if _, err := cp.Client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating kube-system: %v", err)
		}
		t.Log("created namespace kube-system (the API server had not yet)")
	} else if err != nil {
		t.Fatalf("reading namespace kube-system: %v", err)
	}

	// system-node-critical is created by the API server too (post-start
	// hook scheduling/bootstrap-system-priority-classes). The DaemonSet
	// would be accepted without it — priority is resolved by the Priority
	// admission plugin for pods, not for their templates — but its pods
	// would be rejected, so its presence is asserted here, and a pod of the
	// template is put through admission below.
	dnstest.Eventually(t, 30*time.Second, "PriorityClass system-node-critical (created by the API server)", func() error {
		pc, err := cp.Client.SchedulingV1().PriorityClasses().Get(ctx, "system-node-critical", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pc.Value != systemNodeCritical {
			return fmt.Errorf("value %d, want %d", pc.Value, systemNodeCritical)
		}
		return nil
	})

	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	// resource returns the client for o's resource (in o's namespace
	// when it is namespaced).
	resource := func(o *unstructured.Unstructured) dynamic.ResourceInterface {
		t.Helper()
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: no such resource on the API server: %v", gvk, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.GetNamespace() == "" {
				t.Fatalf("%s %s: namespaced, but the manifest names no namespace", o.GetKind(), o.GetName())
			}
			return dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	apply := func(o *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
		body, err := json.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		force := true
		opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: metav1.FieldValidationStrict}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		return resource(o).Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
	}

	// Refuse to run over objects this test did not make: it deletes what
	// it applies.
	for _, o := range objs {
		if _, err := resource(o).Get(ctx, o.GetName(), metav1.GetOptions{}); err == nil {
			t.Fatalf("%s %s already exists on the API server; not touching it", o.GetKind(), o.GetName())
		} else if !apierrors.IsNotFound(err) {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	// A server-side dry run of everything first: nothing is stored if an
	// object is refused.
	for _, o := range objs {
		if _, err := apply(o, true); err != nil {
			t.Errorf("dry run: %s %s refused by the API server: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, o := range objs {
		got, err := apply(o, false)
		if err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() {
			// Background propagation: no garbage collector runs here to
			// honour a foreground or orphan finalizer.
			bg := metav1.DeletePropagationBackground
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer dcancel()
			if err := resource(o).Delete(dctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
				return
			}
			for i := 0; i < 100; i++ {
				if _, err := resource(o).Get(dctx, o.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Errorf("%s %s still present 10s after its deletion", o.GetKind(), o.GetName())
		})
		t.Logf("applied %s %s (uid %s)", got.GetKind(), got.GetName(), got.GetUID())
	}

	// A second apply of the same file changes nothing and conflicts with
	// nothing (what a re-run of `kubectl apply` does).
	for _, o := range objs {
		before, err := resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading %s %s back: %v", o.GetKind(), o.GetName(), err)
		}
		after, err := apply(o, false)
		if err != nil {
			t.Errorf("re-applying %s %s: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		if d := appliedDiff(before, after); d != "" {
			t.Errorf("re-applying %s %s changed it: %s", o.GetKind(), o.GetName(), d)
		}
	}

	var cfg map[string]any
	t.Run("ConfigMap", func(t *testing.T) {
		cm, err := cp.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, ok := cm.Data["config.yaml"]
		if !ok {
			t.Fatalf("no config.yaml key: %v", cm.Data)
		}
		if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
			t.Fatalf("config.yaml: %v", err)
		}
		if got := fmt.Sprint(cfg["local-ip"]); !strings.Contains(got, "169.254.20.10") {
			t.Errorf("local-ip %s does not hold 169.254.20.10", got)
		}
		if admin, _ := cfg["admin"].(string); admin != "" && !strings.HasPrefix(admin, "127.") && !strings.HasPrefix(admin, "[::1]") {
			t.Errorf("admin %q: metrics must not listen beyond loopback on a host-network pod", admin)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		cr, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		granted := map[string]bool{}
		for _, r := range cr.Rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("rule %+v: non-resource URLs or resource names", r)
			}
			for _, v := range r.Verbs {
				if v != "list" && v != "watch" {
					t.Errorf("rule %+v grants %q; only list and watch are wanted", r, v)
				}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					granted[g+"/"+res] = true
				}
			}
		}
		want := []string{"/services", "/namespaces", "/pods", "discovery.k8s.io/endpointslices"}
		for _, w := range want {
			if !granted[w] {
				t.Errorf("ClusterRole does not cover %s", w)
			}
		}
		if len(granted) != len(want) {
			t.Errorf("ClusterRole covers %v, want exactly %v", granted, want)
		}

		crb, err := cp.Client.RbacV1().ClusterRoleBindings().Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "nodedns", Namespace: "kube-system"}
		if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodedns"}) ||
			len(crb.Subjects) != 1 || crb.Subjects[0] != wantSubject {
			t.Errorf("ClusterRoleBinding: roleRef %+v subjects %+v; want ClusterRole nodedns bound to %+v", crb.RoleRef, crb.Subjects, wantSubject)
		}
		if _, err := cp.Client.CoreV1().ServiceAccounts("kube-system").Get(ctx, "nodedns", metav1.GetOptions{}); err != nil {
			t.Errorf("ServiceAccount: %v", err)
		}

		// What the API server's RBAC authorizer makes of it for the
		// agent's service account (its informer caches catch up with
		// the new binding within moments).
		sa := "system:serviceaccount:kube-system:nodedns"
		groups := []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
		can := func(verb, group, res string) (bool, error) {
			r, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: sa, Groups: groups,
				ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: res},
			}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			return r.Status.Allowed, nil
		}
		for _, w := range want {
			group, res, _ := strings.Cut(w, "/")
			for _, verb := range []string{"list", "watch"} {
				dnstest.Eventually(t, 10*time.Second, fmt.Sprintf("%s may %s %s", sa, verb, w), func() error {
					ok, err := can(verb, group, res)
					if err == nil && !ok {
						err = errors.New("denied")
					}
					return err
				})
			}
		}
		for _, c := range []struct{ verb, group, res string }{
			{"get", "", "secrets"}, {"list", "", "secrets"}, {"create", "", "pods"}, {"delete", "", "pods"},
			{"get", "", "services"}, {"update", "discovery.k8s.io", "endpointslices"}, {"list", "", "nodes"}, {"list", "", "configmaps"},
		} {
			if ok, err := can(c.verb, c.group, c.res); err != nil || ok {
				t.Errorf("%s may %s %s/%s: allowed=%v err=%v; want denied", sa, c.verb, c.group, c.res, ok, err)
			}
		}
	})

	t.Run("DaemonSet", func(t *testing.T) {
		ds, err := cp.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkDaemonSet(t, ds, cfg)
		checkMetricsExposure(t, ds)

		// A pod of the template, as the DaemonSet controller would make
		// it for a node, through the API server's pod validation and
		// admission (Priority resolves system-node-critical, PodSecurity
		// judges the namespace's level), dry run: nothing is stored.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "nodedns-dry-run", Namespace: "kube-system", Labels: ds.Spec.Template.Labels},
			Spec:       *ds.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = "node-a"
		got, err := cp.Client.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("a pod of the DaemonSet's template is refused: %v", err)
		}
		checkMetricsPortPod(t, got)
		if got.Spec.Priority == nil || *got.Spec.Priority != systemNodeCritical {
			t.Errorf("pod priority %v, want %d (system-node-critical)", got.Spec.Priority, systemNodeCritical)
		}
		for _, c := range got.Spec.Containers {
			for _, p := range c.Ports {
				if p.HostPort != 0 {
					t.Errorf("pod container %s: port %d has hostPort %d", c.Name, p.ContainerPort, p.HostPort)
				}
			}
		}
		if _, err := cp.Client.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the dry-run pod exists: %v", err)
		}
	})
}

// checkDaemonSet checks the DaemonSet as the API server stored it (after
// its defaulting): a rollout must never leave a node without DNS, and the
// agent must get what it needs and no more.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, cfg map[string]any) {
	t.Helper()
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil {
		t.Fatalf("updateStrategy %+v, want RollingUpdate", us)
	}
	if ms := us.RollingUpdate.MaxSurge; ms == nil || *ms != intstr.FromInt32(1) {
		t.Errorf("maxSurge %v, want 1", ms)
	}
	if mu := us.RollingUpdate.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(0) {
		t.Errorf("maxUnavailable %v, want 0", mu)
	}

	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("hostNetwork is not set")
	}
	if spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy %q, want Default", spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
	}
	if spec.ServiceAccountName != "nodedns" {
		t.Errorf("serviceAccountName %q, want nodedns", spec.ServiceAccountName)
	}
	tolerateAll := false
	for _, tol := range spec.Tolerations {
		tolerateAll = tolerateAll || (tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "")
	}
	if !tolerateAll {
		t.Errorf("tolerations %+v do not tolerate every taint (operator Exists, no key, no effect)", spec.Tolerations)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]

	// A hostPort keeps the surge pod of a rollout off the node. With
	// hostNetwork the API server gives every declared containerPort the
	// same hostPort in the pods it admits (since Kubernetes 1.28 no longer
	// in templates, so the pod dry run shows it too): no port at all.
	for _, p := range c.Ports {
		switch {
		case p.HostPort != 0:
			t.Errorf("container port %d/%s has hostPort %d: the surge pod of a rollout could not be scheduled", p.ContainerPort, p.Protocol, p.HostPort)
		case spec.HostNetwork:
			t.Errorf("container port %d/%s declared on a host-network pod: its pods get it as a hostPort, and the surge pod of a rollout could not be scheduled", p.ContainerPort, p.Protocol)
		}
	}

	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container has no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("container is privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile %+v: want RuntimeDefault", sc.SeccompProfile)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities %+v: want drop ALL", sc.Capabilities)
	} else {
		allowed := []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW"}
		for _, a := range sc.Capabilities.Add {
			if !slices.Contains(allowed, a) {
				t.Errorf("capability %s added; want only %v", a, allowed)
			}
		}
		for _, need := range []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"} {
			if !slices.Contains(sc.Capabilities.Add, need) {
				t.Errorf("capability %s not added (capabilities %+v)", need, sc.Capabilities.Add)
			}
		}
	}

	nodeName := false
	for _, e := range c.Env {
		nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !nodeName {
		t.Error("NODE_NAME does not come from the downward API (spec.nodeName)")
	}

	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("requests %v: want cpu and memory", c.Resources.Requests)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Errorf("limits %v: want a memory limit", c.Resources.Limits)
	}

	// The xtables lock is the host's, shared with kube-proxy.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	xt := false
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/run/xtables.lock" {
			m, ok := mounts[v.Name]
			xt = ok && m.MountPath == "/run/xtables.lock" && !m.ReadOnly
		}
	}
	if !xt {
		t.Error("the host's /run/xtables.lock is not mounted read-write at /run/xtables.lock")
	}

	// Probes: health and ready, through the admin socket the ConfigMap
	// configures, in a directory that is mounted writable.
	sock, _ := cfg["admin-socket"].(string)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		what  string
	}{{"liveness", c.LivenessProbe, "health"}, {"readiness", c.ReadinessProbe, "ready"}} {
		if p.probe == nil {
			t.Errorf("no %s probe", p.name)
			continue
		}
		var cmd []string
		if p.probe.Exec != nil {
			cmd = p.probe.Exec.Command
		}
		line := strings.Join(cmd, " ")
		switch {
		case p.probe.HTTPGet != nil:
			if !strings.HasSuffix(p.probe.HTTPGet.Path, "/"+p.what) {
				t.Errorf("%s probe: GET %s, want /%s", p.name, p.probe.HTTPGet.Path, p.what)
			}
		case len(cmd) == 0:
			t.Errorf("%s probe: neither exec nor httpGet", p.name)
		case cmd[len(cmd)-1] != p.what:
			t.Errorf("%s probe %q does not ask for %s", p.name, line, p.what)
		case sock != "" && !strings.Contains(line, sock):
			t.Errorf("%s probe %q does not use the admin socket %s of the ConfigMap", p.name, line, sock)
		}
	}
	if sock != "" {
		dirMounted := false
		for _, m := range c.VolumeMounts {
			dirMounted = dirMounted || (strings.HasPrefix(sock, strings.TrimSuffix(m.MountPath, "/")+"/") && !m.ReadOnly)
		}
		if !dirMounted {
			t.Errorf("the admin socket %s is not in a writable mount (the root filesystem is read-only)", sock)
		}
	}

	// The old pod keeps answering for --lameduck after SIGTERM; kubelet
	// must not kill it before.
	if ld, ok := cfg["lameduck"].(string); ok {
		d, err := time.ParseDuration(ld)
		if err != nil {
			t.Errorf("lameduck %q: %v", ld, err)
		} else if gp := spec.TerminationGracePeriodSeconds; gp == nil || time.Duration(*gp)*time.Second <= d+time.Second {
			t.Errorf("terminationGracePeriodSeconds %v is not comfortably longer than lameduck %v", gp, d)
		}
	}
}
