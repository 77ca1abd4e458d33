package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/observe/admin"
)

// pprofCmd is `nodedns pprof [--socket S] WHAT`: it fetches
// /debug/pprof/WHAT from the agent's admin socket (served with --pprof)
// and writes it to stdout, so that
//
//	kubectl exec POD -- /nodedns pprof --socket /run/nodedns/admin.sock 'profile?seconds=30' > cpu.pprof
//
// works without curl in the image.
func pprofCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pprof", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "/run/nodedns/admin.sock", "the agent's admin unix socket (pprof is served there only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one profile, such as profile?seconds=30, heap, allocs, goroutine?debug=2, block, mutex or trace?seconds=5")
	}
	what := strings.TrimPrefix(fs.Arg(0), "/debug/pprof/")
	u, err := url.Parse("http://nodedns/debug/pprof/" + what)
	if err != nil {
		return fmt.Errorf("profile %q: %w", what, err)
	}
	timeout := 30 * time.Second
	if s, err := strconv.Atoi(u.Query().Get("seconds")); err == nil && s > 0 {
		timeout += time.Duration(s) * time.Second
	}
	c, _ := admin.NewClient(*socket, "", timeout)
	resp, err := c.Get(u.String())
	if err != nil {
		return fmt.Errorf("no agent answering on %s: %w", *socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%s: 404: is the agent running with --pprof? %s", u.Path, strings.TrimSpace(string(body)))
		}
		return fmt.Errorf("%s: %s: %s", u.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		return fmt.Errorf("reading %s: %w", u.Path, err)
	}
	return nil
}
