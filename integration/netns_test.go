//go:build integration

package integration

// Network namespace helpers shared by the integration tests: create a
// namespace, join two with a veth pair, run commands or Go code inside one,
// start background processes there. Everything a helper creates is removed
// by t.Cleanup, whether the test passes or not.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// netNS is a named network namespace (ip netns add) owned by one test.
type netNS struct {
	Name string
}

var nsSeq atomic.Int64

// newNetNS creates a namespace with a unique name built from prefix,
// brings its loopback up, and removes it (with its links, addresses and
// iptables rules, which die with it) when the test ends. Processes started
// with Start are stopped first.
func newNetNS(t testing.TB, prefix string) *netNS {
	t.Helper()
	needRoot(t)
	needTool(t, "ip")
	ns := &netNS{Name: fmt.Sprintf("nd-%s-%d-%d", prefix, os.Getpid(), nsSeq.Add(1))}
	if out, err := exec.Command("ip", "netns", "add", ns.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns.Name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
		}
	})
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Command returns a command that runs name inside the namespace. ip netns
// exec replaces itself with name, so the process's PID is name's.
func (ns *netNS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Run runs a command inside the namespace (at most 30 s) and returns its
// combined output.
func (ns *netNS) Run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := ns.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %s %s: %w: %s", ns.Name, name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// MustRun is Run that fails the test on error.
func (ns *netNS) MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := ns.Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn
// creates stay in the namespace after it returns, and commands it starts
// run there. Goroutines fn starts do not inherit the namespace.
func (ns *netNS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("getting the current netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns.Name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening netns %s: %w", ns.Name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering netns %s: %w", ns.Name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it ends with this goroutine
			// instead of running other goroutines in the wrong netns.
			errc <- errors.Join(ferr, fmt.Errorf("leaving netns %s: %w", ns.Name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// vethPair joins a and b with a veth pair (aIf in a, bIf in b), puts the
// given addresses on each end (IPv6 without duplicate address detection)
// and brings both up. The pair goes away with either namespace.
func vethPair(t testing.TB, a *netNS, aIf string, aAddrs []netip.Prefix, b *netNS, bIf string, bAddrs []netip.Prefix) {
	t.Helper()
	a.MustRun(t, "ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.Name)
	for _, side := range []struct {
		ns    *netNS
		ifc   string
		addrs []netip.Prefix
	}{{a, aIf, aAddrs}, {b, bIf, bAddrs}} {
		for _, p := range side.addrs {
			args := []string{"addr", "add", p.String(), "dev", side.ifc}
			if p.Addr().Is6() {
				args = append(args, "nodad")
			}
			side.ns.MustRun(t, "ip", args...)
		}
		side.ns.MustRun(t, "ip", "link", "set", side.ifc, "up")
	}
}

// proc is a background process started in a namespace by a test.
type proc struct {
	Name string
	Cmd  *exec.Cmd
	out  *dnstest.SyncBuffer
	done chan struct{}
	err  error // valid after done
}

// Start starts name in the namespace with stdout and stderr captured. At
// test end the process, if still running, gets SIGTERM, then SIGKILL after
// 10 s; its output is logged if the test failed.
func (ns *netNS) Start(t testing.TB, label, name string, args ...string) *proc {
	t.Helper()
	p := &proc{Name: label, out: &dnstest.SyncBuffer{}, done: make(chan struct{})}
	p.Cmd = ns.Command(context.Background(), name, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s in %s: %v", label, ns.Name, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			t.Logf("output of %s:\n%s", label, p.Output())
		}
	})
	return p
}

// Output is everything the process has written so far.
func (p *proc) Output() string { return p.out.String() }

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends sig and waits up to wait for the process to end, then kills
// it. It returns the process's exit error (nil for a clean exit).
func (p *proc) Stop(sig syscall.Signal, wait time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// Kill sends SIGKILL and waits for the process to end.
func (p *proc) Kill() {
	if !p.Exited() {
		_ = p.Cmd.Process.Kill()
	}
	<-p.done
}
