package intercept

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestRenderRulesIPv4(t *testing.T) {
	got := renderRules([]netip.Addr{netip.MustParseAddr("169.254.20.10")}, 0)
	want := []string{
		`iptables -t raw PREROUTING -p udp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: skip conntrack for queries to 169.254.20.10 udp/53" -j NOTRACK`,
		`iptables -t raw PREROUTING -p tcp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: skip conntrack for queries to 169.254.20.10 tcp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p udp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: skip conntrack for local queries to 169.254.20.10 udp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p tcp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: skip conntrack for local queries to 169.254.20.10 tcp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p udp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: skip conntrack for answers from 169.254.20.10 udp/53" -j NOTRACK`,
		`iptables -t raw OUTPUT -p tcp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: skip conntrack for answers from 169.254.20.10 tcp/53" -j NOTRACK`,
		`iptables -t filter INPUT -p udp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: accept untracked queries to 169.254.20.10 udp/53" -j ACCEPT`,
		`iptables -t filter INPUT -p tcp -d 169.254.20.10 --dport 53 -m comment --comment "nodedns: accept untracked queries to 169.254.20.10 tcp/53" -j ACCEPT`,
		`iptables -t filter OUTPUT -p udp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: accept untracked answers from 169.254.20.10 udp/53" -j ACCEPT`,
		`iptables -t filter OUTPUT -p tcp -s 169.254.20.10 --sport 53 -m comment --comment "nodedns: accept untracked answers from 169.254.20.10 tcp/53" -j ACCEPT`,
	}
	assertRendered(t, got, want)
}

func TestRenderRulesIPv6WithAdmin(t *testing.T) {
	got := renderRules([]netip.Addr{netip.MustParseAddr("fd00:20::10")}, 8080)
	want := []string{
		`ip6tables -t raw PREROUTING -p udp -d fd00:20::10 --dport 53 -m comment --comment "nodedns: skip conntrack for queries to fd00:20::10 udp/53" -j NOTRACK`,
		`ip6tables -t raw PREROUTING -p tcp -d fd00:20::10 --dport 53 -m comment --comment "nodedns: skip conntrack for queries to fd00:20::10 tcp/53" -j NOTRACK`,
		`ip6tables -t raw OUTPUT -p udp -d fd00:20::10 --dport 53 -m comment --comment "nodedns: skip conntrack for local queries to fd00:20::10 udp/53" -j NOTRACK`,
		`ip6tables -t raw OUTPUT -p tcp -d fd00:20::10 --dport 53 -m comment --comment "nodedns: skip conntrack for local queries to fd00:20::10 tcp/53" -j NOTRACK`,
		`ip6tables -t raw OUTPUT -p udp -s fd00:20::10 --sport 53 -m comment --comment "nodedns: skip conntrack for answers from fd00:20::10 udp/53" -j NOTRACK`,
		`ip6tables -t raw OUTPUT -p tcp -s fd00:20::10 --sport 53 -m comment --comment "nodedns: skip conntrack for answers from fd00:20::10 tcp/53" -j NOTRACK`,
		`ip6tables -t filter INPUT -p udp -d fd00:20::10 --dport 53 -m comment --comment "nodedns: accept untracked queries to fd00:20::10 udp/53" -j ACCEPT`,
		`ip6tables -t filter INPUT -p tcp -d fd00:20::10 --dport 53 -m comment --comment "nodedns: accept untracked queries to fd00:20::10 tcp/53" -j ACCEPT`,
		`ip6tables -t filter OUTPUT -p udp -s fd00:20::10 --sport 53 -m comment --comment "nodedns: accept untracked answers from fd00:20::10 udp/53" -j ACCEPT`,
		`ip6tables -t filter OUTPUT -p tcp -s fd00:20::10 --sport 53 -m comment --comment "nodedns: accept untracked answers from fd00:20::10 tcp/53" -j ACCEPT`,
		`ip6tables -t raw OUTPUT -p tcp -d fd00:20::10 --dport 8080 -m comment --comment "nodedns: skip conntrack for admin requests to fd00:20::10 tcp/8080" -j NOTRACK`,
		`ip6tables -t raw OUTPUT -p tcp -s fd00:20::10 --sport 8080 -m comment --comment "nodedns: skip conntrack for admin answers from fd00:20::10 tcp/8080" -j NOTRACK`,
	}
	assertRendered(t, got, want)
	for _, r := range got {
		if !r.v6 {
			t.Errorf("rule %s: not marked IPv6", r)
		}
	}
}

func TestRenderRulesDualStackAreUnique(t *testing.T) {
	rules := renderRules([]netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("169.254.20.11"), netip.MustParseAddr("fd00:20::10")}, 9153)
	if len(rules) != 3*12 {
		t.Fatalf("rendered %d rules, want 36", len(rules))
	}
	// The comment identifies a rule within its chain: duplicates and
	// teardown rely on it.
	seen := make(map[string]bool)
	for _, r := range rules {
		k := r.key() + "|" + r.comment
		if seen[k] {
			t.Errorf("comment %q used twice in %s", r.comment, r.key())
		}
		seen[k] = true
		if !strings.HasPrefix(r.comment, commentPrefix) {
			t.Errorf("comment %q lacks the prefix", r.comment)
		}
		if len(r.comment) > 255 {
			t.Errorf("comment %q longer than iptables allows", r.comment)
		}
	}
}

func assertRendered(t *testing.T, got []rule, want []string) {
	t.Helper()
	var lines []string
	for _, r := range got {
		lines = append(lines, r.String())
	}
	if !slices.Equal(lines, want) {
		t.Errorf("rendered rules:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestSplitRuleLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`-A INPUT -d 169.254.20.10/32 -p udp -m udp --dport 53 -m comment --comment "nodedns: a b" -j ACCEPT`,
			[]string{"-A", "INPUT", "-d", "169.254.20.10/32", "-p", "udp", "-m", "udp", "--dport", "53", "-m", "comment", "--comment", "nodedns: a b", "-j", "ACCEPT"}},
		{`-A X -m comment --comment "say \"hi\" \\ ok" -j RETURN`,
			[]string{"-A", "X", "-m", "comment", "--comment", `say "hi" \ ok`, "-j", "RETURN"}},
		{`-A X -m comment --comment nodedns:plain -j RETURN`,
			[]string{"-A", "X", "-m", "comment", "--comment", "nodedns:plain", "-j", "RETURN"}},
		{`-A X -m comment --comment "" -j RETURN`,
			[]string{"-A", "X", "-m", "comment", "--comment", "", "-j", "RETURN"}},
	} {
		got, err := splitRuleLine(tc.line)
		if err != nil {
			t.Errorf("splitRuleLine(%q): %v", tc.line, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("splitRuleLine(%q) = %q, want %q", tc.line, got, tc.want)
		}
		// quoteSpec is its inverse.
		back, err := splitRuleLine(strings.Join(quoteSpec(got), " "))
		if err != nil || !slices.Equal(back, got) {
			t.Errorf("round trip of %q = %q, %v", got, back, err)
		}
	}
	if _, err := splitRuleLine(`-A X --comment "open`); err == nil {
		t.Error("unterminated quote: no error")
	}
}

func TestOurSavedRules(t *testing.T) {
	save := `# Generated by iptables-nft-save v1.8.9 (nf_tables)
*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -d 169.254.20.10/32 -p udp -m udp --dport 53 -m comment --comment "nodedns: skip conntrack for queries to 169.254.20.10 udp/53" -j NOTRACK
-A PREROUTING -j KUBE-RAW
COMMIT
*filter
:INPUT ACCEPT [0:0]
-A INPUT -m comment --comment "kubernetes firewall" -j KUBE-FIREWALL
-A INPUT -d 169.254.20.99/32 -p tcp -m tcp --dport 53 -m comment --comment "nodedns: accept untracked queries to 169.254.20.99 tcp/53" -j ACCEPT
COMMIT
`
	got := ourSavedRules([]byte(save), nil)
	if len(got) != 2 {
		t.Fatalf("found %d rules, want 2: %+v", len(got), got)
	}
	if got[0].table != "raw" || got[0].chain != "PREROUTING" || got[0].spec[len(got[0].spec)-1] != "NOTRACK" {
		t.Errorf("first = %+v", got[0])
	}
	if got[1].table != "filter" || got[1].chain != "INPUT" || got[1].spec[1] != "169.254.20.99/32" {
		t.Errorf("second = %+v", got[1])
	}
	only := ourSavedRules([]byte(save), func(c string) bool { return strings.Contains(c, "169.254.20.99") })
	if len(only) != 1 || only[0].comment != "nodedns: accept untracked queries to 169.254.20.99 tcp/53" {
		t.Errorf("matched = %+v", only)
	}
}
