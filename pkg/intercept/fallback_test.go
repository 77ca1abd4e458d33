package intercept

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var (
	central1 = Target{Addr: netip.MustParseAddr("169.254.211.2"), UDPPort: 53, TCPPort: 53}
	central2 = Target{Addr: netip.MustParseAddr("169.254.211.3"), UDPPort: 53, TCPPort: 1053}
	central6 = Target{Addr: netip.MustParseAddr("fd00:211::2"), UDPPort: 53, TCPPort: 53}
	fbOn     = Config{LocalIPs: []netip.Addr{ip4, ip4b, ip6}, SetupIptables: true, Fallback: true}
)

// specOf finds the rule of ic.wanted whose comment starts with prefix and
// names ip and proto.
func (h *harness) wantedRule(t *testing.T, prefix string, ip netip.Addr, proto string) rule {
	t.Helper()
	c := fmt.Sprintf("%s%s %s %s/53", commentPrefix, prefix, ip, proto)
	for _, r := range h.ic.wanted {
		if r.comment == c {
			return r
		}
	}
	t.Fatalf("no wanted rule %q", c)
	return rule{}
}

// chain returns the family's fallback chain as rendered comments, and
// whether it exists.
func (h *harness) chain(v6 bool) ([]string, bool) {
	f := h.ops(v6)
	f.mu.Lock()
	defer f.mu.Unlock()
	k := "nat/" + fallbackChain
	var out []string
	for _, r := range f.chains[k] {
		out = append(out, commentOf(r))
	}
	return out, f.user[k]
}

// fallbackRules counts, in a family, the rules of the nat table and of
// filter FORWARD carrying a comment of ours.
func (h *harness) fallbackRules(v6 bool) int {
	f := h.ops(v6)
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, k := range []string{"nat/PREROUTING", "nat/POSTROUTING", "filter/FORWARD"} {
		for _, r := range f.chains[k] {
			if strings.HasPrefix(commentOf(r), commentPrefix) {
				n++
			}
		}
	}
	return n
}

func TestRenderChainSpreadsEvenly(t *testing.T) {
	got := renderChain(false, []Target{central1, central2, {Addr: netip.MustParseAddr("169.254.211.4"), UDPPort: 53, TCPPort: 53}})
	want := []string{
		`iptables -t nat NODEDNS-FALLBACK -p udp -m statistic --mode random --probability 0.3333333333 -m comment --comment "nodedns: fallback udp 1/3 to 169.254.211.2:53" -j DNAT --to-destination 169.254.211.2:53`,
		`iptables -t nat NODEDNS-FALLBACK -p udp -m statistic --mode random --probability 0.5000000000 -m comment --comment "nodedns: fallback udp 2/3 to 169.254.211.3:53" -j DNAT --to-destination 169.254.211.3:53`,
		`iptables -t nat NODEDNS-FALLBACK -p udp -m comment --comment "nodedns: fallback udp 3/3 to 169.254.211.4:53" -j DNAT --to-destination 169.254.211.4:53`,
		`iptables -t nat NODEDNS-FALLBACK -p tcp -m statistic --mode random --probability 0.3333333333 -m comment --comment "nodedns: fallback tcp 1/3 to 169.254.211.2:53" -j DNAT --to-destination 169.254.211.2:53`,
		`iptables -t nat NODEDNS-FALLBACK -p tcp -m statistic --mode random --probability 0.5000000000 -m comment --comment "nodedns: fallback tcp 2/3 to 169.254.211.3:1053" -j DNAT --to-destination 169.254.211.3:1053`,
		`iptables -t nat NODEDNS-FALLBACK -p tcp -m comment --comment "nodedns: fallback tcp 3/3 to 169.254.211.4:53" -j DNAT --to-destination 169.254.211.4:53`,
	}
	assertRendered(t, got, want)
	v6 := renderChain(true, []Target{central6})
	assertRendered(t, v6, []string{
		`ip6tables -t nat NODEDNS-FALLBACK -p udp -m comment --comment "nodedns: fallback udp 1/1 to [fd00:211::2]:53" -j DNAT --to-destination [fd00:211::2]:53`,
		`ip6tables -t nat NODEDNS-FALLBACK -p tcp -m comment --comment "nodedns: fallback tcp 1/1 to [fd00:211::2]:53" -j DNAT --to-destination [fd00:211::2]:53`,
	})
}

func TestRenderRulesDNATMode(t *testing.T) {
	got := renderRulesMode([]netip.Addr{ip4}, 0, func(netip.Addr) ipMode { return modeDNAT })
	want := []string{
		`iptables -t raw PREROUTING -p udp -d 169.254.20.10 --dport 53 -m socket -m comment --comment "nodedns: skip conntrack for queries to 169.254.20.10 udp/53" -j NOTRACK`,
		`iptables -t raw PREROUTING -p tcp -d 169.254.20.10 --dport 53 -m socket -m comment --comment "nodedns: skip conntrack for queries to 169.254.20.10 tcp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p udp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: skip conntrack for local queries to 169.254.20.10 udp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p tcp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: skip conntrack for local queries to 169.254.20.10 tcp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p udp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: skip conntrack for answers from 169.254.20.10 udp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p tcp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: skip conntrack for answers from 169.254.20.10 tcp/53" -j NOTRACK`,
		`iptables -t filter INPUT -p udp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: accept untracked queries to 169.254.20.10 udp/53" -j ACCEPT`,
		`iptables -t filter INPUT -p tcp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: accept untracked queries to 169.254.20.10 tcp/53" -j ACCEPT`,
		`iptables -t filter OUTPUT -p udp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: accept untracked answers from 169.254.20.10 udp/53" -j ACCEPT`,
		`iptables -t filter OUTPUT -p tcp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: accept untracked answers from 169.254.20.10 tcp/53" -j ACCEPT`,
		`iptables -t nat PREROUTING -p udp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: fallback for unserved queries to 169.254.20.10 udp/53" -j NODEDNS-FALLBACK`,
		`iptables -t nat PREROUTING -p tcp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: fallback for unserved queries to 169.254.20.10 tcp/53" -j NODEDNS-FALLBACK`,
		`iptables -t nat POSTROUTING -p udp -m conntrack --ctstate DNAT --ctorigdst 169.254.20.10 --ctorigdstport 53 -m comment --comment "nodedns: masquerade fallback queries to 169.254.20.10 udp/53" -j MASQUERADE`,
		`iptables -t nat POSTROUTING -p tcp -m conntrack --ctstate DNAT --ctorigdst 169.254.20.10 --ctorigdstport 53 -m comment --comment "nodedns: masquerade fallback queries to 169.254.20.10 tcp/53" -j MASQUERADE`,
		`iptables -t filter FORWARD -p udp -m conntrack --ctstate DNAT --ctorigdst 169.254.20.10 --ctorigdstport 53 -m comment --comment "nodedns: accept fallback flows of 169.254.20.10 udp/53" -j ACCEPT`,
		`iptables -t filter FORWARD -p tcp -m conntrack --ctstate DNAT --ctorigdst 169.254.20.10 --ctorigdstport 53 -m comment --comment "nodedns: accept fallback flows of 169.254.20.10 tcp/53" -j ACCEPT`,
	}
	assertRendered(t, got, want)
	// A ClusterIP (modeServed): the conditional NOTRACK and nothing of
	// the nat table.
	served := renderRulesMode([]netip.Addr{ip4}, 0, func(netip.Addr) ipMode { return modeServed })
	if len(served) != 10 || !hasSocketMatch(served[0].spec) || !served[0].served {
		t.Errorf("modeServed rendered %d rules, first %s", len(served), served[0])
	}
	// The comment does not depend on the mode: the next agent replaces a
	// NOTRACK of the other form instead of adding a second one.
	if served[0].comment != renderRules([]netip.Addr{ip4}, 0)[0].comment {
		t.Error("the NOTRACK's comment depends on the mode")
	}
}

func TestFallbackWaitingThenOn(t *testing.T) {
	h := newHarness(t, fbOn)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	st := h.ic.Status()
	if st.Fallback != FallbackWaiting || st.RulesWanted != 30 || st.RulesPresent != 30 {
		t.Errorf("before SetFallback: %+v", st)
	}
	if !hasSocketMatch(h.wantedRule(t, "skip conntrack for queries to", ip4, "udp").spec) {
		t.Error("NOTRACK not conditional while waiting")
	}
	if _, ok := h.chain(false); ok || h.fallbackRules(false)+h.fallbackRules(true) != 0 {
		t.Error("nat rules or a chain written before the targets are known")
	}

	// ip4b is a Service ClusterIP: kube-proxy's DNAT is its fallback.
	fb := Fallback{Targets: []Target{central1, central6, central2}, ClusterIPs: []netip.Addr{ip4b}}
	if err := h.ic.SetFallback(fb); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	c4, ok4 := h.chain(false)
	c6, ok6 := h.chain(true)
	if !ok4 || !ok6 || len(c4) != 4 || len(c6) != 2 || c4[0] != "nodedns: fallback udp 1/2 to 169.254.211.2:53" || c4[3] != "nodedns: fallback tcp 2/2 to 169.254.211.3:1053" {
		t.Errorf("chains: %q, %q", c4, c6)
	}
	// The jump, masquerade and forward rules for ip4 and ip6, none for
	// the ClusterIP.
	if n4, n6 := h.fallbackRules(false), h.fallbackRules(true); n4 != 6 || n6 != 6 {
		t.Errorf("fallback rules: %d IPv4, %d IPv6; want 6 each", n4, n6)
	}
	for _, r := range h.ic.wanted {
		if r.fallback && strings.Contains(r.comment, ip4b.String()+" ") {
			t.Errorf("fallback rule for the ClusterIP: %s", r)
		}
	}
	if !hasSocketMatch(h.wantedRule(t, "skip conntrack for queries to", ip4b, "tcp").spec) {
		t.Error("the ClusterIP's NOTRACK is not conditional")
	}
	st = h.ic.Status()
	if st.Fallback != FallbackOn || st.RulesWanted != 30+12+6 || st.RulesPresent != st.RulesWanted ||
		!slices.Equal(st.FallbackTargets4, []string{"169.254.211.2:53", "169.254.211.3 udp/53 tcp/1053"}) ||
		!slices.Equal(st.FallbackTargets6, []string{"[fd00:211::2]:53"}) ||
		!slices.Equal(st.FallbackClusterIPs, []string{ip4b.String()}) || st.FallbackUpdates != 1 {
		t.Errorf("after SetFallback: %+v", st)
	}
	if !h.ic.RulesPresent() {
		t.Error("RulesPresent = false")
	}

	// The same again changes nothing; a change of the IPv4 targets
	// rewrites the IPv4 chain only, in one ReplaceChain.
	h.r4.calls, h.r6.calls = map[string]int{}, map[string]int{}
	if err := h.ic.SetFallback(fb); err != nil {
		t.Fatal(err)
	}
	if h.r4.calls["ReplaceChain"]+h.r4.calls["Insert"]+h.r4.calls["List"] != 0 {
		t.Errorf("an unchanged SetFallback ran %v", h.r4.calls)
	}
	fb.Targets = []Target{central6, central2}
	if err := h.ic.SetFallback(fb); err != nil {
		t.Fatal(err)
	}
	if h.r4.calls["ReplaceChain"] != 1 || h.r6.calls["ReplaceChain"] != 0 || h.r4.calls["Save"]+h.r4.calls["Insert"]+h.r4.calls["Exists"] != 0 {
		t.Errorf("changing the IPv4 targets ran %v (IPv4) and %v (IPv6)", h.r4.calls, h.r6.calls)
	}
	if c4, _ := h.chain(false); !slices.Equal(c4, []string{"nodedns: fallback udp 1/1 to 169.254.211.3:53", "nodedns: fallback tcp 1/1 to 169.254.211.3:1053"}) {
		t.Errorf("IPv4 chain after the change: %q", c4)
	}
	h.assertRulesOnce(t)
}

func TestFallbackReconcileRepairsAndCountsFlows(t *testing.T) {
	h := newHarness(t, fbOn)
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central2}}); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	// The kernel counts flows while no agent runs; the next agent's first
	// read (at its start) counts them, and zeroes the counters.
	h.r4.hit("nodedns: fallback udp 1/2 to 169.254.211.2:53", 5)
	h.r4.hit("nodedns: fallback tcp 2/2 to 169.254.211.3:1053", 2)
	next := newInterceptor(h.ic.cfg, h.ic.cfg.Logger, h.links, h.r4, h.r6, BackendNFT)
	if err := next.SetFallback(Fallback{Targets: []Target{central1, central2}}); err != nil {
		t.Fatal(err)
	}
	if err := next.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	if st := next.Status(); st.FallbackFlows4 != 7 || st.FallbackFlows6 != 0 || st.Repairs != 0 {
		t.Errorf("after the start: %+v", st)
	}
	if h.logs.count("while no agent served") != 1 {
		t.Error("flows of the time no agent ran not logged")
	}
	h.r4.hit("nodedns: fallback udp 2/2 to 169.254.211.3:53", 1)
	next.reconcile("test")
	if st := next.Status(); st.FallbackFlows4 != 8 {
		t.Errorf("flows = %d, want 8 (counters zeroed at each read)", st.FallbackFlows4)
	}
	if h.logs.count("while this agent runs") != 1 {
		t.Error("flows while the agent runs not warned about")
	}
	h.ic = next

	// A chain emptied by hand (iptables -t nat -F) is written again, and
	// a jump removed by hand is put back: both repairs.
	h.r4.mu.Lock()
	h.r4.chains["nat/"+fallbackChain] = nil
	h.r4.mu.Unlock()
	jump := h.wantedRule(t, "fallback for unserved queries to", ip4, "udp")
	if err := h.r4.Delete(jump.table, jump.chain, jump.spec...); err != nil {
		t.Fatal(err)
	}
	h.ic.reconcile("test")
	h.assertRulesOnce(t)
	if c4, _ := h.chain(false); len(c4) != 4 {
		t.Errorf("chain not rewritten: %q", c4)
	}
	if st := h.ic.Status(); st.Repairs != 2 || st.RulesPresent != st.RulesWanted {
		t.Errorf("after the repairs: %+v", st)
	}
}

func TestFallbackOffAndOnAgain(t *testing.T) {
	h := newHarness(t, fbOn)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central6}}); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.SetFallback(Fallback{Off: true}); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if n := h.fallbackRules(false) + h.fallbackRules(true); n != 0 {
		t.Errorf("%d fallback rules left after turning it off", n)
	}
	for _, v6 := range []bool{false, true} {
		if _, ok := h.chain(v6); ok {
			t.Errorf("chain left (ipv6=%v)", v6)
		}
	}
	r := h.wantedRule(t, "skip conntrack for queries to", ip4, "udp")
	if hasSocketMatch(r.spec) || h.r4.count(r.table, r.chain, r.spec) != 1 || h.r4.total() != 10*2 {
		t.Errorf("off: NOTRACK %s, %d IPv4 rules", r, h.r4.total())
	}
	if st := h.ic.Status(); st.Fallback != FallbackOff || st.FallbackTargets4 != nil || st.RulesWanted != 30 {
		t.Errorf("off: %+v", st)
	}

	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1}}); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if n4, n6 := h.fallbackRules(false), h.fallbackRules(true); n4 != 12 || n6 != 6 {
		t.Errorf("on again: %d IPv4 and %d IPv6 fallback rules, want 12 and 6", n4, n6)
	}
	// No IPv6 target: the IPv6 chain exists, empty (a jump to it returns).
	if c6, ok := h.chain(true); !ok || len(c6) != 0 {
		t.Errorf("IPv6 chain %q (exists %v), want empty", c6, ok)
	}
}

func TestFallbackClusterIPLater(t *testing.T) {
	// Every IPv4 local IP turns out to be a ClusterIP: its nat rules and
	// the IPv4 chain go; the IPv6 side stays.
	h := newHarness(t, Config{LocalIPs: []netip.Addr{ip4, ip6}, SetupIptables: true, Fallback: true})
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central6}}); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central6}, ClusterIPs: []netip.Addr{ip4}}); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if _, ok := h.chain(false); ok || h.fallbackRules(false) != 0 {
		t.Error("IPv4 fallback rules or chain left for a ClusterIP")
	}
	if c6, ok := h.chain(true); !ok || len(c6) != 2 || h.fallbackRules(true) != 6 {
		t.Errorf("IPv6 side: chain %q, %d rules", c6, h.fallbackRules(true))
	}
}

func TestFallbackWaitingKeepsWhatAnEarlierAgentLeft(t *testing.T) {
	h := newHarness(t, fbOn)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central6}}); err != nil {
		t.Fatal(err)
	}
	before := h.r4.total() + h.r6.total()

	// The next agent (after a SIGKILL) starts on the same host with no
	// targets known yet (its index not synced): the earlier targets keep
	// serving meanwhile, and nothing is duplicated.
	next := newInterceptor(h.ic.cfg, h.ic.cfg.Logger, h.links, h.r4, h.r6, BackendNFT)
	if err := next.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	next.reconcile("test")
	if got := h.r4.total() + h.r6.total(); got != before {
		t.Errorf("%d rules after the next agent's start, want %d", got, before)
	}
	if c4, ok := h.chain(false); !ok || len(c4) != 2 {
		t.Errorf("the earlier chain was touched: %q", c4)
	}
	if st := next.Status(); st.Fallback != FallbackWaiting || !next.RulesPresent() {
		t.Errorf("next agent: %+v", st)
	}
	if err := next.SetFallback(Fallback{Targets: []Target{central1, central6}}); err != nil {
		t.Fatal(err)
	}
	if got := h.r4.total() + h.r6.total(); got != before {
		t.Errorf("%d rules once the next agent set the same targets, want %d", got, before)
	}
}

func TestFallbackSocketMatchUnavailable(t *testing.T) {
	h := newHarness(t, fbOn)
	h.r4.refuse = "socket" // the kernel lacks xt_socket for IPv4
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central6}}); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if r := h.wantedRule(t, "skip conntrack for queries to", ip4, "udp"); hasSocketMatch(r.spec) {
		t.Errorf("IPv4 NOTRACK still conditional: %s", r)
	}
	if r := h.wantedRule(t, "skip conntrack for queries to", ip6, "udp"); !hasSocketMatch(r.spec) {
		t.Errorf("IPv6 NOTRACK not conditional: %s", r)
	}
	if _, ok := h.chain(false); ok || h.fallbackRules(false) != 0 {
		t.Error("IPv4 fallback rules written without the socket match")
	}
	st := h.ic.Status()
	if st.Fallback != FallbackUnavailable || !strings.Contains(st.FallbackError, "socket") || st.RulesPresent != st.RulesWanted || st.LastError != "" {
		t.Errorf("status: %+v", st)
	}
	h.ic.reconcile("test")
	h.ic.reconcile("test")
	if n := h.logs.count("refused the socket match"); n != 1 {
		t.Errorf("logged %d times, want once", n)
	}
	h.assertRulesOnce(t)
}

func TestFallbackLockErrorDecidesNothing(t *testing.T) {
	h := newHarness(t, fbOn)
	h.r4.fail["Insert"] = exitErr(4) // the xtables lock
	if err := h.ic.EnsureRules(); err == nil {
		t.Fatal("EnsureRules succeeded with every insert failing")
	}
	if st := h.ic.Status(); st.Fallback != FallbackWaiting || st.Errors[ErrIptablesLock] == 0 {
		t.Errorf("a lock error decided the socket match: %+v", st)
	}
	delete(h.r4.fail, "Insert")
	h.ic.reconcile("test")
	h.assertRulesOnce(t)
	if r := h.wantedRule(t, "skip conntrack for queries to", ip4, "tcp"); !hasSocketMatch(r.spec) {
		t.Error("NOTRACK not conditional after the lock cleared")
	}
}

func TestFallbackTeardownRemovesEverything(t *testing.T) {
	h := newHarness(t, fbOn)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, central6}}); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.Teardown(); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		if n := h.ops(v6).total(); n != 0 {
			t.Errorf("%d rules left (ipv6=%v)", n, v6)
		}
		if _, ok := h.chain(v6); ok {
			t.Errorf("chain left (ipv6=%v)", v6)
		}
	}
}

func TestSetFallbackRefusesBadTargets(t *testing.T) {
	h := newHarness(t, fbOn)
	many := make([]Target, MaxFallbackTargets+1)
	for i := range many {
		many[i] = Target{Addr: netip.AddrFrom4([4]byte{169, 254, 1, byte(i + 1)}), UDPPort: 53, TCPPort: 53}
	}
	for _, fb := range []Fallback{
		{Targets: many},
		{Targets: []Target{{Addr: netip.MustParseAddr("127.0.0.1"), UDPPort: 53, TCPPort: 53}}},
		{Targets: []Target{{Addr: netip.MustParseAddr("::"), UDPPort: 53, TCPPort: 53}}},
		{Targets: []Target{{Addr: netip.MustParseAddr("169.254.1.1"), UDPPort: 0, TCPPort: 53}}},
		{Targets: []Target{{}}},
	} {
		if err := h.ic.SetFallback(fb); err == nil {
			t.Errorf("SetFallback(%v) accepted", fb.Targets)
		}
	}
	if st := h.ic.Status(); st.Fallback != FallbackWaiting || st.FallbackUpdates != 0 {
		t.Errorf("a refused SetFallback changed the state: %+v", st)
	}
	// Duplicates and IPv4-mapped addresses are folded.
	mapped := Target{Addr: netip.MustParseAddr("::ffff:169.254.211.2"), UDPPort: 53, TCPPort: 53}
	if err := h.ic.SetFallback(Fallback{Targets: []Target{central1, mapped, central1}}); err != nil {
		t.Fatal(err)
	}
	if st := h.ic.Status(); !slices.Equal(st.FallbackTargets4, []string{"169.254.211.2:53"}) || st.FallbackTargets6 != nil {
		t.Errorf("targets: %+v", st)
	}
}

func TestLinePackets(t *testing.T) {
	for line, want := range map[string]uint64{
		`-A NODEDNS-FALLBACK -p udp -m comment --comment "nodedns: fallback udp 1/1 to 169.254.211.2:53" -c 42 3360 -j DNAT --to-destination 169.254.211.2:53`: 42,
		`-A NODEDNS-FALLBACK -p udp -c 0 0 -j DNAT --to-destination 169.254.1.3:53`:                                                                            0,
		`-A NODEDNS-FALLBACK -p udp -j DNAT --to-destination 169.254.1.3:53`:                                                                                   0,
		`-A X -c many 1`: 0,
	} {
		if got := linePackets(line); got != want {
			t.Errorf("linePackets(%q) = %d, want %d", line, got, want)
		}
	}
}

func TestFallbackOffNeverTouchesTheNatTable(t *testing.T) {
	// kube-proxy in nftables mode leaves the iptables nat table absent;
	// listing it would create it.
	h := newHarness(t, Config{LocalIPs: dual, SetupIptables: true})
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.ic.reconcile("test")
	if err := h.ic.SetFallback(Fallback{Off: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.Teardown(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*fakeRules{h.r4, h.r6} {
		if f.tables["nat"] != 0 {
			t.Errorf("the nat table was named in %d iptables calls", f.tables["nat"])
		}
	}
	if st := h.ic.Status(); st.Fallback != FallbackOff {
		t.Errorf("status: %+v", st)
	}
}
