//go:build integration

package integration

// How deploy/daemonset.yaml exposes metrics, so that Prometheus finds
// every node's agent: on the node's IP
// (the downward API's status.hostIP) at port 9253, through --admin; a
// named `metrics` port for discovery that cannot stall a rolling update;
// prometheus.io annotations. Called from the DaemonSet checks of
// deploy_test.go, on the objects the API server stored and admitted.

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const metricsPort = 9253

// checkMetricsExposure checks the DaemonSet's template.
func checkMetricsExposure(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	tmpl := ds.Spec.Template
	for k, want := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9253", "prometheus.io/path": "/metrics"} {
		if got := tmpl.Annotations[k]; got != want {
			t.Errorf("pod annotation %s = %q, want %q", k, got, want)
		}
	}
	c := tmpl.Spec.Containers[0]
	hostIP := false
	for _, e := range c.Env {
		hostIP = hostIP || (e.Name == "HOST_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP")
	}
	if !hostIP {
		t.Error("HOST_IP does not come from the downward API (status.hostIP)")
	}
	if !slices.Contains(c.Args, "--admin=[$(HOST_IP)]:9253") {
		t.Errorf("args %q: want --admin=[$(HOST_IP)]:9253 (metrics and probes on the node's address)", c.Args)
	}

	// The named port lives on an init container that is not a sidecar:
	// the scheduler and kubelet count the host ports of containers and of
	// restartPolicy: Always init containers only, so it cannot keep the
	// surge pod of a rollout off its node.
	found := false
	for _, ic := range tmpl.Spec.InitContainers {
		for _, p := range ic.Ports {
			if p.Name != "metrics" {
				continue
			}
			found = true
			if p.ContainerPort != metricsPort || p.Protocol != corev1.ProtocolTCP {
				t.Errorf("port metrics on %s: %d/%s, want %d/TCP", ic.Name, p.ContainerPort, p.Protocol, metricsPort)
			}
			if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				t.Errorf("init container %s is a sidecar: its port would count as a hostPort for scheduling", ic.Name)
			}
		}
	}
	if !found {
		t.Error("no port named metrics on an init container")
	}
}

// checkMetricsPortPod checks a pod the API server admitted from the
// template: it gave the init container's port a hostPort (every declared
// port of a host-network pod gets one) and none to the agent's container,
// so the only host port is one the scheduler ignores.
func checkMetricsPortPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	var hostPorts []string
	for _, ic := range pod.Spec.InitContainers {
		for _, p := range ic.Ports {
			if p.HostPort != 0 {
				hostPorts = append(hostPorts, ic.Name+":"+p.Name)
			}
		}
	}
	if !slices.Contains(hostPorts, "metrics-port:metrics") {
		t.Logf("host ports on init containers: %s (the API server no longer defaults them?)", strings.Join(hostPorts, ", "))
	}
	for _, c := range pod.Spec.Containers {
		if len(c.Ports) != 0 {
			t.Errorf("container %s declares ports %v: on a host-network pod they become host ports that stall rollouts", c.Name, c.Ports)
		}
	}
}
