package deploy

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/pkg/config"
)

// TestChartNetworkModes renders the chart in both network modes: host is
// the host-network DaemonSet with its link, rules and uninstall hooks and
// no Cilium objects; pod is the DaemonSet in the pod network (ports dns and
// dns-tcp, httpGet probes on the pod's IP, no NET_ADMIN, no host mounts,
// no hooks) and the CiliumLocalRedirectPolicy objects, and its agent
// configuration loads in pod mode.
func TestChartNetworkModes(t *testing.T) {
	t.Run("host", func(t *testing.T) {
		text, err := render(t, "--set", "networkMode=host")
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(t, text)
		ds := find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns")
		if !ds.Spec.Template.Spec.HostNetwork {
			t.Error("host mode: hostNetwork false")
		}
		if k := kinds(objs); slices.ContainsFunc(k, func(s string) bool { return strings.HasPrefix(s, "CiliumLocalRedirectPolicy/") }) {
			t.Errorf("host mode renders Cilium policies: %v", k)
		}
		if _, ok := agentConfig(t, objs)["network-mode"]; ok {
			t.Error("host mode writes network-mode (the default)")
		}
	})
	t.Run("pod", func(t *testing.T) {
		text, err := render(t, "-f", chart+"/ci/pod-values.yaml")
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(t, text)
		want := []string{
			"CiliumLocalRedirectPolicy/nodedns-169-254-20-10", "CiliumLocalRedirectPolicy/nodedns-kube-dns",
			"ClusterRole/nodedns", "ClusterRoleBinding/nodedns", "ConfigMap/nodedns", "DaemonSet/nodedns",
			"PodMonitor/nodedns", "Service/kube-dns-upstream", "ServiceAccount/nodedns",
		}
		if got := kinds(objs); !slices.Equal(got, want) {
			t.Errorf("objects %v, want %v (no uninstall hooks: nothing on the nodes to clean)", got, want)
		}
		ds := find[appsv1.DaemonSet](t, objs, "DaemonSet", "nodedns")
		ps := ds.Spec.Template.Spec
		if ps.HostNetwork || ps.DNSPolicy != corev1.DNSDefault {
			t.Errorf("hostNetwork %v dnsPolicy %s, want false and Default (the node's resolvers)", ps.HostNetwork, ps.DNSPolicy)
		}
		if len(ps.InitContainers) != 0 {
			t.Errorf("init containers %v: the metrics-port trick is host mode's", ps.InitContainers)
		}
		for _, v := range ps.Volumes {
			if v.HostPath != nil {
				t.Errorf("volume %s mounts the host's %s", v.Name, v.HostPath.Path)
			}
		}
		c := ps.Containers[0]
		ports := map[string]string{}
		for _, p := range c.Ports {
			ports[p.Name] = fmt.Sprintf("%d/%s", p.ContainerPort, p.Protocol)
			if p.HostPort != 0 {
				t.Errorf("port %s has hostPort %d", p.Name, p.HostPort)
			}
		}
		if ports["dns"] != "53/UDP" || ports["dns-tcp"] != "53/TCP" || ports["metrics"] != "9253/TCP" {
			t.Errorf("ports %v", ports)
		}
		if caps := c.SecurityContext.Capabilities; fmt.Sprint(caps.Add) != "[NET_BIND_SERVICE]" || fmt.Sprint(caps.Drop) != "[ALL]" || *c.SecurityContext.Privileged {
			t.Errorf("capabilities %+v", caps)
		}
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 9253 || p.HTTPGet.Host != "" {
				t.Errorf("%s probe %+v: want httpGet on the pod's IP, port 9253", name, p.ProbeHandler)
			}
		}
		// A supervised restart must not drop the pod from the redirect;
		// SIGTERM's not-ready must show within the lameduck.
		if rp := c.ReadinessProbe; rp.PeriodSeconds != 1 || rp.FailureThreshold != 3 {
			t.Errorf("readiness probe every %d s, %d failures: want 1 s and 3", rp.PeriodSeconds, rp.FailureThreshold)
		}
		if c.ReadinessProbe.HTTPGet.Path != "/ready" || c.LivenessProbe.HTTPGet.Path != "/health" {
			t.Errorf("probe paths %s %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if env["POD_IPS"] != "status.podIPs" || env["POD_IP"] != "status.podIP" || env["HOST_IP"] != "" {
			t.Errorf("env %v", env)
		}
		if !slices.Contains(c.Args, "--admin=[$(POD_IP)]:9253") || !slices.Contains(c.Args, "--cluster-dns=$(KUBE_DNS_UPSTREAM_SERVICE_HOST)") {
			t.Errorf("args %q", c.Args)
		}

		cfg := agentConfig(t, objs)
		if cfg["network-mode"] != "pod" || fmt.Sprint(cfg["local-ip"]) != "[169.254.20.10 10.96.0.10]" {
			t.Errorf("config network-mode %v local-ip %v", cfg["network-mode"], cfg["local-ip"])
		}
		// The file loads in pod mode, with the pod's addresses as the
		// downward API gives them and the flags the DaemonSet adds.
		cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "nodedns")
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("POD_IPS", "169.254.64.7,fdd5:6e6f:6465::7")
		t.Setenv("NODE_NAME", "node-1")
		loaded, err := config.Load([]string{"--config=" + path, "--admin=[169.254.64.7]:9253", "--cluster-dns=169.254.128.11", "--kube-dns-config="}, io.Discard)
		if err != nil {
			t.Fatalf("the rendered config does not load: %v", err)
		}
		if !loaded.PodMode() || fmt.Sprint(loaded.ListenAddrs()) != "[169.254.64.7:53 [fdd5:6e6f:6465::7]:53]" {
			t.Errorf("loaded: pod mode %v, listen %v", loaded.PodMode(), loaded.ListenAddrs())
		}

		// The policies: the backends are the agent's pods, on ports named
		// as the kube-dns Service's; skipRedirectFromBackend from 1.16.
		sel := ds.Spec.Selector.MatchLabels
		for _, name := range []string{"nodedns-kube-dns", "nodedns-169-254-20-10"} {
			lrp := find[unstructured.Unstructured](t, objs, "CiliumLocalRedirectPolicy", name)
			if lrp.GetAPIVersion() != "cilium.io/v2" || lrp.GetNamespace() != "kube-system" {
				t.Errorf("%s: %s in %s", name, lrp.GetAPIVersion(), lrp.GetNamespace())
			}
			got, _, _ := unstructured.NestedStringMap(lrp.Object, "spec", "redirectBackend", "localEndpointSelector", "matchLabels")
			if fmt.Sprint(got) != fmt.Sprint(sel) {
				t.Errorf("%s: backend selector %v, want the DaemonSet's %v", name, got, sel)
			}
			bp, _, _ := unstructured.NestedSlice(lrp.Object, "spec", "redirectBackend", "toPorts")
			if s := fmt.Sprint(bp); !strings.Contains(s, "name:dns ") || !strings.Contains(s, "name:dns-tcp") {
				t.Errorf("%s: backend ports %v", name, bp)
			}
			if skip, ok, _ := unstructured.NestedBool(lrp.Object, "spec", "skipRedirectFromBackend"); !ok || !skip {
				t.Errorf("%s: skipRedirectFromBackend %v (set %v), want true on Cilium 1.16", name, skip, ok)
			}
		}
		svc := find[unstructured.Unstructured](t, objs, "CiliumLocalRedirectPolicy", "nodedns-kube-dns")
		if sm, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "redirectFrontend", "serviceMatcher"); sm["serviceName"] != "kube-dns" || sm["namespace"] != "kube-system" {
			t.Errorf("serviceMatcher %v", sm)
		}
		addr := find[unstructured.Unstructured](t, objs, "CiliumLocalRedirectPolicy", "nodedns-169-254-20-10")
		if ip, _, _ := unstructured.NestedString(addr.Object, "spec", "redirectFrontend", "addressMatcher", "ip"); ip != "169.254.20.10" {
			t.Errorf("addressMatcher ip %q", ip)
		}
		// The ClusterIP is the serviceMatcher's: no addressMatcher for it.
		for _, o := range objs {
			if b, _ := yaml.Marshal(o.Object); o.GetKind() == "CiliumLocalRedirectPolicy" && strings.Contains(string(b), "ip: 10.96.0.10") {
				t.Errorf("%s: an addressMatcher for the kube-dns ClusterIP", o.GetName())
			}
		}
	})
	t.Run("pod, Cilium 1.15", func(t *testing.T) {
		text, err := render(t, "--set", "networkMode=pod,cilium.version=1.15")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objects(t, text) {
			if o.GetKind() != "CiliumLocalRedirectPolicy" {
				continue
			}
			if _, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "skipRedirectFromBackend"); ok {
				t.Errorf("%s: skipRedirectFromBackend on Cilium 1.15, whose CRD lacks it", o.GetName())
			}
		}
	})
	t.Run("pod, no policies", func(t *testing.T) {
		text, err := render(t, "--set", "networkMode=pod,cilium.localRedirectPolicy.create=false")
		if err != nil {
			t.Fatal(err)
		}
		if k := kinds(objects(t, text)); slices.ContainsFunc(k, func(s string) bool { return strings.HasPrefix(s, "CiliumLocalRedirectPolicy/") }) {
			t.Errorf("policies rendered with create=false: %v", k)
		}
	})
}

// TestChartNetworkModeRefuses: what cannot work in pod mode fails at
// render time, naming the value.
func TestChartNetworkModeRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "networkMode=pod", "--namespace", "dns", "--set", "kubeDNS.upstreamService.clusterIP=10.96.0.11"}, "the release namespace dns is not kubeDNS.namespace kube-system"},
		{[]string{"--set", "networkMode=pod,config.network-mode=host"}, "config.network-mode host contradicts networkMode pod"},
		{[]string{"--set", "config.network-mode=pod"}, "config.network-mode pod: set networkMode"},
		{[]string{"--set", "networkMode=pod,kubeDNS.clusterIP=10.96.0.10,config.cluster-dns=10.96.0.10"}, "config.cluster-dns 10.96.0.10 is the kube-dns ClusterIP"},
		{[]string{"--set", "networkMode=bridge"}, "/networkMode"},
		{[]string{"--set", "networkMode=pod,cilium.version=latest"}, "/cilium/version"},
	} {
		_, err := render(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.want)
		}
	}
}
