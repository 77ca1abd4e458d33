package k8s

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// podTemplateHash is the label a Deployment's ReplicaSets put on their
// pods.
const podTemplateHash = appsv1.DefaultDeploymentUniqueLabelKey

// workload names the Deployment behind a ReplicaSet by the pod's template
// hash, and any other controller as it is.
func TestWorkload(t *testing.T) {
	for _, c := range []struct{ kind, name, hash, wantKind, wantName string }{
		{"ReplicaSet", "web-5d9f8c7b6", "5d9f8c7b6", "Deployment", "web"},
		{"ReplicaSet", "web-5d9f8c7b6", "", "ReplicaSet", "web-5d9f8c7b6"},
		{"ReplicaSet", "web-abc", "5d9f8c7b6", "ReplicaSet", "web-abc"},
		{"ReplicaSet", "-5d9f8c7b6", "5d9f8c7b6", "ReplicaSet", "-5d9f8c7b6"},
		{"StatefulSet", "db", "", "StatefulSet", "db"},
		{"DaemonSet", "agent", "x", "DaemonSet", "agent"},
		{"Job", "backup-29012345", "", "Job", "backup-29012345"},
	} {
		if k, n := workload(c.kind, c.name, c.hash); k != c.wantKind || n != c.wantName {
			t.Errorf("workload(%s, %s, %q) = %s/%s, want %s/%s", c.kind, c.name, c.hash, k, n, c.wantKind, c.wantName)
		}
	}
}

// PodOf names the pod of this node that owns an address and its workload;
// other nodes' pods and host-network pods are not this node's clients.
func TestPodOf(t *testing.T) {
	yes := true
	web := testPod("shop", "web-5d9f8c7b6-x2k4p", "node-a", testNow, "10.244.0.21")
	web.Labels = map[string]string{podTemplateHash: "5d9f8c7b6"}
	web.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d9f8c7b6", Controller: &yes}}
	db := testPod("shop", "db-0", "node-a", testNow, "10.244.0.22")
	db.OwnerReferences = []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: &yes}}
	bare := testPod("tools", "debug", "node-a", testNow, "10.244.0.23")
	remote := testPod("shop", "web-5d9f8c7b6-zz", "node-b", testNow, "10.244.1.21")
	host := testPod("kube-system", "proxy", "node-a", testNow, "192.0.2.1")
	host.Spec.HostNetwork = true
	ix, _ := startIndex(t, Config{Zone: "cluster.local", NodeName: "node-a", Logger: quietLogger()},
		ns("shop"), ns("tools"), web, db, bare, remote, host)
	dnstest.WaitFor(t, 5*time.Second, "pods", func() bool { _, ok := ix.PodOf(mustAddr("10.244.0.23")); return ok })
	for _, c := range []struct {
		ip   string
		want PodRef
		ok   bool
	}{
		{"10.244.0.21", PodRef{"shop", "web-5d9f8c7b6-x2k4p", "Deployment", "web"}, true},
		{"::ffff:10.244.0.22", PodRef{"shop", "db-0", "StatefulSet", "db"}, true},
		{"10.244.0.23", PodRef{"tools", "debug", "", ""}, true},
		{"10.244.1.21", PodRef{}, false},
		{"192.0.2.1", PodRef{}, false},
	} {
		if got, ok := ix.PodOf(mustAddr(c.ip)); got != c.want || ok != c.ok {
			t.Errorf("PodOf(%s) = %+v, %v; want %+v, %v", c.ip, got, ok, c.want, c.ok)
		}
	}
}
