//go:build integration

package integration

// The DNS fallback for real: the node and pod namespaces of the
// interception tests, plus a "central DNS" namespace joined to the node by
// a second veth pair, holding a DNS server that answers differently from
// the agent's upstream, given to the agent as its only fallback target
// (IPv4 and IPv6). While the agent serves, it answers and the flows stay
// out of conntrack; once it is SIGKILLed, the kernel alone sends queries
// to the central server; when it comes back, it answers again. The node's
// FORWARD policy drops: the fallback's own ACCEPT rules must carry the
// flows.

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

const (
	centralV4   = "169.254.211.2"
	centralV6   = "fd00:211::2"
	centralA    = "192.0.2.99" // what the central server answers for A; data only
	fallbackGap = 2 * time.Second
)

// fallbackEnv is an interceptEnv with a central DNS server.
type fallbackEnv struct {
	*interceptEnv
	central  *dnstest.Server // on centralV4:53
	central6 *dnstest.Server // on [centralV6]:53
}

func newFallbackEnv(t *testing.T, backend string) *fallbackEnv {
	t.Helper()
	e := &fallbackEnv{interceptEnv: newInterceptEnv(t, backend)}
	cen := newNetNS(t, "central")
	vethPair(t,
		e.node, "veth-cen", []netip.Prefix{netip.MustParsePrefix("169.254.211.1/24"), netip.MustParsePrefix("fd00:211::1/64")},
		cen, "eth0", []netip.Prefix{netip.MustParsePrefix(centralV4 + "/24"), netip.MustParsePrefix(centralV6 + "/64")})
	e.node.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	// Nothing is forwarded unless a rule accepts it.
	for _, ipt := range []string{"iptables-", "ip6tables-"} {
		e.node.MustRun(t, ipt+backend, "-P", "FORWARD", "DROP")
	}
	answer := dnstest.Records(dns.RcodeSuccess, "{q} 30 IN A "+centralA)
	if err := cen.Do(func() error {
		var err error
		if e.central, err = dnstest.Listen(centralV4+":53", answer); err != nil {
			return err
		}
		t.Cleanup(e.central.Close)
		if e.central6, err = dnstest.Listen("["+centralV6+"]:53", answer); err != nil {
			return err
		}
		t.Cleanup(e.central6.Close)
		return nil
	}); err != nil {
		t.Fatalf("starting the central DNS server: %v", err)
	}
	return e
}

func (e *fallbackEnv) agentArgs() []string {
	return e.interceptEnv.agentArgs("--fallback-dns", centralV4+",["+centralV6+"]:53")
}

// askAll asks every local IP from the pod over UDP and TCP and fails
// unless each answer is want.
func (e *fallbackEnv) askAll(t *testing.T, want string) {
	t.Helper()
	for _, ip := range localIPs {
		for _, tcp := range []bool{false, true} {
			name := fmt.Sprintf("q%d.example.test.", time.Now().UnixNano())
			if got, err := dig(e.pod, ip, tcp, name); err != nil || got != want {
				t.Errorf("dig @%s (tcp=%v) from the pod: %q, %v; want %s", ip, tcp, got, err, want)
			}
		}
	}
}

// fallbackRule is one rule of ours as iptables-save prints it: its table,
// the start of its line up to the comment, and its target.
type fallbackRule struct{ table, prefix, target string }

// wantFallbackRules are our rules for one local IP with the fallback on
// (target its one fallback target), and the chain's rules of its family.
func wantFallbackRules(ip, target string) []fallbackRule {
	host, to := ip+"/32", target+":53"
	if strings.Contains(ip, ":") {
		host, to = ip+"/128", "["+target+"]:53"
	}
	var out []fallbackRule
	for _, w := range wantRules(ip) {
		table, rest, _ := strings.Cut(w.prefix, " ")
		if strings.HasPrefix(rest, "-A PREROUTING ") { // conditional on a local socket
			rest += "-m socket "
		}
		out = append(out, fallbackRule{table, rest, w.target})
	}
	for _, p := range []string{"udp", "tcp"} {
		ct := "-p " + p + " -m conntrack --ctstate DNAT --ctorigdst " + ip + " --ctorigdstport 53 "
		out = append(out,
			fallbackRule{"nat", "-A PREROUTING -d " + host + " -p " + p + " -m " + p + " --dport 53 ", "NODEDNS-FALLBACK"},
			fallbackRule{"nat", "-A POSTROUTING " + ct, "MASQUERADE"},
			fallbackRule{"filter", "-A FORWARD " + ct, "ACCEPT"},
			fallbackRule{"nat", "-A NODEDNS-FALLBACK -p " + p + " ", "DNAT --to-destination " + to},
		)
	}
	return out
}

// saved reads one backend's iptables-save of a family.
func (e *fallbackEnv) saved(backend string, v6 bool) (string, error) {
	save := "iptables-" + backend + "-save"
	if v6 {
		save = "ip6tables-" + backend + "-save"
	}
	return e.node.Run(save)
}

// checkFallbackRules reports unless each of our rules, the fallback's
// included, is in the backend under test exactly once, with nothing else
// of ours, the chain declared once per family, and nothing of ours in the
// other backend.
func (e *fallbackEnv) checkFallbackRules() error {
	var problems []string
	for _, ip := range localIPs {
		v6 := strings.Contains(ip, ":")
		target := centralV4
		if v6 {
			target = centralV6
		}
		out, err := e.saved(e.backend, v6)
		if err != nil {
			return err
		}
		type line struct{ table, text string }
		var ours []line
		chains := 0
		table := ""
		for _, l := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(l, "*"):
				table = l[1:]
			case strings.HasPrefix(l, ":NODEDNS-FALLBACK "):
				chains++
			case strings.HasPrefix(l, "-A ") && strings.Contains(l, `--comment "nodedns: `):
				ours = append(ours, line{table, l})
			}
		}
		want := wantFallbackRules(ip, target)
		for _, w := range want {
			n := 0
			for _, h := range ours {
				if h.table == w.table && strings.HasPrefix(h.text, w.prefix) && strings.HasSuffix(h.text, " -j "+w.target) {
					n++
				}
			}
			if n != 1 {
				problems = append(problems, fmt.Sprintf("%s %q...-j %s present %d times", w.table, w.prefix, w.target, n))
			}
		}
		if len(ours) != len(want) || chains != 1 {
			problems = append(problems, fmt.Sprintf("%d rules of ours and %d NODEDNS-FALLBACK chains for %s, want %d and 1: %q", len(ours), chains, ip, len(want), ours))
		}
		other, err := e.saved(otherBack[e.backend], v6)
		if err != nil {
			return err
		}
		if strings.Contains(other, "nodedns: ") || strings.Contains(other, "NODEDNS-FALLBACK") {
			problems = append(problems, fmt.Sprintf("ours in the %s backend:\n%s", otherBack[e.backend], other))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("rules: %s", strings.Join(problems, "; "))
	}
	return nil
}

// checkNothingLeft reports any rule or chain of ours in either backend.
func (e *fallbackEnv) checkNothingLeft() error {
	if err := e.checkNoRules(); err != nil {
		return err
	}
	for _, b := range backends {
		for _, v6 := range []bool{false, true} {
			out, err := e.saved(b, v6)
			if err != nil {
				return err
			}
			if strings.Contains(out, "NODEDNS-FALLBACK") {
				return fmt.Errorf("chain left in %s (ipv6=%v):\n%s", b, v6, out)
			}
		}
	}
	return nil
}

// startAgent starts an agent and waits until it serves the pod with the
// fallback's rules in place.
func (e *fallbackEnv) startAgent(t *testing.T, label string) *proc {
	t.Helper()
	a := e.node.Start(t, label, nodednsBin, e.agentArgs()...)
	dnstest.Eventually(t, 15*time.Second, label+" serving with the fallback's rules in place", func() error {
		if a.Exited() {
			return fmt.Errorf("%s exited: %v", label, a.err)
		}
		if err := e.checkFallbackRules(); err != nil {
			return err
		}
		if got, err := dig(e.pod, localV4, false, "ready.example.test."); err != nil || got != answerA {
			return fmt.Errorf("dig: %q, %v", got, err)
		}
		return nil
	})
	return a
}

// TestFallback runs the agent with --fallback-dns in the node namespace,
// once per iptables backend.
func TestFallback(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { testFallback(t, backend) })
	}
}

func testFallback(t *testing.T, backend string) {
	e := newFallbackEnv(t, backend)
	first := e.startAgent(t, "agent 1")

	t.Run("agent answers, untracked", func(t *testing.T) {
		for _, fam := range []string{"ipv4", "ipv6"} {
			e.node.MustRun(t, "conntrack", "-F", "-f", fam)
		}
		e.askAll(t, answerA)
		for _, fam := range []string{"ipv4", "ipv6"} {
			out := e.node.MustRun(t, "conntrack", "-L", "-f", fam)
			for _, l := range strings.Split(out, "\n") {
				for _, ip := range localIPs {
					if strings.Contains(l, "port=53 ") && strings.Contains(l, "="+ip+" ") {
						t.Errorf("conntrack entry for a DNS flow to %s while the agent serves: %s", ip, l)
					}
				}
			}
		}
		if n := e.central.Count() + e.central6.Count(); n != 0 {
			t.Errorf("the central server got %d queries while the agent serves", n)
		}
	})

	t.Run("rules and chain", func(t *testing.T) {
		if err := e.checkFallbackRules(); err != nil {
			t.Error(err)
		}
	})

	t.Run("agent killed: the central DNS answers", func(t *testing.T) {
		first.Kill()
		// The first query after the process is gone is answered: measured,
		// and bounded.
		start := time.Now()
		tries := 0
		dnstest.Eventually(t, fallbackGap, "the central DNS answering over UDP", func() error {
			tries++
			got, err := dig(e.pod, localV4, false, fmt.Sprintf("k%d.example.test.", time.Now().UnixNano()), "+time=1")
			if err != nil || got != centralA {
				return fmt.Errorf("dig: %q, %v", got, err)
			}
			return nil
		})
		t.Logf("%s: the central DNS answered %v after the agent's exit, at query %d", backend, time.Since(start).Round(time.Millisecond), tries)
		e.askAll(t, centralA)
		if e.central.Count() == 0 || e.central6.Count() == 0 || e.central.TCPCount() == 0 || e.central6.TCPCount() == 0 {
			t.Errorf("central server queries: ipv4 %d (tcp %d), ipv6 %d (tcp %d); want both families over both protocols",
				e.central.Count(), e.central.TCPCount(), e.central6.Count(), e.central6.TCPCount())
		}
		if err := e.checkFallbackRules(); err != nil {
			t.Errorf("after SIGKILL: %v", err)
		}
	})

	second := e.startAgent(t, "agent 2")
	t.Run("agent back: it answers again", func(t *testing.T) {
		before := e.central.Count() + e.central6.Count()
		e.askAll(t, answerA)
		if n := e.central.Count() + e.central6.Count() - before; n != 0 {
			t.Errorf("the central server got %d queries once the agent was back", n)
		}
		if err := e.checkFallbackRules(); err != nil {
			t.Error(err)
		}
	})

	t.Run("teardown on exit", func(t *testing.T) {
		if err := second.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("agent exit: %v", err)
		}
		if err := e.checkNothingLeft(); err != nil {
			t.Error(err)
		}
	})

	t.Run("cleanup command", func(t *testing.T) {
		third := e.startAgent(t, "agent 3")
		third.Kill()
		out, err := e.node.Run(nodednsBin, "cleanup", "--local-ip", strings.Join(localIPs, ","), "--interface", linkName)
		if err != nil {
			t.Fatalf("nodedns cleanup: %v\n%s", err, out)
		}
		if err := e.checkNothingLeft(); err != nil {
			t.Error(err)
		}
		if err := e.checkNoLink(); err != nil {
			t.Error(err)
		}
	})
}
