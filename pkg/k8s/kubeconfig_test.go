package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A kubeconfig with two contexts: the current one points at a port nobody
// listens on, the named one at the cluster.
const twoContexts = `apiVersion: v1
kind: Config
current-context: stale
clusters:
- name: old
  cluster: {server: "https://127.0.0.1:1"}
- name: prod
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: stale
  context: {cluster: old, user: u}
- name: prod-admin
  context: {cluster: prod, user: u, namespace: kube-system}
`

func TestRESTConfigContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(twoContexts), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ctx, host, err string
	}{
		{"", "https://127.0.0.1:1", ""},
		{"stale", "https://127.0.0.1:1", ""},
		{"prod-admin", "https://127.0.0.1:6443", ""},
		{"nope", "", `context "nope"`},
	} {
		rc, err := RESTConfigContext(path, tc.ctx)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("context %q: error %v, want one naming %s", tc.ctx, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("context %q: %v", tc.ctx, err)
		}
		if rc.Host != tc.host || rc.BearerToken != "secret" || rc.ContentType != "application/vnd.kubernetes.protobuf" {
			t.Errorf("context %q: host %q token %q content %q, want host %q", tc.ctx, rc.Host, rc.BearerToken, rc.ContentType, tc.host)
		}
	}
	if _, err := RESTConfigContext("", "prod-admin"); err == nil {
		t.Error("a context without a kubeconfig: no error")
	}
}
