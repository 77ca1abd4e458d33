//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestDocsCommands (step 5c): every shell block docs/install.md and
// docs/troubleshooting.md mark as meant to run on a node or against the
// cluster (docs/testing.md, "Shell blocks of the docs") runs against the
// agent of the shipped manifest: scripts/docs-e2e.sh with this cluster's
// kubeconfig, which then leaves the cluster and the DaemonSet as they are.
func TestDocsCommands(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "scripts", "docs-e2e.sh"))
	cmd.Dir = c.Root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("scripts/docs-e2e.sh: %v; want every marked block of the docs to run:\n%s", err, out.String())
	}
	t.Logf("scripts/docs-e2e.sh:\n%s", out.String())
	ok(t, "the docs' marked shell blocks ran against the shipped manifest's agent")
}
