package main

import (
	"context"
	"errors"
	"flag"
	"io"

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
	return admin.NewClient(*socket, "", 0).Profile(context.Background(), fs.Arg(0), stdout)
}
