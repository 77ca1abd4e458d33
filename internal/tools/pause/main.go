// Command pause is the sandbox ("pause") image's program for the local
// cluster (scripts/cluster.sh): it holds a pod's namespaces open and exits
// on SIGTERM or SIGINT. As PID 1 of the sandbox it also reaps children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
