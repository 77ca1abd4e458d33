//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/e2e/framework"
)

// TestStatsProbesMetrics (step 5): `nodedns stats` (text and --json)
// through exec; the probes pass; metrics answer on the node.
func TestStatsProbesMetrics(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	pod := c.AgentPod(t)
	text := c.ExecIn(t, ns, pod.Name, "nodedns", "/nodedns", "stats", "--socket", framework.AdminSocket)
	if framework.CountPrefix(text, "Queries") == 0 || framework.CountPrefix(text, "Interception") == 0 {
		t.Fatalf("nodedns stats in %s printed no Queries or Interception section:\n%s", pod.Name, text)
	}
	if lines := strings.Split(text, "\n"); len(lines) >= 3 {
		t.Log(lines[2])
	}
	st := c.Stats(t, pod.Name)
	if synced, _ := st.Value("informers.synced").(bool); !synced {
		t.Fatalf("stats --json of %s: informers.synced %v, want true: %s", pod.Name, st.Value("informers.synced"), st.String(""))
	}
	if p, w := st.Int("intercept.rules_present"), st.Int("intercept.rules_wanted"); p != w {
		t.Fatalf("stats --json of %s: intercept.rules_present %d, want rules_wanted %d: %s", pod.Name, p, w, st.String("intercept"))
	}
	ok(t, "nodedns stats (text) and --json through exec")

	if len(pod.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", pod.Name)
	}
	cs := pod.Status.ContainerStatuses[0]
	if cs.RestartCount != 0 || !framework.PodReady(pod) {
		t.Fatalf("agent pod %s: ready %v, restarts %d, want ready and 0", pod.Name, framework.PodReady(pod), cs.RestartCount)
	}
	// Failed probes after the agent's first 10 s (before, a readiness
	// probe that finds the agent still starting is readiness at work: the
	// supervisor's serving process starts a moment after the container).
	if cs.State.Running == nil {
		t.Fatalf("agent pod %s: container %s not running: %+v", pod.Name, cs.Name, cs.State)
	}
	started := cs.State.Running.StartedAt.Time
	evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=Unhealthy"})
	if err != nil {
		t.Fatalf("events of pod %s: %v", pod.Name, err)
	}
	var late []string
	for _, e := range evs.Items {
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		if at.Truncate(1e9).After(started.Add(10e9)) {
			late = append(late, fmt.Sprintf("%s %s", at.Format("15:04:05"), e.Message))
		}
	}
	if len(late) != 0 {
		t.Fatalf("%d failed probes on %s after its first 10 s (started %s), want 0: %v", len(late), pod.Name, started.Format("15:04:05"), late)
	}
	ok(t, "liveness and readiness probes pass (Ready, 0 restarts, no Unhealthy event after the start)")

	// Metrics listen on the node's address at the pod's named metrics
	// port (deploy/daemonset.yaml), where Prometheus finds them.
	var port int32
	for _, ic := range pod.Spec.InitContainers {
		for _, p := range ic.Ports {
			if p.Name == "metrics" {
				port = p.ContainerPort
			}
		}
	}
	if pod.Status.HostIP == "" || port == 0 {
		t.Fatalf("agent pod %s has no host IP (%q) or no port named metrics (%d)", pod.Name, pod.Status.HostIP, port)
	}
	addr := net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(port)))
	metrics := framework.HTTPGet(t, "http://"+addr+"/metrics")
	n := framework.CountPrefix(metrics, "nodedns_")
	if n == 0 {
		t.Fatalf("metrics on %s hold no nodedns_ series", addr)
	}
	ok(t, "metrics answer on the node at %s (%d nodedns_ samples)", addr, n)
}
