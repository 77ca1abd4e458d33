package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// ExecResult is what a command run in a pod printed.
type ExecResult struct {
	Stdout, Stderr string
}

// ExecErr runs cmd in a container of a pod (container empty: the pod's
// first) through the API server, as kubectl exec does, with stdin when not
// nil, for at most timeout. The error names the pod, the command, its exit
// status and the end of its output.
func (c *Cluster) ExecErr(ns, pod, container string, stdin io.Reader, timeout time.Duration, cmd ...string) (ExecResult, error) {
	req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   cmd,
			Stdin:     stdin != nil,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	exe, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec in pod %s/%s: %w", ns, pod, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		return res, fmt.Errorf("in pod %s/%s: %s: %w\nstdout: %s\nstderr: %s", ns, pod, strings.Join(cmd, " "), err, tail(res.Stdout, 10), tail(res.Stderr, 10))
	}
	return res, nil
}

// Exec is ExecErr that fails the test on an error, and returns stdout.
func (c *Cluster) Exec(t testing.TB, ns, pod string, cmd ...string) string {
	t.Helper()
	res, err := c.ExecErr(ns, pod, "", nil, 2*time.Minute, cmd...)
	if err != nil {
		t.Fatal(err)
	}
	return res.Stdout
}

// ExecIn is Exec in a named container.
func (c *Cluster) ExecIn(t testing.TB, ns, pod, container string, cmd ...string) string {
	t.Helper()
	res, err := c.ExecErr(ns, pod, container, nil, 2*time.Minute, cmd...)
	if err != nil {
		t.Fatal(err)
	}
	return res.Stdout
}
