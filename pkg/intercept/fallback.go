package intercept

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The fallback keeps a node's DNS answering while no process holds the
// agent's sockets (a crash, an OOM kill, a crash loop's back-off), with no
// process at all: the kernel sends the queries to other DNS servers (the
// central cluster DNS). It rests on three things:
//
//   - The PREROUTING NOTRACK of queries to a local IP applies only while
//     a local socket is bound to that IP (-m socket). With the agent's
//     sockets bound, queries stay untracked and are delivered to them as
//     without the fallback; with none, they stay tracked.
//   - A tracked query reaches the nat table, where a rule per local IP and
//     protocol jumps to fallbackChain, which spreads new flows over the
//     targets (-m statistic, as kube-proxy spreads a Service's endpoints)
//     and DNATs them. Its flows are masqueraded and accepted in FORWARD.
//   - A local IP that is a Service ClusterIP (the kube-dns ClusterIP among
//     the local IPs) gets only the conditional NOTRACK: kube-proxy's own
//     DNAT is its fallback, and a flow can be DNATed only once.
//
// The targets are what the agent last set; while no agent runs they stay
// as they were (the kernel needs no process to use them). The socket match
// is not allowed in OUTPUT, so queries of host-network clients have no
// fallback. A kernel without the socket match (xt_socket) gets the
// unconditional NOTRACK and no fallback, reported in Status.

// fallbackChain is the nat chain (one per address family) that DNATs
// queries no socket served to the fallback targets.
const fallbackChain = "NODEDNS-FALLBACK"

// MaxFallbackTargets bounds the targets of one address family: the first
// packet of every fallback flow walks their rules.
const MaxFallbackTargets = 16

// Fallback states, as Status.Fallback reports them.
const (
	// FallbackOff: no fallback (turned off, or rules not managed); the
	// NOTRACK is unconditional.
	FallbackOff = "off"
	// FallbackUnavailable: wanted, but the kernel refused the socket
	// match; the NOTRACK is unconditional.
	FallbackUnavailable = "unavailable"
	// FallbackWaiting: the NOTRACK is conditional, but no targets were set
	// yet (SetFallback): the nat rules and the chain are left as found,
	// as an earlier agent wrote them.
	FallbackWaiting = "waiting"
	// FallbackOn: the NOTRACK is conditional and the chain holds the
	// targets last set.
	FallbackOn = "on"
)

// Target is one server the fallback sends queries to, with its port for
// each protocol (an EndpointSlice may give different ones).
type Target struct {
	Addr             netip.Addr
	UDPPort, TCPPort uint16
}

// String is "ip:port", or "ip udp/P tcp/Q" when the ports differ.
func (t Target) String() string {
	if t.UDPPort == t.TCPPort {
		return netip.AddrPortFrom(t.Addr, t.UDPPort).String()
	}
	return fmt.Sprintf("%s udp/%d tcp/%d", t.Addr, t.UDPPort, t.TCPPort)
}

func (t Target) port(proto string) uint16 {
	if proto == "tcp" {
		return t.TCPPort
	}
	return t.UDPPort
}

// Fallback is what SetFallback is given.
type Fallback struct {
	// Off: no fallback. The NOTRACK becomes unconditional again, and the
	// nat rules and the chain go.
	Off bool
	// Targets are the servers, IPv4 and IPv6 mixed, at most
	// MaxFallbackTargets of each family; each family's go to the chain of
	// that family, in this order.
	Targets []Target
	// ClusterIPs are local IPs that are Service ClusterIPs: they get the
	// conditional NOTRACK only, kube-proxy's DNAT being their fallback.
	ClusterIPs []netip.Addr
}

// fallbackConf is the Interceptor's fallback state (guarded by its mu).
type fallbackConf struct {
	off   bool // no fallback
	known bool // SetFallback was called: targets and clusterIPs hold
	// targets by family: [0] IPv4, [1] IPv6.
	targets    [2][]Target
	clusterIPs map[netip.Addr]bool
	// probed: the socket match was found working in the family;
	// unavailable: why the kernel refused it ("" while it was not).
	probed      [2]bool
	unavailable [2]string
	// flowsRead: the family's chain was read once (the first read, at
	// this agent's start, holds the flows of the time no agent ran).
	flowsRead [2]bool
}

func famIndex(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// normalizeFallback checks fb and returns its targets by family and its
// ClusterIPs as a set.
func normalizeFallback(fb Fallback) (targets [2][]Target, clusterIPs map[netip.Addr]bool, err error) {
	if fb.Off {
		return targets, nil, nil
	}
	var errs []error
	for _, t := range fb.Targets {
		t.Addr = t.Addr.Unmap().WithZone("")
		switch {
		case !t.Addr.IsValid():
			errs = append(errs, errors.New("fallback target: invalid address"))
			continue
		case t.Addr.IsUnspecified() || t.Addr.IsMulticast() || t.Addr.IsLoopback():
			errs = append(errs, fmt.Errorf("fallback target %s: unspecified, multicast and loopback addresses cannot be DNAT targets", t.Addr))
			continue
		case t.UDPPort == 0 || t.TCPPort == 0:
			errs = append(errs, fmt.Errorf("fallback target %s: port 0", t.Addr))
			continue
		}
		fi := famIndex(t.Addr.Is6())
		if slices.Contains(targets[fi], t) {
			continue
		}
		targets[fi] = append(targets[fi], t)
	}
	for fi, ts := range targets {
		if len(ts) > MaxFallbackTargets {
			errs = append(errs, fmt.Errorf("%d fallback targets of %s: at most %d", len(ts), famName(fi == 1), MaxFallbackTargets))
		}
	}
	clusterIPs = make(map[netip.Addr]bool, len(fb.ClusterIPs))
	for _, ip := range fb.ClusterIPs {
		clusterIPs[ip.Unmap().WithZone("")] = true
	}
	return targets, clusterIPs, errors.Join(errs...)
}

func famName(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

// SetFallback sets where queries to the local IPs go while no process
// holds a socket bound to them, and puts it into effect at once when the
// rules are in place (EnsureRules was called), else at EnsureRules. The
// chain is written only when the targets changed. It is a no-op unless
// Config.SetupIptables is set.
func (ic *Interceptor) SetFallback(fb Fallback) error {
	if !ic.cfg.SetupIptables {
		return nil
	}
	targets, clusterIPs, err := normalizeFallback(fb)
	if err != nil {
		return fmt.Errorf("setting the DNS fallback: %w", err)
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	f := &ic.fb
	if f.known && f.off == fb.Off && slices.Equal(f.targets[0], targets[0]) && slices.Equal(f.targets[1], targets[1]) &&
		sameSet(f.clusterIPs, clusterIPs) {
		return nil
	}
	before := ic.modes()
	f.off, f.known, f.targets, f.clusterIPs = fb.Off, true, targets, clusterIPs
	ic.renderWantedRules()
	// Only the targets changed: the chains are rewritten by the pass, no
	// rule is added or removed. Otherwise rules change form or go.
	settle := !slices.Equal(before, ic.modes())
	ic.stMu.Lock()
	ic.st.FallbackUpdates++
	ic.stMu.Unlock()
	if fb.Off {
		ic.log.Info("DNS fallback off: queries to the local IPs are untracked whether a socket serves them or not")
	} else {
		ic.log.Info("DNS fallback targets set", "ipv4", targetStrings(targets[0]), "ipv6", targetStrings(targets[1]),
			"clusterIPs", describeSet(clusterIPs))
	}
	if !ic.rulesOn {
		return nil
	}
	fixed, present, err := ic.ensureRules(settle, settle)
	ic.setRules(present)
	if len(fixed) > 0 {
		ic.log.Info("rules changed for the DNS fallback", "changes", fixed)
	}
	ic.setError(err)
	return err
}

func sameSet(a, b map[netip.Addr]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func describeSet(m map[netip.Addr]bool) string {
	s := make([]string, 0, len(m))
	for ip := range m {
		s = append(s, ip.String())
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func targetStrings(ts []Target) []string {
	if len(ts) == 0 {
		return nil
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
}

// modeOf is how queries to ip are handled while no socket serves them
// (mu held).
func (ic *Interceptor) modeOf(ip netip.Addr) ipMode {
	f := &ic.fb
	switch {
	case f.off || f.unavailable[famIndex(ip.Is6())] != "":
		return modePlain
	case !f.known || f.clusterIPs[ip]:
		return modeServed
	}
	return modeDNAT
}

// modes lists the mode of every local IP, and whether each family is
// settled (mu held): what decides which rules exist.
func (ic *Interceptor) modes() []ipMode {
	out := make([]ipMode, 0, len(ic.cfg.LocalIPs)+2)
	for _, ip := range ic.cfg.LocalIPs {
		out = append(out, ic.modeOf(ip))
	}
	for _, v6 := range []bool{false, true} {
		m := ipMode(-1)
		if ic.settled(v6) {
			m = -2
		}
		out = append(out, m)
	}
	return out
}

// settled reports whether the fallback rules of a family are decided
// (mu held): while the fallback waits for its first targets, those an
// earlier agent left are neither wanted nor removed.
func (ic *Interceptor) settled(v6 bool) bool {
	f := &ic.fb
	return f.off || f.known || f.unavailable[famIndex(v6)] != ""
}

// chainWanted reports whether the family's fallback chain is wanted: some
// local IP of the family is in modeDNAT (mu held).
func (ic *Interceptor) chainWanted(v6 bool) bool {
	for _, ip := range ic.cfg.LocalIPs {
		if ip.Is6() == v6 && ic.modeOf(ip) == modeDNAT {
			return true
		}
	}
	return false
}

// renderWantedRules renders the wanted rules (ic.wanted) again from the
// fallback state, and publishes their count and that state in Status (mu
// held).
func (ic *Interceptor) renderWantedRules() {
	if !ic.cfg.SetupIptables {
		return
	}
	ic.wanted = renderRulesMode(ic.cfg.LocalIPs, ic.cfg.AdminPort, ic.modeOf)
	n := len(ic.wanted)
	for _, v6 := range []bool{false, true} {
		if ic.chainWanted(v6) {
			n += 2 * len(ic.fb.targets[famIndex(v6)])
		}
	}
	ic.stMu.Lock()
	ic.st.RulesWanted = n
	ic.stMu.Unlock()
	ic.publishFallback()
}

// allRules is every rule this Config may write, in every mode: what
// Teardown removes.
func (ic *Interceptor) allRules() []rule {
	if !ic.cfg.SetupIptables {
		return nil
	}
	return renderRulesMode(ic.cfg.LocalIPs, ic.cfg.AdminPort, func(netip.Addr) ipMode { return modeDNAT })
}

// renderChain renders the rules of a family's fallback chain: per
// protocol, one DNAT per target, each new flow going to target i with
// probability 1/(n-i) among those left, the last unconditionally, so
// flows spread evenly.
func renderChain(v6 bool, targets []Target) []rule {
	var out []rule
	n := len(targets)
	for _, proto := range []string{"udp", "tcp"} {
		for i, t := range targets {
			to := netip.AddrPortFrom(t.Addr, t.port(proto)).String()
			comment := fmt.Sprintf("%sfallback %s %d/%d to %s", commentPrefix, proto, i+1, n, to)
			spec := []string{"-p", proto}
			if i < n-1 {
				spec = append(spec, "-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(1/float64(n-i), 'f', 10, 64))
			}
			spec = append(spec, "-m", "comment", "--comment", comment, "-j", "DNAT", "--to-destination", to)
			out = append(out, rule{v6: v6, table: "nat", chain: fallbackChain, comment: comment, spec: spec})
		}
	}
	return out
}

// ensureChain makes the family's fallback chain hold exactly the targets'
// rules, in order (mu held). The chain is listed with its counters, which
// are zeroed in the same run: the packets its DNAT rules matched since the
// last pass (the first packet of each flow; the nat table sees no other)
// are added to Status's flow counts, so flows of a time when no agent ran
// are counted by the next. A chain whose rules' comments differ from the
// wanted ones, in order, is rewritten whole, in one iptables-restore.
func (ic *Interceptor) ensureChain(v6 bool) (fixed []string, present int, err error) {
	ops := ic.ops(v6)
	want := renderChain(v6, ic.fb.targets[famIndex(v6)])
	lines, exists, err := ops.ListCounters("nat", fallbackChain, true)
	if err != nil {
		return nil, 0, ic.countRuleErr(fmt.Errorf("listing nat/%s: %w", fallbackChain, err))
	}
	var (
		have  []string
		flows uint64
	)
	for _, l := range lines {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		c, _ := lineComment(l)
		have = append(have, c)
		flows += linePackets(l)
	}
	first := !ic.fb.flowsRead[famIndex(v6)]
	ic.fb.flowsRead[famIndex(v6)] = true
	if flows > 0 {
		ic.countFlows(v6, flows, first)
	}
	same := exists && len(have) == len(want)
	for i := 0; same && i < len(want); i++ {
		same = have[i] == want[i].comment
	}
	if same {
		return nil, len(want), nil
	}
	specs := make([][]string, len(want))
	for i, r := range want {
		specs[i] = r.spec
	}
	if err := ops.ReplaceChain("nat", fallbackChain, specs); err != nil {
		return nil, 0, ic.countRuleErr(fmt.Errorf("writing nat/%s (%s): %w", fallbackChain, famName(v6), err))
	}
	what := "created"
	if exists {
		what = "rewrote"
	}
	return []string{fmt.Sprintf("%s %s chain nat/%s with %d targets", what, famName(v6), fallbackChain, len(want)/2)}, len(want), nil
}

// countFlows adds flows the fallback chain redirected, and logs them: the
// flows counted at an agent's first pass are those of the time no agent
// ran; later ones mean queries found no socket of this agent (a listener
// on the wildcard address does not count for the socket match).
func (ic *Interceptor) countFlows(v6 bool, n uint64, first bool) {
	ic.stMu.Lock()
	if v6 {
		ic.st.FallbackFlows6 += n
	} else {
		ic.st.FallbackFlows4 += n
	}
	ic.stMu.Unlock()
	if first {
		ic.log.Info("the DNS fallback redirected flows since the chain was last read (while no agent served the local IPs)", "family", famName(v6), "flows", n)
	} else {
		ic.log.Warn("the DNS fallback redirected flows while this agent runs: queries found no socket of it bound to the local IP (is it listening on port 53 of each local IP?)",
			"family", famName(v6), "flows", n)
	}
}

// linePackets is the packet count of an iptables -v -S line ("-c PKTS
// BYTES"), 0 when it has none.
func linePackets(line string) uint64 {
	words, err := splitRuleLine(line)
	if err != nil {
		return 0
	}
	for i := 0; i+2 < len(words); i++ {
		if words[i] == "-c" {
			n, err := strconv.ParseUint(words[i+1], 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// probeSocket finds out, once per family, whether the kernel takes the
// socket match (mu held). When the conditional NOTRACK cannot be inserted
// but the same rule without the match can, the match is what was refused:
// the family falls back to the unconditional NOTRACK and no fallback,
// logged once and reported in Status. When both fail (the xtables lock,
// say), nothing is decided: the next pass tries again.
func (ic *Interceptor) probeSocket() (fixed []string, changed bool, err error) {
	var errs []error
	for _, v6 := range []bool{false, true} {
		fi := famIndex(v6)
		f := &ic.fb
		if f.off || f.probed[fi] || f.unavailable[fi] != "" || ic.ops(v6) == nil {
			continue
		}
		i := slices.IndexFunc(ic.wanted, func(r rule) bool { return r.v6 == v6 && r.served && hasSocketMatch(r.spec) })
		if i < 0 {
			continue
		}
		r := ic.wanted[i]
		ops := ic.ops(v6)
		exists, err := ops.Exists(r.table, r.chain, r.spec...)
		if err != nil {
			errs = append(errs, ic.countRuleErr(fmt.Errorf("checking rule %s: %w", r, err)))
			continue
		}
		if exists {
			f.probed[fi] = true
			continue
		}
		ierr := ops.Insert(r.table, r.chain, 1, r.spec...)
		if ierr == nil {
			f.probed[fi] = true
			fixed = append(fixed, "inserted "+r.String())
			continue
		}
		plain := withoutSocketMatch(r.spec)
		if err := ops.Insert(r.table, r.chain, 1, plain...); err != nil {
			errs = append(errs, ic.countRuleErr(fmt.Errorf("inserting rule %s: %w", r, ierr)))
			continue
		}
		f.unavailable[fi] = ierr.Error()
		changed = true
		r.spec = plain
		fixed = append(fixed, "inserted "+r.String())
		ic.log.Warn("the kernel refused the socket match (xt_socket): no DNS fallback, queries to the local IPs stay untracked whether a socket serves them or not",
			"family", famName(v6), "err", ierr)
	}
	if changed {
		ic.renderWantedRules()
	}
	return fixed, changed, errors.Join(errs...)
}

func hasSocketMatch(spec []string) bool {
	for i := 0; i+1 < len(spec); i++ {
		if spec[i] == socketMatch[0] && spec[i+1] == socketMatch[1] {
			return true
		}
	}
	return false
}

func withoutSocketMatch(spec []string) []string {
	out := make([]string, 0, len(spec))
	for i := 0; i < len(spec); i++ {
		if i+1 < len(spec) && spec[i] == socketMatch[0] && spec[i+1] == socketMatch[1] {
			i++
			continue
		}
		out = append(out, spec[i])
	}
	return out
}

// removeUnwanted removes the fallback rules and chains of settled
// families that the current state does not want (mu held): after the
// fallback was turned off, found unavailable, or a local IP turned out to
// be a ClusterIP; at start, what an earlier agent left that this one does
// not want.
func (ic *Interceptor) removeUnwanted() (fixed []string, err error) {
	wanted := make(map[string]bool, len(ic.wanted))
	for _, r := range ic.wanted {
		wanted[ruleID(r)] = true
	}
	var errs []error
	for _, v6 := range []bool{false, true} {
		if ic.ops(v6) == nil || !ic.settled(v6) {
			continue
		}
		gone := map[string]bool{}
		for _, r := range ic.allRules() {
			if r.v6 == v6 && r.fallback && !wanted[ruleID(r)] {
				gone[r.comment] = true
			}
		}
		n, chain, err := ic.removeFallback(v6, gone, !ic.chainWanted(v6))
		for range n {
			fixed = append(fixed, "removed a fallback rule no longer wanted")
		}
		if chain {
			fixed = append(fixed, fmt.Sprintf("removed %s chain nat/%s", famName(v6), fallbackChain))
		}
		if err != nil {
			errs = append(errs, ic.countRuleErr(err))
		}
	}
	return fixed, errors.Join(errs...)
}

// removeFallback removes, from one family, the rules of ours whose comment
// is in comments and, with dropChain, the fallback chain (after the rules
// jumping to it). They are found in iptables-save output, which unlike
// iptables -t nat -S never creates the nat table: a node whose kube-proxy
// runs without it (nftables mode) gets none from an agent whose fallback
// is off. removed counts the rules deleted; chain is true when the chain
// was there and is gone.
func (ic *Interceptor) removeFallback(v6 bool, comments map[string]bool, dropChain bool) (removed int, chain bool, err error) {
	ops := ic.ops(v6)
	if len(comments) == 0 && !dropChain {
		return 0, false, nil
	}
	for round := 0; ; round++ {
		save, err := ops.Save()
		if err != nil {
			return removed, false, fmt.Errorf("reading the %s rules: %w", famName(v6), err)
		}
		found := ourSavedRules(save, func(c string) bool { return comments[c] })
		if len(found) == 0 {
			if !dropChain || !hasSavedChain(save, "nat", fallbackChain) {
				return removed, false, nil
			}
			if _, err := ops.RemoveChain("nat", fallbackChain); err != nil {
				return removed, false, fmt.Errorf("removing nat/%s (%s): %w", fallbackChain, famName(v6), err)
			}
			return removed, true, nil
		}
		if round == 3 {
			return removed, false, fmt.Errorf("%d fallback rules still present after %d rounds of deletion", len(found), round)
		}
		for _, r := range found {
			if err := ops.Delete(r.table, r.chain, r.spec...); err != nil && !isNotExist(err) {
				return removed, false, fmt.Errorf("deleting %s/%s rule %q: %w", r.table, r.chain, strings.Join(r.spec, " "), err)
			}
			removed++
		}
	}
}

// ruleID identifies a rule within a family and chain by its comment.
func ruleID(r rule) string { return fmt.Sprint(r.v6, " ", r.key(), " ", r.comment) }

// publishFallback copies the fallback state into Status (mu held): Status
// reads only stMu, never waiting for a pass that runs iptables.
func (ic *Interceptor) publishFallback() {
	f := &ic.fb
	state, why := FallbackOn, ""
	switch {
	case !ic.cfg.SetupIptables || f.off:
		state = FallbackOff
	case f.unavailable[0] != "" || f.unavailable[1] != "":
		state = FallbackUnavailable
		why = strings.TrimSpace(f.unavailable[0] + " " + f.unavailable[1])
	case !f.known:
		state = FallbackWaiting
	}
	var t4, t6, cips []string
	if state == FallbackOn {
		t4, t6 = targetStrings(f.targets[0]), targetStrings(f.targets[1])
		for _, ip := range ic.cfg.LocalIPs {
			if f.clusterIPs[ip] {
				cips = append(cips, ip.String())
			}
		}
	}
	ic.stMu.Lock()
	ic.st.Fallback, ic.st.FallbackError = state, why
	ic.st.FallbackTargets4, ic.st.FallbackTargets6, ic.st.FallbackClusterIPs = t4, t6, cips
	ic.stMu.Unlock()
}
