//go:build integration

package integration

// Interception for real, since a fake netlink or iptables cannot show a
// packet reaching the agent: a "node" namespace holding the link and
// the rules, a "pod" namespace joined to it by a veth pair with a route to
// the local IPs via the node side, real iptables in both the nft and the
// legacy backend, dig as the client and conntrack as the witness.
//
// TestInterceptPackage drives pkg/intercept in-process (on a thread inside
// the node namespace) with a test DNS server standing in for the agent's
// listeners; TestInterceptAgent runs the nodedns binary with its flags.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/intercept"
)

const (
	localV4    = "169.254.20.10"
	localV6    = "fd00:20::10"
	nodeSideV4 = "169.254.99.1"
	nodeSideV6 = "fd00:99::1"
	linkName   = "nodelocaldns"
	answerA    = "192.0.2.1" // what dnstest.Zone answers for A; data only
	plainPort  = "5300"      // an ordinary, tracked flow to the node
	syncEvery  = time.Second
	// passBudget is what a repair may take on top of the sync interval:
	// one pass runs a few iptables commands, slow on a loaded machine.
	passBudget = time.Second
)

var (
	localIPs  = []string{localV4, localV6}
	backends  = []string{"nft", "legacy"}
	otherBack = map[string]string{"nft": "legacy", "legacy": "nft"}
)

// interceptEnv is a node namespace and a pod namespace joined by a veth
// pair, an upstream DNS server on the node's loopback and a plain DNS
// server on the node's veth address.
type interceptEnv struct {
	backend   string
	node, pod *netNS
	upstream  *dnstest.Server
}

func newInterceptEnv(t *testing.T, backend string) *interceptEnv {
	t.Helper()
	needRoot(t)
	for _, tool := range []string{"ip", "dig", "conntrack",
		"iptables-nft", "ip6tables-nft", "iptables-nft-save", "ip6tables-nft-save",
		"iptables-legacy", "ip6tables-legacy", "iptables-legacy-save", "ip6tables-legacy-save"} {
		needTool(t, tool)
	}
	e := &interceptEnv{backend: backend, node: newNetNS(t, "node"), pod: newNetNS(t, "pod")}
	vethPair(t,
		e.node, "veth-pod", []netip.Prefix{netip.MustParsePrefix(nodeSideV4 + "/30"), netip.MustParsePrefix(nodeSideV6 + "/64")},
		e.pod, "eth0", []netip.Prefix{netip.MustParsePrefix("169.254.99.2/30"), netip.MustParsePrefix("fd00:99::2/64")})
	e.pod.MustRun(t, "ip", "route", "add", localV4+"/32", "via", nodeSideV4)
	e.pod.MustRun(t, "ip", "-6", "route", "add", localV6+"/128", "via", nodeSideV6)

	// A rule in the backend under test: backend detection then picks it
	// (as it would pick kube-proxy's), and its conntrack match turns
	// connection tracking on in the namespace, so untracked flows are a
	// real finding and not an idle conntrack.
	for _, ipt := range []string{"iptables-", "ip6tables-"} {
		e.node.MustRun(t, ipt+backend, "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
	}

	// A copy of one of our rules in the other backend, as a run before a
	// backend switch would leave it: the agent must remove it.
	e.node.MustRun(t, "iptables-"+otherBack[backend], "-t", "raw", "-A", "PREROUTING", "-p", "udp", "-d", localV4, "--dport", "53",
		"-m", "comment", "--comment", "nodedns: skip conntrack for queries to "+localV4+" udp/53", "-j", "NOTRACK")

	if err := e.node.Do(func() error {
		var err error
		if e.upstream, err = dnstest.Listen("127.0.0.1:0", dnstest.Zone(30)); err != nil {
			return err
		}
		t.Cleanup(e.upstream.Close)
		plain, err := dnstest.Listen(nodeSideV4+":"+plainPort, dnstest.Zone(30))
		if err != nil {
			return err
		}
		t.Cleanup(plain.Close)
		return nil
	}); err != nil {
		t.Fatalf("starting DNS servers in the node namespace: %v", err)
	}
	return e
}

// dig asks server for name/A from ns and returns the trimmed answer.
func dig(ns *netNS, server string, tcp bool, name string, extra ...string) (string, error) {
	args := append([]string{"@" + server, "+short", "+tries=1", "+time=2", name, "A"}, extra...)
	if tcp {
		args = append(args, "+tcp")
	}
	out, err := ns.Run("dig", args...)
	return strings.TrimSpace(out), err
}

// expectAnswers asks every local IP over UDP and TCP from ns.
func (e *interceptEnv) expectAnswers(t *testing.T, ns *netNS) {
	t.Helper()
	for _, ip := range localIPs {
		for _, tcp := range []bool{false, true} {
			name := fmt.Sprintf("q%d.example.test.", time.Now().UnixNano())
			got, err := dig(ns, ip, tcp, name)
			if err != nil || got != answerA {
				t.Errorf("dig @%s (tcp=%v) from %s: %q, %v; want %s", ip, tcp, ns.Name, got, err, answerA)
			}
		}
	}
}

// waitServing waits until every rule is in place (the agent adds them once
// its listeners are bound) and the node namespace gets answers.
func (e *interceptEnv) waitServing(t *testing.T, agent *proc) {
	t.Helper()
	dnstest.Eventually(t, 15*time.Second, "agent serving with rules in place", func() error {
		if agent != nil && agent.Exited() {
			return fmt.Errorf("%s exited: %v", agent.Name, agent.err)
		}
		if err := e.checkRulesOnce(); err != nil {
			return err
		}
		if got, err := dig(e.node, localV4, false, "ready.example.test."); err != nil || got != answerA {
			return fmt.Errorf("dig: %q, %v", got, err)
		}
		return nil
	})
}

// ourRules returns our rules in one backend and family as "table -A CHAIN
// ..." lines, read with iptables-save (which creates no table).
func (e *interceptEnv) ourRules(backend string, v6 bool) ([]string, error) {
	save := "iptables-" + backend + "-save"
	if v6 {
		save = "ip6tables-" + backend + "-save"
	}
	out, err := e.node.Run(save)
	if err != nil {
		return nil, err
	}
	var rules []string
	table := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, "-A ") && strings.Contains(l, `--comment "nodedns: `):
			rules = append(rules, table+" "+l)
		}
	}
	return rules, nil
}

// wantRules is the rule table the agent installs (pkg/intercept) as
// iptables-save prints it, for one local IP.
func wantRules(ip string) []struct{ prefix, target string } {
	host := ip + "/32"
	if strings.Contains(ip, ":") {
		host = ip + "/128"
	}
	var out []struct{ prefix, target string }
	for _, p := range []string{"udp", "tcp"} {
		m := " -p " + p + " -m " + p + " "
		out = append(out,
			struct{ prefix, target string }{"raw -A PREROUTING -d " + host + m + "--dport 53 ", "NOTRACK"},
			struct{ prefix, target string }{"raw -A OUTPUT -d " + host + m + "--dport 53 ", "NOTRACK"},
			struct{ prefix, target string }{"raw -A OUTPUT -s " + host + m + "--sport 53 ", "NOTRACK"},
			struct{ prefix, target string }{"filter -A INPUT -d " + host + m + "--dport 53 ", "ACCEPT"},
			struct{ prefix, target string }{"filter -A OUTPUT -s " + host + m + "--sport 53 ", "ACCEPT"},
		)
	}
	return out
}

// checkRulesOnce reports unless every rule is present exactly once in the
// backend under test, nothing else of ours is there, and the other backend
// holds none of ours.
func (e *interceptEnv) checkRulesOnce() error {
	var problems []string
	for _, ip := range localIPs {
		v6 := strings.Contains(ip, ":")
		have, err := e.ourRules(e.backend, v6)
		if err != nil {
			return err
		}
		want := wantRules(ip)
		for _, w := range want {
			n := 0
			for _, h := range have {
				if strings.HasPrefix(h, w.prefix) && strings.HasSuffix(h, " -j "+w.target) {
					n++
				}
			}
			if n != 1 {
				problems = append(problems, fmt.Sprintf("%q...-j %s present %d times", w.prefix, w.target, n))
			}
		}
		if len(have) != len(want) {
			problems = append(problems, fmt.Sprintf("%d nodedns rules for %s, want %d: %q", len(have), ip, len(want), have))
		}
		other, err := e.ourRules(otherBack[e.backend], v6)
		if err != nil {
			return err
		}
		if len(other) > 0 {
			problems = append(problems, fmt.Sprintf("nodedns rules in the %s backend: %q", otherBack[e.backend], other))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("rules: %s", strings.Join(problems, "; "))
	}
	return nil
}

// checkNoRules reports if any nodedns rule is left in either backend.
func (e *interceptEnv) checkNoRules() error {
	for _, b := range backends {
		for _, v6 := range []bool{false, true} {
			have, err := e.ourRules(b, v6)
			if err != nil {
				return err
			}
			if len(have) > 0 {
				return fmt.Errorf("%d nodedns rules left in %s (ipv6=%v): %q", len(have), b, v6, have)
			}
		}
	}
	return nil
}

// linkState reads the link's kind, up flag and addresses with ip -j.
func (e *interceptEnv) linkState() (kind string, up bool, addrs []string, err error) {
	out, err := e.node.Run("ip", "-j", "-d", "addr", "show", "dev", linkName)
	if err != nil {
		return "", false, nil, err
	}
	var links []struct {
		Flags    []string `json:"flags"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return "", false, nil, fmt.Errorf("parsing ip -j output %q: %v", out, err)
	}
	l := links[0]
	for _, f := range l.Flags {
		up = up || f == "UP"
	}
	for _, a := range l.AddrInfo {
		addrs = append(addrs, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
	}
	return l.LinkInfo.Kind, up, addrs, nil
}

// checkLink reports unless the link is up, of the kind this kernel allows,
// and holds every local IP as a host address.
func (e *interceptEnv) checkLink(t *testing.T) error {
	kind, up, addrs, err := e.linkState()
	if err != nil {
		return err
	}
	if want := expectedLinkKind(t); kind != want {
		return fmt.Errorf("link kind %q, want %q", kind, want)
	}
	if !up {
		return fmt.Errorf("link is down")
	}
	for _, want := range []string{localV4 + "/32", localV6 + "/128"} {
		found := false
		for _, a := range addrs {
			found = found || a == want
		}
		if !found {
			return fmt.Errorf("address %s missing from %v", want, addrs)
		}
	}
	return nil
}

func (e *interceptEnv) checkNoLink() error {
	if out, err := e.node.Run("ip", "link", "show", linkName); err == nil {
		return fmt.Errorf("link still present: %s", out)
	}
	return nil
}

var (
	linkKindOnce sync.Once
	linkKind     string
)

// expectedLinkKind is "dummy" where the kernel has the dummy driver and
// "bridge" where it has not (the fallback path).
func expectedLinkKind(t *testing.T) string {
	linkKindOnce.Do(func() {
		ns := newNetNS(t, "probe")
		linkKind = "bridge"
		if _, err := ns.Run("ip", "link", "add", "probe0", "type", "dummy"); err == nil {
			linkKind = "dummy"
		}
		t.Logf("this kernel's link for local IPs: %s", linkKind)
	})
	return linkKind
}

// checkConntrack asserts that DNS flows to the local IPs, from the pod and
// from the node, leave no conntrack entry while an ordinary flow to the
// node's veth address does. The table is flushed first: flows from before
// the rules were in place are tracked, as they should be.
func (e *interceptEnv) checkConntrack(t *testing.T) {
	t.Helper()
	for _, fam := range []string{"ipv4", "ipv6"} {
		e.node.MustRun(t, "conntrack", "-F", "-f", fam)
	}
	e.expectAnswers(t, e.pod)
	e.expectAnswers(t, e.node)
	if got, err := dig(e.pod, nodeSideV4, false, "plain.example.test.", "-p", plainPort); err != nil || got != answerA {
		t.Fatalf("ordinary flow: dig @%s -p %s: %q, %v", nodeSideV4, plainPort, got, err)
	}
	var all []string
	for _, fam := range []string{"ipv4", "ipv6"} {
		out, err := e.node.Run("conntrack", "-L", "-f", fam)
		if err != nil {
			t.Fatalf("conntrack -L: %v", err)
		}
		all = append(all, strings.Split(strings.TrimSpace(out), "\n")...)
	}
	tracked := false
	for _, l := range all {
		// Only DNS flows count: the link itself may send IGMP or MLD
		// reports from a local IP, and those are tracked like any packet.
		dns := strings.Contains(l, "port=53 ")
		for _, ip := range localIPs {
			if dns && strings.Contains(l, "="+ip+" ") {
				t.Errorf("conntrack entry for a DNS flow to %s: %s", ip, l)
			}
		}
		tracked = tracked || (strings.Contains(l, "dport="+plainPort) && strings.Contains(l, "dst="+nodeSideV4))
	}
	if !tracked {
		t.Errorf("the ordinary flow to %s:%s is not tracked (is conntrack on in the namespace?):\n%s", nodeSideV4, plainPort, strings.Join(all, "\n"))
	}
}

// deleteFirstRule removes rule 1 of raw PREROUTING by hand, after checking
// it is ours.
func (e *interceptEnv) deleteFirstRule(t *testing.T) {
	t.Helper()
	ipt := "iptables-" + e.backend
	var lines []string // without iptables-nft's "# Warning: ..." line
	for _, l := range strings.Split(e.node.MustRun(t, ipt, "-t", "raw", "-S", "PREROUTING"), "\n") {
		if strings.HasPrefix(l, "-") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 || !strings.Contains(lines[1], "nodedns: ") {
		t.Fatalf("rule 1 of raw PREROUTING is not ours: %q", lines)
	}
	e.node.MustRun(t, ipt, "-t", "raw", "-D", "PREROUTING", "1")
}

// testLogger sends slog output to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var _ io.Writer = tWriter{}

func interceptConfig(t *testing.T) intercept.Config {
	return intercept.Config{
		LocalIPs:       []netip.Addr{netip.MustParseAddr(localV4), netip.MustParseAddr(localV6)},
		Interface:      linkName,
		SetupInterface: true,
		SetupIptables:  true,
		SyncInterval:   syncEvery,
		Logger:         testLogger(t),
	}
}

// TestInterceptPackage exercises pkg/intercept against the real kernel in
// the node namespace, once per iptables backend.
func TestInterceptPackage(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { testInterceptPackage(t, backend) })
	}
}

func testInterceptPackage(t *testing.T, backend string) {
	e := newInterceptEnv(t, backend)
	cfg := interceptConfig(t)
	node := e.node

	var ic *intercept.Interceptor
	if err := node.Do(func() error {
		var err error
		if ic, err = intercept.New(cfg); err != nil {
			return err
		}
		return ic.EnsureLink()
	}); err != nil {
		t.Fatalf("New, EnsureLink: %v", err)
	}
	if got := ic.Status().Backend; got != backend {
		t.Fatalf("detected backend %q, want %q (a rule was seeded there)", got, backend)
	}
	if err := e.checkLink(t); err != nil {
		t.Fatal(err)
	}
	if ic.RulesPresent() {
		t.Error("RulesPresent before EnsureRules")
	}

	// The listeners: a DNS server on port 53 of every local IP.
	var servers []*dnstest.Server
	if err := node.Do(func() error {
		for _, ap := range []string{localV4 + ":53", "[" + localV6 + "]:53"} {
			s, err := dnstest.Listen(ap, dnstest.Zone(30))
			if err != nil {
				return err
			}
			servers = append(servers, s)
		}
		return ic.EnsureRules()
	}); err != nil {
		t.Fatalf("listening, EnsureRules: %v", err)
	}
	closeServers := func() {
		for _, s := range servers {
			s.Close()
		}
		servers = nil
	}
	t.Cleanup(closeServers)
	if err := e.checkRulesOnce(); err != nil {
		t.Fatal(err)
	}
	if !ic.RulesPresent() {
		t.Error("RulesPresent = false after EnsureRules")
	}

	t.Run("answers", func(t *testing.T) {
		e.expectAnswers(t, e.pod)
		e.expectAnswers(t, e.node)
	})
	t.Run("untracked", func(t *testing.T) { e.checkConntrack(t) })

	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = node.Do(func() error { ic.Run(ctx); return nil })
	}()
	stopRun := func() {
		cancel()
		<-runDone
	}
	t.Cleanup(stopRun)

	t.Run("repair on sync", func(t *testing.T) {
		before := ic.Status().Repairs
		// Nothing reports a rule's removal: the next pass puts it back.
		e.deleteFirstRule(t)
		dnstest.Eventually(t, syncEvery+passBudget, "rule back within one sync interval", e.checkRulesOnce)
		dnstest.Eventually(t, time.Second, "repair counted", func() error {
			if st := ic.Status(); st.Repairs < before+1 || st.LastRepair.IsZero() {
				return fmt.Errorf("status: %+v", st)
			}
			return nil
		})
	})

	t.Run("repair on netlink event", func(t *testing.T) {
		// Another Interceptor whose sync interval is far away: only the
		// netlink report can bring the address and the link back in time.
		stopRun()
		slow := cfg
		slow.SyncInterval = time.Hour
		var ev *intercept.Interceptor
		if err := node.Do(func() error {
			var err error
			if ev, err = intercept.New(slow); err != nil {
				return err
			}
			if err := ev.EnsureLink(); err != nil {
				return err
			}
			return ev.EnsureRules()
		}); err != nil {
			t.Fatal(err)
		}
		evCtx, evCancel := context.WithCancel(context.Background())
		evDone := make(chan struct{})
		go func() {
			defer close(evDone)
			_ = node.Do(func() error { ev.Run(evCtx); return nil })
		}()
		defer func() {
			evCancel()
			<-evDone
		}()
		// Run subscribes before its first pass; give it a moment.
		time.Sleep(200 * time.Millisecond)

		e.node.MustRun(t, "ip", "addr", "del", localV4+"/32", "dev", linkName)
		dnstest.Eventually(t, 5*time.Second, "address back", func() error { return e.checkLink(t) })
		e.node.MustRun(t, "ip", "link", "del", linkName)
		dnstest.Eventually(t, 5*time.Second, "link back", func() error { return e.checkLink(t) })
		dnstest.Eventually(t, 2*time.Second, "repairs counted", func() error {
			if st := ev.Status(); st.Repairs < 1+4 {
				return fmt.Errorf("repairs = %d, want at least 5 (an address; a link, two addresses, up)", st.Repairs)
			}
			return nil
		})
		e.expectAnswers(t, e.pod)
	})

	t.Run("restart adds no duplicates", func(t *testing.T) {
		for range 2 {
			if err := node.Do(func() error {
				again, err := intercept.New(cfg)
				if err != nil {
					return err
				}
				if err := again.EnsureLink(); err != nil {
					return err
				}
				return again.EnsureRules()
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.checkRulesOnce(); err != nil {
			t.Error(err)
		}
	})

	t.Run("teardown decision", func(t *testing.T) {
		shouldTeardown := func() (ok bool, why string) {
			_ = node.Do(func() error { ok, why = intercept.ShouldTeardown(cfg); return nil })
			return ok, why
		}
		// Only this process's sockets: ours to tear down.
		if ok, why := shouldTeardown(); !ok {
			t.Errorf("with only our own listeners: ShouldTeardown = false (%s)", why)
		}
		// Another process on the same address (SO_REUSEPORT): keep.
		closeServers()
		other := node.Start(t, "other agent", nodednsBin, "serve", "--listen", localV4+":53",
			"--upstream", e.upstream.Addr, "--admin", "", "--lameduck", "0s", "--loop-check=false")
		dnstest.Eventually(t, 10*time.Second, "other agent answering", func() error {
			if other.Exited() {
				return fmt.Errorf("exited: %v", other.err)
			}
			got, err := dig(node, localV4, false, "other.example.test.")
			if err != nil || got != answerA {
				return fmt.Errorf("dig: %q %v", got, err)
			}
			return nil
		})
		if ok, why := shouldTeardown(); ok || !strings.Contains(why, localV4+":53") {
			t.Errorf("with another agent on %s:53: ShouldTeardown = %v (%s)", localV4, ok, why)
		} else {
			t.Logf("ShouldTeardown: %s", why)
		}
		if err := other.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("other agent: %v", err)
		}
		if ok, why := shouldTeardown(); !ok {
			t.Errorf("after the other agent left: ShouldTeardown = false (%s)", why)
		}
	})

	t.Run("teardown", func(t *testing.T) {
		stopRun()
		if err := node.Do(ic.Teardown); err != nil {
			t.Fatal(err)
		}
		if err := e.checkNoRules(); err != nil {
			t.Error(err)
		}
		if err := e.checkNoLink(); err != nil {
			t.Error(err)
		}
		if ic.RulesPresent() {
			t.Error("RulesPresent after Teardown")
		}
	})

	t.Run("cleanup", func(t *testing.T) {
		if err := node.Do(func() error {
			again, err := intercept.New(cfg)
			if err != nil {
				return err
			}
			if err := again.EnsureLink(); err != nil {
				return err
			}
			return again.EnsureRules()
		}); err != nil {
			t.Fatal(err)
		}
		// Leftovers of a crash: a duplicate, and a rule in the other
		// backend (the node switched backends).
		e.node.MustRun(t, "iptables-"+backend, "-t", "raw", "-A", "PREROUTING", "-p", "udp", "-d", localV4, "--dport", "53",
			"-m", "comment", "--comment", "nodedns: skip conntrack for queries to "+localV4+" udp/53", "-j", "NOTRACK")
		e.node.MustRun(t, "ip6tables-"+otherBack[backend], "-t", "filter", "-I", "INPUT", "-p", "tcp", "-d", localV6, "--dport", "53",
			"-m", "comment", "--comment", "nodedns: stale", "-j", "ACCEPT")
		if err := node.Do(func() error { return intercept.Cleanup(cfg) }); err != nil {
			t.Fatal(err)
		}
		if err := e.checkNoRules(); err != nil {
			t.Error(err)
		}
		if err := e.checkNoLink(); err != nil {
			t.Error(err)
		}
		// The seeded, foreign rules are untouched.
		if out := e.node.MustRun(t, "iptables-"+backend, "-S", "INPUT"); !strings.Contains(out, "--ctstate") {
			t.Errorf("cleanup removed a foreign rule:\n%s", out)
		}
	})
}

// agentArgs are the serve flags of an intercepting agent in the node
// namespace.
func (e *interceptEnv) agentArgs(extra ...string) []string {
	return append([]string{"serve",
		"--local-ip", strings.Join(localIPs, ","),
		"--interface", linkName,
		"--sync-interval", syncEvery.String(),
		"--upstream", e.upstream.Addr,
		"--admin", "",
		"--lameduck", "0s",
		"--loop-check=false",
		"--log-level", "debug",
	}, extra...)
}

// adminGet asks an agent's admin unix socket for path and returns the
// body of a 200 answer.
func adminGet(sock, path string) ([]byte, error) {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://nodedns" + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// interceptPasses reads how many reconcile passes the agent behind sock
// has made (/stats intercept.passes).
func interceptPasses(sock string) (uint64, error) {
	body, err := adminGet(sock, "/stats")
	if err != nil {
		return 0, err
	}
	var doc struct {
		Intercept *struct {
			Passes uint64 `json:"passes"`
		} `json:"intercept"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return 0, fmt.Errorf("/stats: %w", err)
	}
	if doc.Intercept == nil {
		return 0, fmt.Errorf("/stats has no intercept section")
	}
	return doc.Intercept.Passes, nil
}

// waitPasses waits until the agent p (admin socket sock) has made n
// reconcile passes more than it had at the first reading: what it would
// repair or duplicate it has done by then.
func waitPasses(t *testing.T, p *proc, sock string, n uint64) {
	t.Helper()
	var p0 uint64
	dnstest.Eventually(t, 15*time.Second, p.Name+"'s /stats", func() error {
		if p.Exited() {
			return fmt.Errorf("%s exited: %v", p.Name, p.err)
		}
		var err error
		p0, err = interceptPasses(sock)
		return err
	})
	dnstest.Eventually(t, time.Duration(n)*(syncEvery+passBudget)+5*time.Second, fmt.Sprintf("%d reconcile passes of %s", n, p.Name), func() error {
		if p.Exited() {
			return fmt.Errorf("%s exited: %v", p.Name, p.err)
		}
		got, err := interceptPasses(sock)
		if err != nil {
			return err
		}
		if got < p0+n {
			return fmt.Errorf("%d passes since the first reading", got-p0)
		}
		return nil
	})
}

// TestInterceptAgent runs the nodedns binary with --local-ip in the node
// namespace, once per iptables backend (chosen by detection, as on a node).
func TestInterceptAgent(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { testInterceptAgent(t, backend) })
	}
}

func testInterceptAgent(t *testing.T, backend string) {
	e := newInterceptEnv(t, backend)
	first := e.node.Start(t, "agent 1", nodednsBin, e.agentArgs()...)
	e.waitServing(t, first)

	t.Run("link", func(t *testing.T) {
		if err := e.checkLink(t); err != nil {
			t.Error(err)
		}
	})
	t.Run("answers", func(t *testing.T) {
		e.expectAnswers(t, e.pod)
		e.expectAnswers(t, e.node)
	})
	t.Run("untracked", func(t *testing.T) { e.checkConntrack(t) })

	t.Run("repair", func(t *testing.T) {
		// TestInterceptPackage proves the netlink path; here each repair
		// just has to land within one sync interval.
		e.deleteFirstRule(t)
		dnstest.Eventually(t, syncEvery+passBudget, "rule back within one sync interval", e.checkRulesOnce)
		e.node.MustRun(t, "ip", "addr", "del", localV6+"/128", "dev", linkName)
		dnstest.Eventually(t, syncEvery+passBudget, "address back", func() error { return e.checkLink(t) })
		e.node.MustRun(t, "ip", "link", "del", linkName)
		dnstest.Eventually(t, syncEvery+passBudget, "link back", func() error { return e.checkLink(t) })
		e.expectAnswers(t, e.pod)
	})

	t.Run("second agent", func(t *testing.T) {
		// An overlapping start (rolling update): same addresses through
		// SO_REUSEPORT, no duplicate rule; when it leaves, the first
		// agent still serves, so it must not tear anything down.
		sock := filepath.Join(t.TempDir(), "agent2.sock")
		second := e.node.Start(t, "agent 2", nodednsBin, e.agentArgs("--admin-socket", sock)...)
		// Two reconcile passes of the second agent after its start:
		// a duplicate it would add is there by then.
		waitPasses(t, second, sock, 2)
		if second.Exited() {
			t.Fatalf("second agent exited: %v", second.err)
		}
		if err := e.checkRulesOnce(); err != nil {
			t.Error(err)
		}
		if err := second.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("second agent: %v", err)
		}
		if err := e.checkRulesOnce(); err != nil {
			t.Errorf("after the second agent left: %v", err)
		}
		if err := e.checkLink(t); err != nil {
			t.Errorf("after the second agent left: %v", err)
		}
		e.expectAnswers(t, e.pod)
	})

	t.Run("restart after SIGKILL adds no duplicates", func(t *testing.T) {
		first.Kill()
		if err := e.checkRulesOnce(); err != nil {
			t.Errorf("after SIGKILL: %v", err)
		}
		sock := filepath.Join(t.TempDir(), "agent3.sock")
		third := e.node.Start(t, "agent 3", nodednsBin, e.agentArgs("--admin-socket", sock)...)
		e.waitServing(t, third)
		waitPasses(t, third, sock, 2) // sync passes too
		if err := e.checkRulesOnce(); err != nil {
			t.Error(err)
		}

		t.Run("teardown on exit", func(t *testing.T) {
			if err := third.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
				t.Errorf("agent exit: %v", err)
			}
			if err := e.checkNoRules(); err != nil {
				t.Error(err)
			}
			if err := e.checkNoLink(); err != nil {
				t.Error(err)
			}
		})
	})

	t.Run("teardown=false keeps everything", func(t *testing.T) {
		a := e.node.Start(t, "agent 4", nodednsBin, e.agentArgs("--teardown=false")...)
		e.waitServing(t, a)
		if err := a.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("agent exit: %v", err)
		}
		if err := e.checkRulesOnce(); err != nil {
			t.Error(err)
		}
		if err := e.checkLink(t); err != nil {
			t.Error(err)
		}
	})

	t.Run("cleanup command", func(t *testing.T) {
		// Left by the previous subtest, plus a stray copy in the other
		// backend.
		e.node.MustRun(t, "iptables-"+otherBack[backend], "-t", "raw", "-I", "OUTPUT", "-p", "udp", "-s", localV4, "--sport", "53",
			"-m", "comment", "--comment", "nodedns: stale", "-j", "NOTRACK")
		out, err := e.node.Run(nodednsBin, "cleanup", "--local-ip", strings.Join(localIPs, ","), "--interface", linkName)
		if err != nil {
			t.Fatalf("nodedns cleanup: %v\n%s", err, out)
		}
		if err := e.checkNoRules(); err != nil {
			t.Error(err)
		}
		if err := e.checkNoLink(); err != nil {
			t.Error(err)
		}
	})
}
