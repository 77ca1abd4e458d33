//go:build integration

package integration

// stopControlPlane stops the etcd and kube-apiserver started by the tests,
// if any. Replaced by the real control-plane harness.
func stopControlPlane() {}
