package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
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
	c, base := admin.NewClient(*socket, *addr, *timeout)
	resp, err := c.Get(base + "/" + what)
	if err != nil {
		return fmt.Errorf("no agent answering: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, strings.TrimSpace(string(body)))
	}
	fmt.Fprint(stdout, string(body))
	return nil
}
