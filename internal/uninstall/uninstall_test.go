package uninstall

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const ns = "kube-system"

var agentLabels = map[string]string{"app.kubernetes.io/name": "nodedns", "app.kubernetes.io/instance": "nodedns"}

func node(name string, ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

func pod(name, nodeName string, lbl map[string]string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl},
		Spec:   corev1.PodSpec{NodeName: nodeName},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func daemonSet(name string, lbl map[string]string, desired int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 1},
		Spec:   appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: lbl}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: desired}}
}

func testConfig(c *fake.Clientset) Config {
	return Config{Client: c, Namespace: ns, Poll: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestStopAgents: the DaemonSet is deleted with background propagation
// (the garbage collector, simulated here, deletes the pods), and
// StopAgents returns once no agent pod is left on a Ready node; the pod on
// the NotReady node does not hold it up.
func TestStopAgents(t *testing.T) {
	c := fake.NewClientset(daemonSet("nodedns", agentLabels, 3),
		node("a", true), node("b", true), node("c", false),
		pod("nodedns-a", "a", agentLabels, true), pod("nodedns-b", "b", agentLabels, true), pod("nodedns-c", "c", agentLabels, true),
		pod("other", "a", map[string]string{"app.kubernetes.io/name": "else"}, true))
	var propagation atomic.Value
	c.PrependReactor("delete", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.DeleteAction).GetDeleteOptions().PropagationPolicy; p != nil {
			propagation.Store(*p)
		}
		// The garbage collector: the pods on Ready nodes go a little later
		// (kubelet confirms), the NotReady node's pod never does.
		go func() {
			time.Sleep(30 * time.Millisecond)
			for _, n := range []string{"nodedns-a", "nodedns-b"} {
				_ = c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ns, n)
			}
		}()
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := StopAgents(ctx, testConfig(c), "nodedns", "app.kubernetes.io/name=nodedns,app.kubernetes.io/instance=nodedns"); err != nil {
		t.Fatal(err)
	}
	if p, _ := propagation.Load().(metav1.DeletionPropagation); p != metav1.DeletePropagationBackground {
		t.Errorf("DaemonSet deleted with propagation %q, want Background (the pods are deleted gracefully by the garbage collector)", p)
	}
	if _, err := c.AppsV1().DaemonSets(ns).Get(ctx, "nodedns", metav1.GetOptions{}); err == nil {
		t.Error("the agent DaemonSet still exists")
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Errorf("a pod the selector does not match was touched: %v", err)
	}
}

// TestStopAgentsTimeout: an agent that does not go away fails the step,
// naming the pod and its node; a DaemonSet already gone is not an error
// in itself.
func TestStopAgentsTimeout(t *testing.T) {
	c := fake.NewClientset(node("a", true), pod("nodedns-a", "a", agentLabels, true))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := StopAgents(ctx, testConfig(c), "nodedns", "app.kubernetes.io/name=nodedns")
	if err == nil || !strings.Contains(err.Error(), "nodedns-a on a") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the pod left named and the deadline", err)
	}
	if err := StopAgents(context.Background(), testConfig(c), "nodedns", "a=("); err == nil {
		t.Error("a bad selector was accepted")
	}
}

// TestAwaitCleanup: done when every Ready node's cleanup pod is Ready;
// a NotReady node is skipped; while a Ready node's cleanup fails the wait
// goes on, and on timeout the error carries the cleanup's own message.
func TestAwaitCleanup(t *testing.T) {
	cl := map[string]string{"app.kubernetes.io/name": "nodedns", "app.kubernetes.io/component": "cleanup"}
	failing := pod("cleanup-b", "b", cl, false)
	failing.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "cleanup",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "time=...\nnodedns cleanup: another process still serves 169.254.20.10:53"}}}}
	c := fake.NewClientset(daemonSet("nodedns-cleanup", cl, 3), node("a", true), node("b", true), node("c", false),
		pod("cleanup-a", "a", cl, true), failing, pod("cleanup-c", "c", cl, false))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	rep, err := AwaitCleanup(ctx, testConfig(c), "nodedns-cleanup")
	if err == nil || !strings.Contains(err.Error(), "b (cleanup exited 1: nodedns cleanup: another process still serves 169.254.20.10:53)") {
		t.Fatalf("err = %v; want node b pending with the cleanup's message", err)
	}
	if strings.Join(rep.Done, ",") != "a" || strings.Join(rep.Skipped, ",") != "c" {
		t.Errorf("report %+v: want done [a], skipped [c]", rep)
	}

	// Node b's cleanup succeeds: done, c still skipped.
	if _, err := c.CoreV1().Pods(ns).Update(context.Background(), pod("cleanup-b", "b", cl, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	rep, err = AwaitCleanup(ctx2, testConfig(c), "nodedns-cleanup")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Done, ",") != "a,b" || strings.Join(rep.Skipped, ",") != "c" || len(rep.Pending) != 0 {
		t.Errorf("report %+v: want done [a b], skipped [c]", rep)
	}
}

// TestAwaitCleanupIncomplete: until the DaemonSet controller has made a
// pod for every node it targets, the cleanup is not done, even if every
// pod that exists is Ready.
func TestAwaitCleanupIncomplete(t *testing.T) {
	cl := map[string]string{"app.kubernetes.io/component": "cleanup"}
	c := fake.NewClientset(daemonSet("nodedns-cleanup", cl, 2), node("a", true), node("b", true), pod("cleanup-a", "a", cl, true))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := AwaitCleanup(ctx, testConfig(c), "nodedns-cleanup"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a timeout while node b has no cleanup pod", err)
	}
	if _, err := AwaitCleanup(context.Background(), testConfig(c), "missing"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing cleanup DaemonSet: err = %v", err)
	}
}
