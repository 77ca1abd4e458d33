//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/e2e/framework"
)

const (
	nsA       = "e2e-a"
	nsB       = "e2e-b"
	kubeDNSIP = "fdd5:6e6f:6465:96::a"
	extDomain = framework.ExtDomain
	extV4     = framework.ExtV4
	extV6     = framework.ExtV6
	agentIP   = framework.AgentIP
	ns        = framework.AgentNamespace
)

// manifest is deploy/daemonset.yaml as deployed here: this tree's image,
// the test upstream.
func manifest(t *testing.T, c *framework.Cluster) string {
	t.Helper()
	return c.RenderManifest(t, c.Image(t, "nodedns"), framework.UpstreamIP)
}

// ensureAgent deploys the agent from deploy/daemonset.yaml unless its
// DaemonSet is there, and waits until it is rolled out.
func ensureAgent(t *testing.T, c *framework.Cluster) {
	t.Helper()
	_, err := c.Client.AppsV1().DaemonSets(ns).Get(context.Background(), framework.AgentName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.Apply(t, manifest(t, c))
	} else if err != nil {
		t.Fatalf("DaemonSet %s/%s: %v", ns, framework.AgentName, err)
	}
	c.WaitDaemonSet(t, ns, framework.AgentName, 2*time.Minute)
}

// rulesWanted: 16 rules for 169.254.20.10 and, when the agent's local-ip
// holds it, 10 for the kube-dns ClusterIP.
func rulesWanted(t *testing.T, c *framework.Cluster) map[string]int {
	t.Helper()
	want := map[string]int{agentIP: framework.RulesWithFallback}
	if strings.Contains(c.AgentConfig(t), `"`+kubeDNSIP+`"`) {
		want[kubeDNSIP] = framework.RulesPerIP
	}
	return want
}

func workloads(client string) string {
	return strings.NewReplacer("NS_A", nsA, "NS_B", nsB, "CLIENT", client, "EXT_DOMAIN", extDomain).Replace(`
apiVersion: v1
kind: Namespace
metadata: {name: NS_A}
---
apiVersion: v1
kind: Namespace
metadata: {name: NS_B}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: NS_A}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: web, image: CLIENT, imagePullPolicy: Never, ports: [{name: http, containerPort: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: NS_A}
spec:
  ipFamilyPolicy: RequireDualStack
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: NS_A}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: NS_A}
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: db, image: CLIENT, imagePullPolicy: Never, ports: [{name: pg, containerPort: 5432}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: NS_B}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: api, image: CLIENT, imagePullPolicy: Never}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: NS_B}
spec:
  ipFamilyPolicy: RequireDualStack
  selector: {app: api}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: NS_B}
spec:
  type: ExternalName
  externalName: api.EXT_DOMAIN
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: NS_A}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: CLIENT, imagePullPolicy: Never}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: NS_B}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: CLIENT, imagePullPolicy: Never}
`)
}

// ensureWorkloads applies the workloads (a Deployment behind a dual-stack
// ClusterIP Service, a StatefulSet behind a headless Service, an
// ExternalName Service, a client pod in each of two namespaces) and waits
// until they are ready.
func ensureWorkloads(t *testing.T, c *framework.Cluster) {
	t.Helper()
	c.Apply(t, workloads(c.Image(t, "client")))
	c.WaitDeployment(t, nsA, "web", 2*time.Minute)
	c.WaitStatefulSet(t, nsA, "db", 2*time.Minute)
	c.WaitDeployment(t, nsB, "api", 2*time.Minute)
	c.WaitPod(t, nsA, "client", 2*time.Minute)
	c.WaitPod(t, nsB, "client", 2*time.Minute)
}

func kubeDNS(central, client, nodeIP4 string) string {
	return strings.NewReplacer("CENTRAL", central, "CLIENT", client, "NODE_IP4", nodeIP4, "KUBE_DNS_IP", kubeDNSIP, "NS_A", nsA).Replace(`
apiVersion: v1
kind: ServiceAccount
metadata: {name: central-dns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-central-dns}
rules:
- {apiGroups: [""], resources: [services, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-central-dns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-central-dns}
subjects: [{kind: ServiceAccount, name: central-dns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: central-dns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            fallthrough in-addr.arpa ip6.arpa
        }
        forward . NODE_IP4
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: central-dns, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: central-dns
      terminationGracePeriodSeconds: 1
      dnsPolicy: Default
      containers:
      - name: dns
        image: CENTRAL
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports: [{name: dns, containerPort: 53, protocol: UDP}, {name: dns-tcp, containerPort: 53, protocol: TCP}]
        volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: central-dns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: KUBE_DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: dns}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: v1
kind: Pod
metadata: {name: legacy-client, namespace: NS_A}
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: None
  dnsConfig:
    nameservers: ["KUBE_DNS_IP"]
    searches: ["NS_A.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    options: [{name: ndots, value: "5"}]
  containers:
  - {name: client, image: CLIENT, imagePullPolicy: Never}
`)
}

// ensureKubeDNS: the cluster's central DNS (CoreDNS behind the kube-dns
// Service, the fallback's target), kube-proxy load-balancing its ClusterIP,
// a client pod whose only nameserver is that ClusterIP, and the ClusterIP
// in the agent's local-ip (a rolling restart when it was not: local-ip
// takes a restart, as an operator would do it).
func ensureKubeDNS(t *testing.T, c *framework.Cluster) {
	t.Helper()
	ensureAgent(t, c)
	c.Apply(t, kubeDNS(c.Image(t, "coredns"), c.Image(t, "client"), c.Env["NODE_IP4"]))
	c.WaitDeployment(t, ns, "central-dns", 2*time.Minute)
	c.WaitPod(t, nsA, "legacy-client", 2*time.Minute)
	framework.WaitFor(t, fmt.Sprintf("kube-proxy (%s mode) DNATs %s to the kube-dns endpoints", c.ProxyMode, kubeDNSIP), 10*time.Second, 200*time.Millisecond, func() (bool, string) {
		return c.KubeProxyDNAT(kubeDNSIP)
	})
	if c.ConfigLine(t, [2]string{"local-ip", fmt.Sprintf(`["%s", "%s"]`, agentIP, kubeDNSIP)}) {
		if !strings.Contains(c.AgentConfig(t), `"`+kubeDNSIP+`"`) {
			t.Fatalf("local-ip not updated in ConfigMap %s/nodedns: %s", ns, c.AgentConfig(t))
		}
		c.RolloutRestart(t, ns, framework.AgentName)
		c.WaitDaemonSet(t, ns, framework.AgentName, 2*time.Minute)
	}
}
