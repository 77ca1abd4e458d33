package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/pkg/observe/admin"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
)

type statsOptions struct {
	admin, socket string
	json, watch   bool
	// namespace: the report of one namespace; searchPath: the search-path
	// report, instead of the whole report.
	namespace  string
	searchPath bool
	interval   time.Duration
	timeout    time.Duration
	count      int
}

// stats is `nodedns stats`: read the agent's /stats and print a report
// (or the raw document with --json); --watch refreshes until interrupted.
// It needs nothing but this binary, so it works through `kubectl exec` in
// the agent's pod.
func stats(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runStats(ctx, args, stdout, stderr)
}

func parseStatsFlags(args []string, stderr io.Writer) (statsOptions, error) {
	var o statsOptions
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.admin, "admin", "127.0.0.1:9253", "the agent's admin address (ip:port)")
	fs.StringVar(&o.socket, "socket", "", "the agent's admin unix socket instead of --admin (inside the pod it reaches this pod's agent even while two agents share the port during a rollout)")
	fs.BoolVar(&o.json, "json", false, "print the raw /stats document (with --namespace or --search-path, that part of it)")
	fs.StringVar(&o.namespace, "namespace", "", "the report of one namespace: its figures, busiest pods and most-failing names ("+metrics.NamespaceOther+" and "+metrics.NamespaceNonPod+" too)")
	fs.BoolVar(&o.searchPath, "search-path", false, "the search-path report: the workloads whose pods walk their search list, what they ask, what each lookup costs and what would fix it")
	fs.BoolVar(&o.watch, "watch", false, "refresh every --interval until interrupted")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "refresh interval with --watch")
	fs.IntVar(&o.count, "count", 0, "with --watch, stop after this many reports (0: until interrupted)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Second, "how long to wait for the agent's answer")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.timeout <= 0:
		return o, fmt.Errorf("--timeout %s: want a positive duration", o.timeout)
	case o.watch && o.interval <= 0:
		return o, fmt.Errorf("--interval %s: want a positive duration", o.interval)
	case o.count < 0:
		return o, fmt.Errorf("--count %d: want 0 or more", o.count)
	case o.socket == "" && o.admin == "":
		return o, errors.New("--admin is empty and no --socket")
	case o.namespace != "" && o.searchPath:
		return o, errors.New("--namespace and --search-path are two reports: give one")
	}
	return o, nil
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseStatsFlags(args, stderr)
	if err != nil {
		return err
	}
	c := admin.NewClient(o.socket, o.admin, o.timeout)
	show := func(w io.Writer, body []byte) error {
		if o.json && o.namespace == "" && !o.searchPath {
			_, err := w.Write(body)
			return err
		}
		var d metrics.Document
		if err := json.Unmarshal(body, &d); err != nil {
			return fmt.Errorf("decoding /stats from %s: %w", c.Where(), err)
		}
		return showPart(w, &d, o)
	}
	if o.watch {
		return c.Watch(ctx, stdout, admin.WatchOptions{Interval: o.interval, Count: o.count, Header: !o.json}, show)
	}
	body, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	return show(stdout, body)
}

// showPart writes the report o asks for of d: the whole report, one
// namespace's, or the search path's (with --json, that part of the
// document).
func showPart(w io.Writer, d *metrics.Document, o statsOptions) error {
	var part any
	switch {
	case o.namespace != "":
		s, err := d.Namespace(o.namespace)
		if err != nil || !o.json {
			if err == nil {
				d.NamespaceReport(w, s)
			}
			return err
		}
		part = s
	case o.searchPath && o.json:
		part = d.SearchPath
	case o.searchPath:
		d.SearchPathReport(w)
		return nil
	default:
		d.Report(w)
		return nil
	}
	return json.NewEncoder(w).Encode(part)
}
