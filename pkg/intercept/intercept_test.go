package intercept

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
)

var (
	ip4   = netip.MustParseAddr("169.254.20.10")
	ip4b  = netip.MustParseAddr("169.254.20.11")
	ip6   = netip.MustParseAddr("fd00:20::10")
	dual  = []netip.Addr{ip4, ip6}
	allOn = Config{LocalIPs: dual, SetupInterface: true, SetupIptables: true}
)

func TestConfigNormalized(t *testing.T) {
	c, err := Config{LocalIPs: []netip.Addr{ip4, netip.MustParseAddr("::ffff:169.254.20.10"), ip6}, SetupIptables: true}.normalized()
	if err != nil {
		t.Fatal(err)
	}
	if c.Interface != DefaultInterface || c.SyncInterval != DefaultSyncInterval || c.Backend != BackendAuto || c.Logger == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	if !slices.Equal(c.LocalIPs, dual) {
		t.Errorf("LocalIPs = %v, want %v (unmapped, de-duplicated)", c.LocalIPs, dual)
	}
	for _, bad := range []Config{
		{SetupIptables: true},
		{LocalIPs: []netip.Addr{netip.MustParseAddr("0.0.0.0")}, SetupIptables: true},
		{LocalIPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, SetupIptables: true},
		{LocalIPs: []netip.Addr{netip.MustParseAddr("ff02::1")}, SetupIptables: true},
		{LocalIPs: []netip.Addr{{}}, SetupIptables: true},
		{LocalIPs: dual, Interface: "much-too-long-name"},
		{LocalIPs: dual, Interface: "a/b"},
		{LocalIPs: dual, SyncInterval: -time.Second},
		{LocalIPs: dual, Backend: "nftables"},
	} {
		if _, err := bad.normalized(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	// Neither link nor rules: no IPs needed (cleanup, standalone mode).
	if _, err := (Config{}).normalized(); err != nil {
		t.Errorf("empty config: %v", err)
	}
}

func TestEnsureRulesOnceAtTop(t *testing.T) {
	h := newHarness(t, allOn)
	h.r4.seed("filter", "INPUT", "-j", "KUBE-FIREWALL")
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if got := h.r4.chains["filter/INPUT"]; got[len(got)-1][1] != "KUBE-FIREWALL" {
		t.Errorf("our rules not above the existing one: %q", got)
	}
	if !h.ic.RulesPresent() {
		t.Error("RulesPresent = false after EnsureRules")
	}
	st := h.ic.Status()
	if st.RulesWanted != 20 || st.RulesPresent != 20 || st.Backend != BackendNFT || st.Repairs != 0 {
		t.Errorf("status = %+v", st)
	}

	// Idempotent: a second call (a restart) inserts nothing.
	inserts := h.r4.calls["Insert"] + h.r6.calls["Insert"]
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	if n := h.r4.calls["Insert"] + h.r6.calls["Insert"]; n != inserts {
		t.Errorf("second EnsureRules inserted %d rules", n-inserts)
	}
	h.assertRulesOnce(t)
	if n := h.r4.total() + h.r6.total(); n != 21 {
		t.Errorf("%d rules in total, want 20 + the seeded one", n)
	}
}

func TestPeriodicPassListsEachChainOnce(t *testing.T) {
	h := newHarness(t, allOn)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.r4.calls, h.r6.calls = map[string]int{}, map[string]int{}
	h.ic.reconcile("test")
	// raw PREROUTING, raw OUTPUT, filter INPUT, filter OUTPUT per family.
	for fam, f := range map[string]*fakeRules{"v4": h.r4, "v6": h.r6} {
		if f.calls["List"] != 4 || f.calls["Exists"] != 0 || f.calls["Insert"] != 0 || f.calls["Delete"] != 0 {
			t.Errorf("%s: a pass with nothing missing ran %v", fam, f.calls)
		}
	}
	// A missing rule is confirmed with Exists before it is inserted.
	r := h.ic.wanted[2]
	if err := h.ops(r.v6).Delete(r.table, r.chain, r.spec...); err != nil {
		t.Fatal(err)
	}
	h.r4.calls = map[string]int{}
	h.ic.reconcile("test")
	if h.r4.calls["Exists"] != 1 || h.r4.calls["Insert"] != 1 {
		t.Errorf("repairing one rule ran %v", h.r4.calls)
	}
	h.assertRulesOnce(t)
}

func TestEnsureRulesRemovesDuplicates(t *testing.T) {
	h := newHarness(t, Config{LocalIPs: []netip.Addr{ip4}, SetupIptables: true})
	a, b := h.ic.wanted[0], h.ic.wanted[6]
	for range 3 {
		h.r4.seed(a.table, a.chain, a.spec...)
	}
	h.r4.seed(b.table, b.chain, b.spec...)
	h.r4.seed(b.table, b.chain, "-j", "OTHER")
	h.r4.seed(b.table, b.chain, b.spec...)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if h.r4.count(b.table, b.chain, []string{"-j", "OTHER"}) != 1 {
		t.Error("a foreign rule was removed")
	}
}

func TestEnsureRulesReplacesStaleCopies(t *testing.T) {
	// A rule with our comment but another rendering (an older version, or
	// iptables' own -S form) alongside ours: one exact copy stays.
	h := newHarness(t, Config{LocalIPs: []netip.Addr{ip4}, SetupIptables: true})
	r := h.ic.wanted[0]
	stale := []string{"-d", "169.254.20.10/32", "-p", "udp", "-m", "udp", "--dport", "53", "-m", "comment", "--comment", r.comment, "-j", "NOTRACK"}
	h.r4.seed(r.table, r.chain, stale...)
	h.r4.seed(r.table, r.chain, r.spec...)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.assertRulesOnce(t)
	if n := h.r4.count(r.table, r.chain, stale); n != 0 {
		t.Errorf("stale copy still present %d times", n)
	}
}

func TestEnsureRulesReportsErrors(t *testing.T) {
	h := newHarness(t, Config{LocalIPs: []netip.Addr{ip4}, SetupIptables: true})
	h.r4.fail["Insert"] = errors.New("iptables: Resource temporarily unavailable")
	err := h.ic.EnsureRules()
	if err == nil || !strings.Contains(err.Error(), "inserting rule") {
		t.Fatalf("EnsureRules = %v, want an insert error", err)
	}
	if h.ic.RulesPresent() {
		t.Error("RulesPresent = true with no rule in place")
	}
	if st := h.ic.Status(); st.LastError == "" || st.RulesPresent != 0 {
		t.Errorf("status = %+v", st)
	}
	delete(h.r4.fail, "Insert")
	h.ic.reconcile("test")
	h.assertRulesOnce(t)
	if st := h.ic.Status(); st.LastError != "" || st.Repairs != 10 || !h.ic.RulesPresent() {
		t.Errorf("after recovery: %+v", st)
	}
}

func TestEnsureLinkCreatesAndConverges(t *testing.T) {
	h := newHarness(t, allOn)
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	l := h.links.link(DefaultInterface)
	if l.kind != kindDummy || !l.up || !slices.Equal(l.addrs, dual) {
		t.Errorf("link = %+v", l)
	}

	// An existing link, down, with a foreign address and one of ours
	// missing: add ours, remove nothing, bring it up.
	other := netip.MustParseAddr("169.254.1.1")
	h.links.links[DefaultInterface] = &fakeLink{kind: kindDummy, addrs: []netip.Addr{other, ip6}}
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	l = h.links.link(DefaultInterface)
	if !l.up || !slices.Equal(l.addrs, []netip.Addr{other, ip6, ip4}) {
		t.Errorf("converged link = %+v", l)
	}
	if st := h.ic.Status(); st.LinkType != kindDummy || st.Link != DefaultInterface || st.Repairs != 0 {
		t.Errorf("status = %+v", st)
	}
}

func TestDummyFallsBackToBridge(t *testing.T) {
	h := newHarness(t, allOn)
	h.links.noDummy = true
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if l := h.links.link(DefaultInterface); l.kind != kindBridge || !l.up || len(l.addrs) != 2 {
		t.Errorf("link = %+v, want an up bridge with both IPs", l)
	}
	// Recreated after a removal: straight to a bridge, no second log.
	delete(h.links.links, DefaultInterface)
	h.ic.reconcile("test")
	if l := h.links.link(DefaultInterface); l.kind != kindBridge || !l.up || len(l.addrs) != 2 {
		t.Errorf("recreated link = %+v", l)
	}
	if want := []string{kindDummy, kindBridge, kindBridge}; !slices.Equal(h.links.adds, want) {
		t.Errorf("link kinds tried = %v, want %v", h.links.adds, want)
	}
	if n := h.logs.count("no dummy link driver"); n != 1 {
		t.Errorf("fallback logged %d times, want once", n)
	}
	if st := h.ic.Status(); st.LinkType != kindBridge {
		t.Errorf("LinkType = %q", st.LinkType)
	}
}

func TestDummyErrorIsNotFallback(t *testing.T) {
	// Only "not supported" means no driver; any other failure is an error.
	h := newHarness(t, allOn)
	h.ic.links = failingAdd{h.links}
	err := h.ic.EnsureLink()
	if err == nil || !strings.Contains(err.Error(), "creating dummy link") {
		t.Fatalf("EnsureLink = %v", err)
	}
	if h.ic.kind != kindDummy {
		t.Error("switched to bridge on an unrelated error")
	}
}

type failingAdd struct{ *fakeLinks }

func (failingAdd) Add(string, string) error { return errors.New("permission denied") }

func TestReconcileCountsRepairs(t *testing.T) {
	h := newHarness(t, allOn)
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.ic.reconcile("test")
	if st := h.ic.Status(); st.Repairs != 0 || !st.LastRepair.IsZero() || st.Passes != 1 {
		t.Fatalf("repairs with nothing missing: %+v (want 1 pass)", st)
	}

	// Remove one rule, one address, and take the link down.
	r := h.ic.wanted[3]
	if err := h.ops(r.v6).Delete(r.table, r.chain, r.spec...); err != nil {
		t.Fatal(err)
	}
	if err := h.links.DelAddr(DefaultInterface, ip6); err != nil {
		t.Fatal(err)
	}
	h.links.links[DefaultInterface].up = false
	if h.ic.RulesPresent() != true {
		t.Error("RulesPresent must report the last pass, not run iptables")
	}
	h.ic.reconcile("test")
	st := h.ic.Status()
	if st.Repairs != 3 || !st.LastRepair.Equal(h.nowValue) || st.LastError != "" || st.Passes != 2 {
		t.Errorf("status = %+v, want 3 repairs at %v in the second pass", st, h.nowValue)
	}
	h.assertRulesOnce(t)
	if l := h.links.link(DefaultInterface); !l.up || len(l.addrs) != 2 {
		t.Errorf("link = %+v", l)
	}
	if h.logs.count("put back missing") != 1 {
		t.Error("repair not logged")
	}
}

func TestReconcileOnlyWhatWasEnsured(t *testing.T) {
	// Rules go in only after the listeners are bound: a reconcile before
	// EnsureRules must not add any.
	h := newHarness(t, allOn)
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	h.ic.reconcile("test")
	if n := h.r4.total() + h.r6.total(); n != 0 {
		t.Errorf("%d rules inserted before EnsureRules", n)
	}
	// Nothing managed: nothing touched.
	h2 := newHarness(t, Config{LocalIPs: dual})
	if err := h2.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if err := h2.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h2.ic.reconcile("test")
	if len(h2.links.links) != 0 || h2.r4.total() != 0 || len(h2.r4.calls) != 0 {
		t.Error("touched the host with SetupInterface and SetupIptables off")
	}
	if !h2.ic.RulesPresent() {
		t.Error("RulesPresent must be true when rules are not managed")
	}
}

func TestRunRepairsOnNetlinkEvent(t *testing.T) {
	cfg := allOn
	cfg.SyncInterval = time.Hour // only the event can trigger a pass
	h := newHarness(t, cfg)
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ic.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	dnstest.WaitFor(t, 5*time.Second, "watch", func() bool {
		h.links.mu.Lock()
		defer h.links.mu.Unlock()
		return h.links.events != nil
	})

	if err := h.links.DelAddr(DefaultInterface, ip4); err != nil {
		t.Fatal(err)
	}
	h.links.fire()
	dnstest.WaitFor(t, 5*time.Second, "address put back", func() bool { return h.ic.Status().Repairs == 1 })
	if l := h.links.link(DefaultInterface); !slices.Contains(l.addrs, ip4) {
		t.Errorf("addresses = %v", l.addrs)
	}

	// A broken subscription triggers a full pass at once.
	if err := h.links.Del(DefaultInterface); err != nil {
		t.Fatal(err)
	}
	h.links.breakWatch()
	dnstest.WaitFor(t, 5*time.Second, "link recreated", func() bool { return h.ic.Status().Repairs == 1+4 }) // link, 2 addresses, up
}

func TestRunPeriodicSyncRepairsRules(t *testing.T) {
	cfg := allOn
	cfg.SyncInterval = 20 * time.Millisecond
	h := newHarness(t, cfg)
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ic.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	r := h.ic.wanted[len(h.ic.wanted)-1]
	if err := h.ops(r.v6).Delete(r.table, r.chain, r.spec...); err != nil {
		t.Fatal(err)
	}
	dnstest.WaitFor(t, 5*time.Second, "rule put back", func() bool { return h.ic.Status().Repairs == 1 })
	h.assertRulesOnce(t)
}

func TestRunStopsOnCancel(t *testing.T) {
	h := newHarness(t, allOn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ic.Run(ctx)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestTeardown(t *testing.T) {
	h := newHarness(t, allOn)
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	// Extra copies (a crashed overlap) and a foreign rule.
	r := h.ic.wanted[0]
	h.ops(r.v6).seed(r.table, r.chain, r.spec...)
	h.r4.seed("filter", "INPUT", "-j", "KUBE-FIREWALL")
	if err := h.ic.Teardown(); err != nil {
		t.Fatal(err)
	}
	if n := h.r4.total() + h.r6.total(); n != 1 {
		t.Errorf("%d rules left, want only the foreign one", n)
	}
	if _, ok := h.links.links[DefaultInterface]; ok {
		t.Error("link left behind")
	}
	if h.ic.RulesPresent() {
		t.Error("RulesPresent after Teardown")
	}
	// Nothing comes back afterwards.
	h.ic.reconcile("test")
	if _, ok := h.links.links[DefaultInterface]; ok || h.r4.total() != 1 {
		t.Error("reconcile after Teardown re-created state")
	}
}

func TestTeardownKeepsForeignLink(t *testing.T) {
	for _, l := range []*fakeLink{
		{kind: "veth", up: true},
		{kind: kindBridge, up: true, ports: 1},
	} {
		h := newHarness(t, allOn)
		other := netip.MustParseAddr("169.254.1.1")
		l.addrs = []netip.Addr{other}
		h.links.links[DefaultInterface] = l
		if err := h.ic.EnsureLink(); err != nil {
			t.Fatal(err)
		}
		if err := h.ic.Teardown(); err != nil {
			t.Fatal(err)
		}
		got := h.links.link(DefaultInterface)
		if got.kind != l.kind || !slices.Equal(got.addrs, []netip.Addr{other}) {
			t.Errorf("%s link after teardown = %+v, want kept with only its own address", l.kind, got)
		}
	}
}

// TestTeardownKeepsUnmarkedLink: a dummy link or an empty bridge that
// carries the configured name but was not created by nodedns (another
// program's, NodeLocal DNSCache's) is used and left in place at teardown,
// with what was on it; only the addresses this agent added go. Such links
// used to be deleted because of their kind.
func TestTeardownKeepsUnmarkedLink(t *testing.T) {
	for _, kind := range []string{kindDummy, kindBridge} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, allOn)
			other := netip.MustParseAddr("169.254.1.1")
			// ip4 was on it already (e.g. NodeLocal DNSCache's), ip6 was not.
			h.links.links[DefaultInterface] = &fakeLink{kind: kind, up: true, addrs: []netip.Addr{other, ip4}}
			if err := h.ic.EnsureLink(); err != nil {
				t.Fatal(err)
			}
			if st := h.ic.Status(); st.LinkOwned {
				t.Error("status says the link is ours")
			}
			if h.logs.count("not created by nodedns") != 1 {
				t.Error("using a foreign link not logged")
			}
			if err := h.ic.Teardown(); err != nil {
				t.Fatal(err)
			}
			got := h.links.link(DefaultInterface)
			if got.kind != kind || !slices.Equal(got.addrs, []netip.Addr{other, ip4}) {
				t.Errorf("after teardown: %+v, want the %s link with its own addresses (ip6, which we added, removed)", got, kind)
			}
		})
	}
}

// TestLinkMarkSurvivesRestart: the link one agent creates carries the
// mark in the kernel, so the next agent (another process, another
// Interceptor) deletes it at teardown; a link whose mark cannot be set is
// deleted again at once.
func TestLinkMarkSurvivesRestart(t *testing.T) {
	for _, noDummy := range []bool{false, true} {
		h := newHarness(t, allOn)
		h.links.noDummy = noDummy
		if err := h.ic.EnsureLink(); err != nil {
			t.Fatal(err)
		}
		if l := h.links.link(DefaultInterface); l.alias != linkAlias {
			t.Fatalf("created link not marked: %+v", l)
		}
		// The first agent is SIGKILLed: no teardown. The next one starts.
		next := newInterceptor(h.ic.cfg, h.ic.log, h.links, h.r4, h.r6, BackendNFT)
		if err := next.EnsureLink(); err != nil {
			t.Fatal(err)
		}
		if !next.Status().LinkOwned {
			t.Error("the next agent does not see the link as nodedns's")
		}
		if err := next.Teardown(); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.links.links[DefaultInterface]; ok {
			t.Errorf("noDummy=%v: the next agent left the marked link", noDummy)
		}
	}

	h := newHarness(t, allOn)
	h.links.aliasErr = errors.New("operation not permitted")
	if err := h.ic.EnsureLink(); err == nil || !strings.Contains(err.Error(), "marking") {
		t.Fatalf("EnsureLink = %v, want the marking error", err)
	}
	if _, ok := h.links.links[DefaultInterface]; ok {
		t.Error("an unmarked link was left behind")
	}

	// A marked bridge someone enslaved a port to is theirs now.
	h = newHarness(t, allOn)
	h.links.links[DefaultInterface] = &fakeLink{kind: kindBridge, up: true, ports: 1, alias: linkAlias}
	if err := h.ic.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	if err := h.ic.Teardown(); err != nil {
		t.Fatal(err)
	}
	if l := h.links.link(DefaultInterface); l.kind != kindBridge || len(l.addrs) != 0 {
		t.Errorf("bridge with a port: %+v, want kept, our addresses removed", l)
	}
}

func TestOtherBackendPurgedOnEnsureAndTeardown(t *testing.T) {
	h := newHarness(t, allOn)
	var calls []map[string]bool
	h.ic.purgeOther = func(comments map[string]bool) (int, error) {
		calls = append(calls, comments)
		return 1, nil
	}
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	h.ic.reconcile("test") // periodic passes leave the other backend alone
	if err := h.ic.Teardown(); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("purgeOther called %d times, want 2 (EnsureRules, Teardown)", len(calls))
	}
	for _, r := range h.ic.wanted {
		if !calls[0][r.comment] {
			t.Errorf("comment %q not purged from the other backend", r.comment)
		}
	}
	h.ic.purgeOther = func(map[string]bool) (int, error) { return 0, errors.New("xtables lock") }
	if err := h.ic.EnsureRules(); err == nil || !strings.Contains(err.Error(), "other iptables backend") {
		t.Errorf("EnsureRules = %v, want the purge error", err)
	}
}

func TestCleanupHelpersFindEveryCopy(t *testing.T) {
	// Cleanup reads iptables-save output: every rule with our prefix, any
	// IP, any copy; nothing else.
	h := newHarness(t, Config{LocalIPs: []netip.Addr{ip4, ip4b}, SetupIptables: true, AdminPort: 8080})
	if err := h.ic.EnsureRules(); err != nil {
		t.Fatal(err)
	}
	r := h.ic.wanted[0]
	h.r4.seed(r.table, r.chain, r.spec...)
	h.r4.seed("nat", "PREROUTING", "-j", "KUBE-SERVICES")
	found := ourSavedRules(h.r4.save(), nil)
	if len(found) != len(h.ic.wanted)+1 {
		t.Fatalf("found %d rules, want %d", len(found), len(h.ic.wanted)+1)
	}
	for _, s := range found {
		if err := h.r4.Delete(s.table, s.chain, s.spec...); err != nil {
			t.Fatalf("deleting %+v: %v", s, err)
		}
	}
	if h.r4.total() != 1 {
		t.Errorf("%d rules left, want the foreign one", h.r4.total())
	}
}
