//go:build integration

package integration

// Agent life cycle on a real node namespace, where a mistake leaves the
// node's pods without DNS: a start that fails
// once the link is in place leaves nothing behind; a link the agent did
// not create is used and left; another DNS server sharing the local IP
// through SO_REUSEPORT keeps the agent not ready until it is gone.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestStartFailureRemovesInterception: the agent creates the link, then
// cannot bind its listeners (a socket without SO_REUSEPORT holds port 53
// on the wildcard address). It exits with the bind error and leaves no
// link and no rules, so a crash loop does not leave pods sending DNS to an
// address nobody answers.
func TestStartFailureRemovesInterception(t *testing.T) {
	e := newInterceptEnv(t, "nft")
	var blocker net.PacketConn
	if err := e.node.Do(func() error {
		var err error
		blocker, err = net.ListenPacket("udp", "0.0.0.0:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	a := e.node.Start(t, "agent", nodednsBin, e.agentArgs()...)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not exit although it cannot bind")
	}
	if a.err == nil || !strings.Contains(a.Output(), "binding UDP") {
		t.Fatalf("agent exit %v; output:\n%s", a.err, a.Output())
	}
	if err := e.checkNoLink(); err != nil {
		t.Error(err)
	}
	if err := e.checkNoRules(); err != nil {
		t.Error(err)
	}
}

// globalAddrs drops the IPv6 link-local addresses the kernel gives a link
// that is up.
func globalAddrs(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if !strings.HasPrefix(a, "fe80:") {
			out = append(out, a)
		}
	}
	return out
}

// linkAlias reads the link's ifalias ("" when none).
func (e *interceptEnv) linkAlias() (string, error) {
	out, err := e.node.Run("ip", "-j", "-d", "link", "show", "dev", linkName)
	if err != nil {
		return "", err
	}
	var links []struct {
		Alias string `json:"ifalias"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return "", fmt.Errorf("parsing ip -j output %q: %v", out, err)
	}
	return links[0].Alias, nil
}

// TestUnmarkedLinkKept: a link of the configured name that the agent did
// not create (here the kind this kernel offers, as an earlier NodeLocal
// DNSCache would leave it, with an address of its own) is used, and left
// in place with that address when the agent exits; a link the agent
// creates carries its mark and goes.
func TestUnmarkedLinkKept(t *testing.T) {
	e := newInterceptEnv(t, "nft")
	kind := expectedLinkKind(t)
	e.node.MustRun(t, "ip", "link", "add", linkName, "type", kind)
	e.node.MustRun(t, "ip", "addr", "add", "169.254.1.1/32", "dev", linkName)
	e.node.MustRun(t, "ip", "link", "set", linkName, "up")

	a := e.node.Start(t, "agent", nodednsBin, e.agentArgs()...)
	e.waitServing(t, a)
	if alias, err := e.linkAlias(); err != nil || alias != "" {
		t.Errorf("the agent marked a link it did not create: %q %v", alias, err)
	}
	if err := a.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	if err := e.checkNoRules(); err != nil {
		t.Error(err)
	}
	gotKind, _, addrs, err := e.linkState()
	if err != nil {
		t.Fatalf("the link is gone: %v", err)
	}
	addrs = globalAddrs(addrs)
	if gotKind != kind || len(addrs) != 1 || addrs[0] != "169.254.1.1/32" {
		t.Errorf("link after the agent: %s %v; want the %s link with only its own address", gotKind, addrs, kind)
	}

	// A link the agent creates is marked, and removed at exit.
	e.node.MustRun(t, "ip", "link", "del", linkName)
	a = e.node.Start(t, "agent 2", nodednsBin, e.agentArgs()...)
	e.waitServing(t, a)
	if alias, err := e.linkAlias(); err != nil || !strings.HasPrefix(alias, "nodedns:") {
		t.Errorf("the agent's link is not marked: %q %v", alias, err)
	}
	if err := a.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	if err := e.checkNoLink(); err != nil {
		t.Error(err)
	}
}

// reusePortServer serves DNS on addr in ns with SO_REUSEPORT (as CoreDNS,
// and so NodeLocal DNSCache, binds), answering with h, until the test
// ends or stop is called.
func reusePortServer(t *testing.T, ns *netNS, addr string, h dns.HandlerFunc) (stop func()) {
	t.Helper()
	var pc net.PacketConn
	if err := ns.Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
				return err
			}
			return serr
		}}
		var err error
		pc, err = lc.ListenPacket(context.Background(), "udp", addr)
		return err
	}); err != nil {
		t.Fatalf("binding %s in %s: %v", addr, ns.Name, err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: h}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = srv.Shutdown()
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestForeignDNSServer: a foreign DNS server that starts sharing the local
// IP (SO_REUSEPORT) while the agent runs turns it not ready within a sync
// interval, is named in /ready, `nodedns stats` and the log; when it goes
// the agent turns ready again. A NodeLocal DNSCache (CoreDNS 1.15 with its
// Corefile) already running at start keeps the agent from ever turning
// ready while it runs.
func TestForeignDNSServer(t *testing.T) {
	e := newInterceptEnv(t, "nft")
	dir := t.TempDir()
	a := e.startRolloutAgent(t, dir, 0)
	e.waitServing(t, a.p)
	dnstest.Eventually(t, 10*time.Second, "agent ready", a.ready)

	stop := reusePortServer(t, e.node, net.JoinHostPort(localV4, "53"), func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	})
	dnstest.Eventually(t, syncEvery+5*time.Second, "not ready with a foreign server sharing "+localV4, func() error {
		err := a.ready()
		if err == nil {
			return fmt.Errorf("still ready")
		}
		if !strings.Contains(err.Error(), "foreign DNS servers") || !strings.Contains(err.Error(), localV4+":53/udp") {
			return fmt.Errorf("not ready for another reason: %v", err)
		}
		return nil
	})
	out, err := e.node.Run(nodednsBin, "stats", "--socket", a.socket)
	if err != nil || !strings.Contains(out, "FOREIGN DNS SERVER") || !strings.Contains(out, localV4+":53/udp") {
		t.Errorf("nodedns stats: %v\n%s", err, out)
	}
	if !strings.Contains(a.p.Output(), "another DNS server shares our address") {
		t.Errorf("not logged:\n%s", a.p.Output())
	}
	stop()
	dnstest.Eventually(t, 15*time.Second, "ready again once the foreign server is gone", a.ready)
	if err := a.p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatalf("agent exit: %v", err)
	}

	t.Run("NodeLocal DNSCache left running", func(t *testing.T) {
		coredns := coreDNSBin(t)
		corefile := filepath.Join(dir, "Corefile")
		// node-local-dns's Corefile, trimmed to what serves 169.254.20.10.
		if err := os.WriteFile(corefile, []byte(fmt.Sprintf(`.:53 {
    errors
    cache 30
    bind %s
    forward . %s
}
`, localV4, e.upstream.Addr)), 0o644); err != nil {
			t.Fatal(err)
		}
		// The link holds the address before CoreDNS binds it.
		e.node.MustRun(t, "ip", "link", "add", linkName, "type", expectedLinkKind(t))
		e.node.MustRun(t, "ip", "addr", "add", localV4+"/32", "dev", linkName)
		e.node.MustRun(t, "ip", "link", "set", linkName, "up")
		cd := e.node.Start(t, "coredns", coredns, "-conf", corefile, "-dns.port", "53")
		dnstest.Eventually(t, 10*time.Second, "CoreDNS answering", func() error {
			if cd.Exited() {
				return fmt.Errorf("coredns exited: %v\n%s", cd.err, cd.Output())
			}
			_, err := dig(e.node, localV4, false, "up.example.test.")
			return err
		})
		b := e.startRolloutAgent(t, dir, 1)
		e.waitServing(t, b.p)
		// Serving, but never ready while CoreDNS shares the address: for
		// three sync intervals after /ready first says why (a window in
		// which /ready never answered would check nothing).
		var seenSince time.Time
		giveUp := time.Now().Add(15 * time.Second)
		for seenSince.IsZero() || time.Since(seenSince) < 3*syncEvery {
			if err := b.ready(); err == nil {
				t.Fatal("ready while a NodeLocal DNSCache shares the address")
			} else if strings.Contains(err.Error(), "no such file") || strings.Contains(err.Error(), "connection refused") {
				if time.Now().After(giveUp) {
					t.Fatalf("the agent's admin socket never answered: %v", err)
				}
				time.Sleep(50 * time.Millisecond) // admin socket not up yet
				continue
			} else if !strings.Contains(err.Error(), "foreign DNS servers") {
				t.Fatalf("not ready for another reason: %v", err)
			}
			if seenSince.IsZero() {
				seenSince = time.Now()
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := cd.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Logf("coredns exit: %v", err)
		}
		dnstest.Eventually(t, 15*time.Second, "ready once CoreDNS is gone", b.ready)
		if err := b.p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Fatalf("agent exit: %v", err)
		}
		// The link was there before the agent: it stays, with the address
		// CoreDNS's setup put there.
		if _, _, addrs, err := e.linkState(); err != nil || len(globalAddrs(addrs)) != 1 {
			t.Errorf("pre-existing link after the agent: %v %v", addrs, err)
		}
	})
}

// TestWithoutNetRaw runs the agent with the DaemonSet's capabilities minus
// NET_RAW (capsh drops it from the bounding set). iptables-nft needs only
// NET_ADMIN. With legacy tables loaded (both environments load them: the
// nft one seeds a stale copy of one of our rules there, the legacy one
// kube-proxy's stand-in rule) the agent cannot read them, says so, and
// installs its rules through iptables-nft, which works whatever backend
// kube-proxy uses: both backends' hooks see every packet, and NOTRACK
// applies before either's nat table.
func TestWithoutNetRaw(t *testing.T) {
	capsh := needTool(t, "capsh")
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := newInterceptEnv(t, backend)
			script := "exec " + nodednsBin + " '" + strings.Join(e.agentArgs(), "' '") + "'"
			a := e.node.Start(t, "agent without NET_RAW", capsh, "--drop=cap_net_raw", "--", "-c", script)
			dnstest.Eventually(t, 15*time.Second, "serving with rules in nft", func() error {
				if a.Exited() {
					return fmt.Errorf("agent exited: %v", a.err)
				}
				for _, v6 := range []bool{false, true} {
					if have, err := e.ourRules("nft", v6); err != nil || len(have) != 10 {
						return fmt.Errorf("nft rules (ipv6=%v): %d, %v", v6, len(have), err)
					}
				}
				if got, err := dig(e.node, localV4, false, "ready.example.test."); err != nil || got != answerA {
					return fmt.Errorf("dig: %q, %v", got, err)
				}
				return nil
			})
			e.checkConntrack(t)
			if !strings.Contains(a.Output(), "unreadable without CAP_NET_RAW") || !strings.Contains(a.Output(), "without CAP_NET_RAW the iptables-legacy tables cannot be read") {
				t.Errorf("no warning about the legacy tables:\n%s", a.Output())
			}
			if err := a.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
				t.Fatalf("agent exit: %v", err)
			}
			if err := e.checkNoLink(); err != nil {
				t.Error(err)
			}
			for _, v6 := range []bool{false, true} {
				if have, err := e.ourRules("nft", v6); err != nil || len(have) != 0 {
					t.Errorf("nft rules left (ipv6=%v): %q %v", v6, have, err)
				}
			}
		})
	}
}
