//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/e2e/framework"
)

// TestDelete (step 6): `kubectl delete -f` of the manifest: the link and
// every rule (the fallback's chain too) are gone.
func TestDelete(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	objs := framework.Decode(t, manifest(t, c))
	c.Delete(t, objs, 2*time.Minute)
	framework.WaitFor(t, "the agent's pods gone", 20*time.Second, 200*time.Millisecond, func() (bool, string) {
		l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d agent pods: %v", len(l.Items), podNames(l.Items))
	})
	if framework.LinkExists() {
		t.Fatal("link nodelocaldns still there after delete, want none")
	}
	if n := c.AllRules(t); n != 0 {
		t.Fatalf("%d nodedns rules left after delete, want 0", n)
	}
	ok(t, "the link and every rule are gone")
}

func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}
