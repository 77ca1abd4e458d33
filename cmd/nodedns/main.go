// Command nodedns is the node-local caching DNS agent for Kubernetes.
//
//	nodedns serve [flags]     run the agent
//	nodedns stats [flags]     print the local agent's figures
//	nodedns cleanup [flags]   remove the link and rules (uninstall)
//	nodedns config validate FILE | print [flags]  check or show a configuration
//	nodedns probe health|ready  liveness/readiness check for kubelet
//	nodedns migrate [flags]   print a nodedns config equivalent to a Corefile
//	nodedns uninstall stop-agents|await-cleanup  the Helm chart's uninstall hooks
//	nodedns pprof WHAT        a Go profile from the agent's admin socket
//	nodedns version           print the version
//
// main parses the command line, builds the configuration and calls the
// packages: the behaviour lives in pkg/ (and, for code only the commands
// use, internal/).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/nodedns/nodedns/pkg/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:], stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "stats":
		err = stats(args[1:], stdout, stderr)
	case "cleanup":
		err = cleanup(args[1:], stderr)
	case "probe":
		err = probe(args[1:], stdout, stderr)
	case "config":
		err = config.Command(args[1:], stdout, stderr)
	case "migrate":
		err = migrateCmd(args[1:], stdout, stderr)
	case "uninstall":
		err = uninstallCmd(args[1:], stderr)
	case "pprof":
		err = pprofCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "nodedns: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errReported) || errors.Is(err, config.ErrInvalid) {
		return 1
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "nodedns %s: %v\n", args[0], ee.err)
		}
		return ee.code
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodedns %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: nodedns <command> [flags]

commands:
  serve     run the node-local DNS agent
  stats     print the local agent's figures (reads its /stats)
  cleanup   remove the link and iptables rules the agent installs
  probe     exit 0 when the agent is healthy/ready (probe health|ready)
  config    check a config file (config validate FILE) or print the
            effective configuration (config print [serve flags])
  migrate   print a nodedns config equivalent to a CoreDNS Corefile
  uninstall the Helm chart's uninstall steps (stop-agents, await-cleanup)
  pprof     fetch a Go profile from the agent's admin socket (needs serve --pprof)
  version   print the version

Run 'nodedns <command> -h' for the command's flags.
`)
}

func versionString() string {
	v := version
	if r := revision(); len(r) >= 12 {
		v += " (" + r[:12] + ")"
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return fmt.Sprintf("nodedns %s %s", v, bi.GoVersion)
	}
	return "nodedns " + v
}

// revision is the VCS revision the binary was built from, if known.
func revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}
