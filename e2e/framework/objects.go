package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var getOpts = metav1.GetOptions{}

// fieldManager owns what the tests apply (server-side apply).
const fieldManager = "nodedns-e2e"

// Decode reads YAML documents (separated by ---) into objects; empty
// documents are skipped.
func Decode(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("manifest document %d: %v", i, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// resource is the client of obj's kind, in its namespace.
func (c *Cluster) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() == "namespace" {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		return c.Dynamic.Resource(m.Resource).Namespace(ns), nil
	}
	return c.Dynamic.Resource(m.Resource), nil
}

func describe(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", obj.GetKind(), ns, obj.GetName())
	}
	return fmt.Sprintf("%s %s", obj.GetKind(), obj.GetName())
}

// Apply applies the YAML documents of manifest (server-side apply, owned
// by the tests, conflicts forced) in order, and returns the objects.
func (c *Cluster) Apply(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	objs := Decode(t, manifest)
	for _, obj := range objs {
		c.ApplyObject(t, obj)
	}
	return objs
}

// ApplyObject applies one object (server-side apply).
func (c *Cluster) ApplyObject(t testing.TB, obj *unstructured.Unstructured) {
	t.Helper()
	ri, err := c.resource(obj)
	if err != nil {
		t.Fatalf("apply %s: %v", describe(obj), err)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		t.Fatalf("apply %s: encoding: %v", describe(obj), err)
	}
	force := true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force}); err != nil {
		t.Fatalf("apply %s: %v", describe(obj), err)
	}
}

// Delete deletes the objects (in reverse order, foreground) and waits until
// each is gone; objects already gone are fine.
func (c *Cluster) Delete(t testing.TB, objs []*unstructured.Unstructured, timeout time.Duration) {
	t.Helper()
	fg := metav1.DeletePropagationForeground
	for i := len(objs) - 1; i >= 0; i-- {
		obj := objs[i]
		ri, err := c.resource(obj)
		if err != nil {
			t.Fatalf("delete %s: %v", describe(obj), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete %s: %v", describe(obj), err)
		}
	}
	for _, obj := range objs {
		ri, err := c.resource(obj)
		if err != nil {
			t.Fatalf("delete %s: %v", describe(obj), err)
		}
		WaitFor(t, "deleting "+describe(obj), timeout, 200*time.Millisecond, func() (bool, string) {
			_, err := ri.Get(context.Background(), obj.GetName(), getOpts)
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, "still there"
		})
	}
}

// RenderManifest is deploy/daemonset.yaml as the e2e test deploys it:
// unchanged but for the image (the agent's and the metrics-port init
// container's) and, when upstream is not empty, the ConfigMap's upstream
// line set to it. Exactly those three lines must change: a manifest whose
// layout moved fails here rather than deploy something else.
func (c *Cluster) RenderManifest(t testing.TB, image, upstream string) string {
	t.Helper()
	path := filepath.Join(c.Root, "deploy", "daemonset.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	lines := strings.Split(string(orig), "\n")
	changed := 0
	for i, l := range lines {
		switch {
		case strings.Contains(l, "image: registry.example.com/nodedns:"):
			pre, _, _ := strings.Cut(l, "image: ")
			lines[i] = pre + "image: " + image
		case upstream != "" && strings.HasPrefix(l, "    # upstream: "):
			lines[i] = `    upstream: ["` + upstream + `"]`
		default:
			continue
		}
		changed++
	}
	want := 3
	if upstream == "" {
		want = 2
	}
	if changed != want {
		t.Fatalf("rendering deploy/daemonset.yaml: changed %d lines, want %d (the agent's and the metrics-port init container's image, and the upstream)", changed, want)
	}
	return strings.Join(lines, "\n")
}

// DaemonSetRolledOut: the DaemonSet's controller saw its latest spec and
// every scheduled pod is updated and available (kubectl rollout status).
func DaemonSetRolledOut(ds *appsv1.DaemonSet) (bool, string) {
	s := ds.Status
	seen := fmt.Sprintf("generation %d observed %d, desired %d, updated %d, available %d, ready %d",
		ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable, s.NumberReady)
	return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
		s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled, seen
}

// WaitDaemonSet waits until the DaemonSet is rolled out.
func (c *Cluster) WaitDaemonSet(t testing.TB, ns, name string, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	var ds *appsv1.DaemonSet
	WaitFor(t, fmt.Sprintf("DaemonSet %s/%s rolled out", ns, name), timeout, 250*time.Millisecond, func() (bool, string) {
		var err error
		ds, err = c.Client.AppsV1().DaemonSets(ns).Get(context.Background(), name, getOpts)
		if err != nil {
			return false, err.Error()
		}
		return DaemonSetRolledOut(ds)
	})
	return ds
}

// WaitDeployment waits until the Deployment is rolled out: its latest
// spec observed, every replica updated and available, no old one left.
func (c *Cluster) WaitDeployment(t testing.TB, ns, name string, timeout time.Duration) {
	t.Helper()
	WaitFor(t, fmt.Sprintf("Deployment %s/%s rolled out", ns, name), timeout, 250*time.Millisecond, func() (bool, string) {
		d, err := c.Client.AppsV1().Deployments(ns).Get(context.Background(), name, getOpts)
		if err != nil {
			return false, err.Error()
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want,
			fmt.Sprintf("generation %d observed %d, want %d replicas: %d, updated %d, available %d", d.Generation, s.ObservedGeneration, want, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
	})
}

// WaitStatefulSet waits until every replica of the StatefulSet is ready
// and of its current revision.
func (c *Cluster) WaitStatefulSet(t testing.TB, ns, name string, timeout time.Duration) {
	t.Helper()
	WaitFor(t, fmt.Sprintf("StatefulSet %s/%s rolled out", ns, name), timeout, 250*time.Millisecond, func() (bool, string) {
		s, err := c.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, getOpts)
		if err != nil {
			return false, err.Error()
		}
		want := int32(1)
		if s.Spec.Replicas != nil {
			want = *s.Spec.Replicas
		}
		st := s.Status
		return st.ObservedGeneration >= s.Generation && st.ReadyReplicas == want && st.UpdatedReplicas == want && st.CurrentRevision == st.UpdateRevision,
			fmt.Sprintf("want %d replicas: ready %d, updated %d, revision %s -> %s", want, st.ReadyReplicas, st.UpdatedReplicas, st.CurrentRevision, st.UpdateRevision)
	})
}

// PodReady: the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitPod waits until the pod is Ready and returns it.
func (c *Cluster) WaitPod(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	WaitFor(t, fmt.Sprintf("pod %s/%s Ready", ns, name), timeout, 250*time.Millisecond, func() (bool, string) {
		var err error
		pod, err = c.Client.CoreV1().Pods(ns).Get(context.Background(), name, getOpts)
		if err != nil {
			return false, err.Error()
		}
		return PodReady(pod), fmt.Sprintf("phase %s, conditions %v", pod.Status.Phase, pod.Status.Conditions)
	})
	return pod
}

// RolloutRestart restarts a DaemonSet's pods as `kubectl rollout restart`
// does (a new restartedAt annotation on its pod template).
func (c *Cluster) RolloutRestart(t testing.TB, ns, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := c.Client.AppsV1().DaemonSets(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("rollout restart DaemonSet %s/%s: %v", ns, name, err)
	}
}

// SetImage sets the image of a DaemonSet's container (kubectl set image).
func (c *Cluster) SetImage(t testing.TB, ns, name, container, image string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":%q}]}}}}`, container, image)
	if _, err := c.Client.AppsV1().DaemonSets(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set image of DaemonSet %s/%s container %s to %s: %v", ns, name, container, image, err)
	}
}

// ToYAML is obj as YAML (for failure messages).
func ToYAML(obj any) string {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Sprintf("%+v", obj)
	}
	return string(bytes.TrimSpace(b))
}
