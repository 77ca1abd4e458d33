package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/internal/uninstall"
	"github.com/nodedns/nodedns/pkg/k8s"
)

// uninstallCmd is `nodedns uninstall stop-agents|await-cleanup`: the
// cluster-wide steps of the Helm chart's pre-delete hooks (internal/uninstall
// says why they are split so).
func uninstallCmd(args []string, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "stop-agents" && args[0] != "await-cleanup") {
		return errors.New("want a step: stop-agents (delete the agents' DaemonSet, wait for its pods to exit) or await-cleanup (wait for the cleanup DaemonSet on every Ready node)")
	}
	step := args[0]
	fs := flag.NewFlagSet("uninstall "+step, flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: the in-cluster config)")
	namespace := fs.String("namespace", "kube-system", "namespace of the DaemonSet")
	name := fs.String("daemonset", "", "the agents' DaemonSet (stop-agents) or the cleanup DaemonSet (await-cleanup)")
	selector := fs.String("selector", "", "stop-agents: label selector of the agents' pods (kubectl -l syntax)")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after this long, naming the nodes not done")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *name == "":
		return errors.New("--daemonset is required")
	case step == "stop-agents" && *selector == "":
		return errors.New("--selector is required (the agents' pod labels)")
	case *timeout <= 0:
		return fmt.Errorf("--timeout %s: want a positive duration", *timeout)
	}
	log, _, err := newLogger(*level, *format, stderr)
	if err != nil {
		return err
	}
	rc, err := k8s.RESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	if rc == nil {
		return errors.New("no --kubeconfig and not running in a pod")
	}
	rc.UserAgent = "nodedns-uninstall/" + version
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating Kubernetes client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("--timeout %s reached", *timeout))
	defer cancel()
	cfg := uninstall.Config{Client: client, Namespace: *namespace, Logger: log}
	if step == "stop-agents" {
		return uninstall.StopAgents(ctx, cfg, *name, *selector)
	}
	_, err = uninstall.AwaitCleanup(ctx, cfg, *name)
	return err
}
