package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/pkg/agent"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/supervisor"
)

// serve is `nodedns serve`. A configuration it refuses is reported as one
// plain line (the log format is not known yet); from then on everything,
// the error that ends the agent included, goes through the configured
// logger.
func serve(args []string, stderr io.Writer) error {
	cfg, res, err := config.Parse(args, false, stderr)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return err
	}
	log, level, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	useLogger(log)
	for _, w := range res.Warnings {
		log.Warn(w) // each names the file
	}
	sup, err := supervisor.FromEnv(log)
	if err != nil {
		return err
	}
	if sup == nil && cfg.Supervise {
		err := supervisor.Run(context.Background(), supervisor.Config{Args: append([]string{"serve"}, args...), HangTimeout: time.Duration(cfg.HangTimeout),
			Log: log, Teardown: func() { agent.TeardownAfterStop(cfg, log) }})
		var se *supervisor.StartError
		if errors.As(err, &se) && se.First {
			return &exitError{code: se.Code} // the serving process said why
		}
		if err != nil {
			log.Error("nodedns serve (supervisor) exiting", "err", err)
			return reportedError{err}
		}
		return nil
	}
	if err := agent.Serve(cfg, agent.Options{Log: log, Level: level, Args: args, Version: version, Revision: revision(), Supervisor: sup}); err != nil {
		log.Error("nodedns serve exiting", "err", err)
		return reportedError{err}
	}
	return nil
}

// cleanup is `nodedns cleanup`: remove every rule nodedns installs (all
// copies, both iptables backends), the DNS fallback's chains and the
// link. With --wait-for-agent it
// first waits until no other process serves the local IPs on port 53 (an
// agent still running would be cut off from its pods), and fails if one
// still does when the time is up. With --hold it then stays running until
// SIGTERM: the Helm chart's uninstall hook shows each node's finished
// cleanup as a Ready pod.
func cleanup(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ips config.List
	fs.Var(&ips, "local-ip", "comma-separated local IPs (removed from the link if it is not one nodedns created)")
	iface := fs.String("interface", "nodelocaldns", "link to remove")
	wait := fs.Duration("wait-for-agent", 0, "first wait up to this long until no process serves the --local-ip addresses on port 53; fail if one still does (0: do not check)")
	hold := fs.Bool("hold", false, "after cleaning up, keep running until SIGTERM or SIGINT")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log, _, err := newLogger(*level, *format, stderr)
	if err != nil {
		return err
	}
	cfg := intercept.Config{Interface: *iface, Logger: log}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("--local-ip %q: want an IP address", s)
		}
		cfg.LocalIPs = append(cfg.LocalIPs, ip)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := intercept.CleanupAfterAgent(ctx, cfg, *wait); err != nil {
		return err
	}
	log.Info("cleanup done", "interface", cfg.Interface, "local_ips", ips.String())
	if *hold {
		<-ctx.Done()
	}
	return nil
}
