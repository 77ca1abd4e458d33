package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nodedns/nodedns/pkg/observe/admin"
)

// probe is `nodedns probe health|ready`: exit 0 when the agent says so. The
// DaemonSet's liveness and readiness probes run it through the pod's own
// admin socket.
func probe(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the agent's admin unix socket (preferred inside the pod)")
	addr := fs.String("admin", "127.0.0.1:9253", "the agent's admin address, when no --socket")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	what := fs.Arg(0)
	if what != "health" && what != "ready" || fs.NArg() != 1 {
		return fmt.Errorf("want exactly one of: health, ready")
	}
	body, err := admin.NewClient(*socket, *addr, *timeout).Probe(context.Background(), what)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, body)
	return nil
}
