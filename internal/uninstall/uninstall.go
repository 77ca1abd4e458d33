// Package uninstall owns the cluster-wide half of removing nodedns, the
// part the Helm chart's pre-delete hooks run (`nodedns uninstall`): stop
// every agent gracefully, then wait until a `nodedns cleanup` pod has run
// on every node.
//
// A Job runs in one pod on one node, so it cannot remove the link and
// rules of the other nodes itself. The chart splits the work:
//
//  1. StopAgents (a Job): delete the agents' DaemonSet and wait until its
//     pods are gone. Each agent removes its own link and rules on SIGTERM.
//  2. A DaemonSet of `nodedns cleanup` pods (a hook object, created by
//     Helm with the release's credentials): on each node an init container
//     waits until no process serves the local IPs any more, then removes
//     whatever a killed or crash-looping agent left; the pod then turns
//     Ready and idles.
//  3. AwaitCleanup (a second Job): wait until that DaemonSet has a Ready
//     pod on every node that is Ready, and report the others.
//
// The Jobs therefore need no right to create pods: only to delete one
// DaemonSet and read pods, DaemonSets and nodes.
//
// Limits, said plainly: a node that is not Ready cannot be reached. Its
// agent is not stopped gracefully and no cleanup runs there; both
// functions skip such nodes with a warning naming them (their link and
// rules stay until `nodedns cleanup` is run on them, or they are
// rebooted: nothing of it survives a reboot). Waiting is bounded by the
// caller's context.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Config says where the DaemonSets are and how to talk to the cluster.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// Poll is how often state is read again; default 2s.
	Poll   time.Duration
	Logger *slog.Logger
}

func (c Config) normalized() (Config, error) {
	if c.Client == nil {
		return c, errors.New("uninstall: no Kubernetes client")
	}
	if c.Namespace == "" {
		return c, errors.New("uninstall: no namespace")
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", "uninstall")
	return c, nil
}

// StopAgents deletes the DaemonSet name (the pods are deleted by the
// garbage collector, gracefully: each agent tears its interception down
// on SIGTERM) and waits until no pod matching selector is left, other than
// pods on nodes that are not Ready, which are reported and skipped. A
// DaemonSet already gone is not an error: its pods are still waited for.
func StopAgents(ctx context.Context, cfg Config, name, selector string) error {
	cfg, err := cfg.normalized()
	if err != nil {
		return err
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return fmt.Errorf("agent pod selector %q: %w", selector, err)
	}
	log := cfg.Logger.With("daemonset", cfg.Namespace+"/"+name)
	bg := metav1.DeletePropagationBackground
	err = cfg.Client.AppsV1().DaemonSets(cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	switch {
	case apierrors.IsNotFound(err):
		log.Info("agent DaemonSet already gone; waiting for any pod of it still terminating")
	case err != nil:
		return fmt.Errorf("deleting DaemonSet %s/%s: %w", cfg.Namespace, name, err)
	default:
		log.Info("deleted the agent DaemonSet; its pods stop gracefully and remove their link and rules")
	}
	var last string
	for {
		pods, err := cfg.Client.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return fmt.Errorf("listing agent pods (%s): %w", sel, err)
		}
		ready, err := readyNodes(ctx, cfg)
		if err != nil {
			return err
		}
		var waiting, skipped []string
		for _, p := range pods.Items {
			switch {
			case p.Spec.NodeName != "" && !ready[p.Spec.NodeName]:
				skipped = append(skipped, p.Name+" on "+p.Spec.NodeName)
			default:
				waiting = append(waiting, podWhere(&p))
			}
		}
		if len(waiting) == 0 {
			if len(skipped) > 0 {
				log.Warn("agents on nodes that are not Ready were not stopped; run `nodedns cleanup` there when they return", "pods", skipped)
			}
			log.Info("every agent has stopped")
			return nil
		}
		if s := strings.Join(waiting, ", "); s != last {
			log.Info("waiting for agents to stop", "pods", len(waiting), "left", abbreviate(waiting))
			last = s
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agents still running: %s: %w", abbreviate(waiting), context.Cause(ctx))
		case <-time.After(cfg.Poll):
		}
	}
}

// Report is what AwaitCleanup saw last.
type Report struct {
	// Done lists the nodes whose cleanup pod is Ready.
	Done []string
	// Skipped lists nodes that are not Ready (no cleanup could run).
	Skipped []string
	// Pending maps a Ready node whose cleanup has not finished to why
	// (the cleanup container's last error, or the pod's state).
	Pending map[string]string
}

// AwaitCleanup waits until the cleanup DaemonSet name has scheduled a pod
// for every node it targets and every such pod on a Ready node is Ready
// (its init container, `nodedns cleanup`, has succeeded). Nodes that are
// not Ready are reported in Skipped. On timeout the error names the
// pending nodes and why.
func AwaitCleanup(ctx context.Context, cfg Config, name string) (Report, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return Report{}, err
	}
	log := cfg.Logger.With("daemonset", cfg.Namespace+"/"+name)
	var last string
	for {
		rep, complete, err := cleanupState(ctx, cfg, name)
		if err != nil {
			return rep, err
		}
		if complete && len(rep.Pending) == 0 {
			if len(rep.Skipped) > 0 {
				log.Warn("no cleanup on nodes that are not Ready; run `nodedns cleanup` there when they return", "nodes", rep.Skipped)
			}
			log.Info("cleanup done on every Ready node", "nodes", len(rep.Done))
			return rep, nil
		}
		if s := fmt.Sprint(rep.Pending, complete); s != last {
			log.Info("waiting for cleanup", "done", len(rep.Done), "pending", pendingList(rep.Pending))
			last = s
		}
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("cleanup not finished on %d node(s): %s: %w", len(rep.Pending), pendingList(rep.Pending), context.Cause(ctx))
		case <-time.After(cfg.Poll):
		}
	}
}

// cleanupState reads the cleanup DaemonSet and its pods once. complete is
// false while the DaemonSet controller has not yet made a pod for every
// node it targets.
func cleanupState(ctx context.Context, cfg Config, name string) (rep Report, complete bool, err error) {
	ds, err := cfg.Client.AppsV1().DaemonSets(cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return rep, false, fmt.Errorf("reading the cleanup DaemonSet %s/%s: %w", cfg.Namespace, name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return rep, false, fmt.Errorf("cleanup DaemonSet %s/%s selector: %w", cfg.Namespace, name, err)
	}
	pods, err := cfg.Client.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return rep, false, fmt.Errorf("listing cleanup pods (%s): %w", sel, err)
	}
	ready, err := readyNodes(ctx, cfg)
	if err != nil {
		return rep, false, err
	}
	rep.Pending = map[string]string{}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		n := p.Spec.NodeName
		seen[n] = true
		switch {
		case podReady(&p):
			rep.Done = append(rep.Done, n)
		case !ready[n]:
			rep.Skipped = append(rep.Skipped, n)
		default:
			rep.Pending[n] = why(&p)
		}
	}
	slices.Sort(rep.Done)
	slices.Sort(rep.Skipped)
	st := ds.Status
	complete = st.ObservedGeneration >= ds.Generation && int(st.DesiredNumberScheduled) <= len(seen)
	return rep, complete, nil
}

// readyNodes returns the names of the nodes whose Ready condition is True.
func readyNodes(ctx context.Context, cfg Config) (map[string]bool, error) {
	nodes, err := cfg.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make(map[string]bool, len(nodes.Items))
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				out[n.Name] = true
			}
		}
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// why describes why a cleanup pod is not Ready: its init container's last
// failure (the termination message is the cleanup's error), or the state
// it waits in.
func why(p *corev1.Pod) string {
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if t := s.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("%s exited %d: %s", s.Name, t.ExitCode, oneLine(t.Message, t.Reason))
		}
		if t := s.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("%s exited %d: %s", s.Name, t.ExitCode, oneLine(t.Message, t.Reason))
		}
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("%s %s: %s", s.Name, w.Reason, oneLine(w.Message, ""))
		}
		if s.State.Running != nil && !s.Ready {
			return s.Name + " running (waiting for the node's agent to exit)"
		}
	}
	return "pod " + string(p.Status.Phase)
}

func oneLine(msg, fallback string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return fallback
	}
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:] // the last line says what failed
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return msg
}

func podWhere(p *corev1.Pod) string {
	if p.Spec.NodeName == "" {
		return p.Name + " (unscheduled)"
	}
	return p.Name + " on " + p.Spec.NodeName
}

// abbreviate lists at most 10 items, then how many more.
func abbreviate(items []string) string {
	if len(items) <= 10 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:10], ", "), len(items)-10)
}

func pendingList(p map[string]string) string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(p)) {
		out = append(out, n+" ("+p[n]+")")
	}
	return abbreviate(out)
}
