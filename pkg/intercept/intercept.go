package intercept

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// ruleOps is the part of iptables the package uses, for one address family
// of one backend. iptOps (system_linux.go: github.com/coreos/go-iptables,
// and iptables-restore for what it lacks) implements it; unit tests use a
// fake keyed by table/chain. List returns iptables -S lines. Delete of a
// missing rule returns an error whose IsNotExist method reports true.
type ruleOps interface {
	Exists(table, chain string, rulespec ...string) (bool, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Delete(table, chain string, rulespec ...string) error
	List(table, chain string) ([]string, error)
	// ListCounters returns the iptables -v -S lines of a chain (each rule
	// with "-c PACKETS BYTES") and, with zero, zeroes its counters in the
	// same run; exists is false (and err nil) when there is no such
	// chain.
	ListCounters(table, chain string, zero bool) (lines []string, exists bool, err error)
	// ReplaceChain creates a chain of ours if it is missing and replaces
	// its rules with rules, in one transaction (iptables-restore
	// --noflush), so that no packet sees it half written.
	ReplaceChain(table, chain string, rules [][]string) error
	// RemoveChain flushes and deletes a chain of ours; removed is false
	// when there was none. Rules jumping to it must be gone first.
	RemoveChain(table, chain string) (removed bool, err error)
	// Save returns the family's iptables-save output, which lists only
	// the tables that exist and creates none.
	Save() ([]byte, error)
}

// linkInfo describes an existing link.
type linkInfo struct {
	Kind  string // "dummy", "bridge", ...
	Up    bool
	Ports int    // links enslaved to it (bridges)
	Alias string // IFLA_IFALIAS; linkAlias on a link this package created
}

// linkAlias marks a link this package created (its ifalias, shown by
// `ip link`). It lives in the kernel with the link, so an agent started
// later (a restart, the next pod of a rolling update, `nodedns cleanup`)
// knows the link is nodedns's to delete; a link without it (another
// program's, or one an operator made) is used but never deleted.
const linkAlias = "nodedns: holds the node-local DNS addresses; created and removed by nodedns"

// ownLink reports whether info describes a link this package created and
// may delete: marked, and still of a kind it creates (a bridge someone
// enslaved ports to is theirs now).
func ownLink(info linkInfo) bool {
	return strings.HasPrefix(info.Alias, "nodedns:") &&
		(info.Kind == kindDummy || info.Kind == kindBridge && info.Ports == 0)
}

// errKindNotSupported is returned (wrapped) by linkOps.Add when the kernel
// has no driver for the link kind.
var errKindNotSupported = errors.New("link kind not supported by this kernel")

// linkOps is the part of netlink the package uses, by link name. Add and
// AddAddr return an error matching fs.ErrExist when the link or address is
// already there.
type linkOps interface {
	Get(name string) (info linkInfo, ok bool, err error)
	Add(name, kind string) error
	// SetAlias sets the link's ifalias (the kernel does not take one when
	// a link is created).
	SetAlias(name, alias string) error
	Del(name string) error
	SetUp(name string) error
	Addrs(name string) ([]netip.Addr, error)
	AddAddr(name string, ip netip.Addr) error
	DelAddr(name string, ip netip.Addr) error
	// Watch reports, on the returned channel, that the link called name
	// went away or down, or that one of ips was removed. Reports are
	// coalesced. The channel is closed once done is closed, or earlier if
	// the subscription fails (events may then have been lost).
	Watch(done <-chan struct{}, name string, ips []netip.Addr) (<-chan struct{}, error)
}

// Link kinds this package creates.
const (
	kindDummy  = "dummy"
	kindBridge = "bridge"
)

// Interceptor owns the link and the rules of one Config. Its methods are
// safe for concurrent use; changes to the host are serialized.
type Interceptor struct {
	cfg    Config
	log    *slog.Logger
	links  linkOps // nil unless cfg.SetupInterface
	rules4 ruleOps // nil unless cfg.SetupIptables and an IPv4 local IP
	rules6 ruleOps // same for IPv6
	wanted []rule
	now    func() time.Time
	// purgeOther removes rules carrying one of the given comments from the
	// iptables backend not in use (both backends' hooks see every packet,
	// so a copy left there by a run on the other backend still applies).
	// nil when there is no other backend.
	purgeOther func(comments map[string]bool) (removed int, err error)

	mu      sync.Mutex // serializes changes to the host
	linkOn  bool       // EnsureLink was called (and no Teardown since)
	rulesOn bool       // EnsureRules was called (and no Teardown since)
	kind    string     // kind to create; becomes kindBridge once dummy is refused
	// added holds the local IPs this process put on a link it does not
	// own (see ownLink): Teardown removes those and no others from it.
	added map[netip.Addr]bool
	// foreignLogged: the "not ours" warning was given for the current link.
	foreignLogged bool
	// fb is the DNS fallback's state (fallback.go).
	fb fallbackConf

	stMu sync.Mutex // guards st; never held while touching the host
	st   Status
}

// newInterceptor assembles an Interceptor from a normalized Config and the
// host interfaces (fakes in unit tests).
func newInterceptor(cfg Config, log *slog.Logger, links linkOps, r4, r6 ruleOps, backend string) *Interceptor {
	ic := &Interceptor{
		cfg:    cfg,
		log:    log,
		links:  links,
		rules4: r4,
		rules6: r6,
		now:    time.Now,
		kind:   kindDummy,
		added:  map[netip.Addr]bool{},
		fb:     fallbackConf{off: !cfg.Fallback},
	}
	ic.st.Link = cfg.Interface
	ic.st.Backend = backend
	ic.renderWantedRules()
	ic.publishFallback()
	for _, ip := range cfg.LocalIPs {
		ic.st.IPs = append(ic.st.IPs, ip.String())
	}
	return ic
}

// EnsureLink creates the link if it is missing (dummy, or an empty bridge
// when the kernel has no dummy driver), adds every local IP missing from it
// and brings it up. Addresses already on the link are never removed. It is
// a no-op unless Config.SetupInterface is set; from then on Run keeps the
// link in shape.
func (ic *Interceptor) EnsureLink() error {
	if !ic.cfg.SetupInterface {
		return nil
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.linkOn = true
	fixed, err := ic.ensureLink()
	if len(fixed) > 0 {
		ic.log.Info("link ready", "link", ic.cfg.Interface, "changes", fixed)
	}
	ic.setError(err)
	return err
}

// EnsureRules inserts every missing rule at the top of its chain and removes
// extra copies, so each exists exactly once. Call it only once the listeners
// are bound: from then on traffic to the local IPs reaches them untracked.
// It is a no-op unless Config.SetupIptables is set; from then on Run keeps
// the rules in place.
func (ic *Interceptor) EnsureRules() error {
	if !ic.cfg.SetupIptables {
		return nil
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.rulesOn = true
	fixed, present, err := ic.ensureRules(true, true)
	ic.setRules(present)
	if len(fixed) > 0 {
		ic.log.Info("rules ready", "backend", ic.Status().Backend, "changes", len(fixed), "rules", len(ic.wanted))
	}
	err = errors.Join(err, ic.removeFromOtherBackend())
	ic.setError(err)
	return err
}

// removeFromOtherBackend removes copies of our rules from the backend not
// in use, left there when the node (or our detection) changed backends.
func (ic *Interceptor) removeFromOtherBackend() error {
	if ic.purgeOther == nil {
		return nil
	}
	all := ic.allRules()
	comments := make(map[string]bool, len(all))
	for _, r := range all {
		comments[r.comment] = true
	}
	n, err := ic.purgeOther(comments)
	if n > 0 {
		ic.log.Info("removed copies of our rules from the other iptables backend", "rules", n)
	}
	if err != nil {
		return fmt.Errorf("removing our rules from the other iptables backend: %w", err)
	}
	return nil
}

// Run keeps the link and the rules in place until ctx is done: a full pass
// every SyncInterval, and one as soon as netlink reports the link or one of
// its addresses removed. Only what EnsureLink and EnsureRules have been
// called for is maintained, so Run never installs rules before the
// listeners are bound. Every thing put back counts as a repair in Status.
func (ic *Interceptor) Run(ctx context.Context) {
	ticker := time.NewTicker(ic.cfg.SyncInterval)
	defer ticker.Stop()

	var (
		events <-chan struct{}
		stop   chan struct{}
	)
	subscribe := func() {
		if ic.links == nil {
			return
		}
		done := make(chan struct{})
		ev, err := ic.links.Watch(done, ic.cfg.Interface, ic.cfg.LocalIPs)
		if err != nil {
			close(done)
			ic.log.Warn("watching the link failed, relying on the periodic sync", "link", ic.cfg.Interface, "err", err)
			return
		}
		events, stop = ev, done
	}
	unsubscribe := func() {
		if stop == nil {
			return
		}
		close(stop)
		for range events { // drain until the watcher has stopped
		}
		events, stop = nil, nil
	}
	subscribe()
	defer unsubscribe()

	for {
		reason := "sync"
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case _, ok := <-events:
			reason = "netlink"
			if !ok {
				// The subscription broke and events may have been lost:
				// check everything now, subscribe again at the next tick.
				reason = "netlink watch ended"
				unsubscribe()
			}
		}
		ic.reconcile(reason)
		if events == nil && reason == "sync" {
			subscribe() // at most once per interval
		}
	}
}

// reconcile puts back whatever is missing and records the outcome.
func (ic *Interceptor) reconcile(reason string) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	var (
		fixed []string
		errs  []error
	)
	if ic.linkOn {
		f, err := ic.ensureLink()
		fixed = append(fixed, f...)
		errs = append(errs, err)
	}
	if ic.rulesOn {
		f, present, err := ic.ensureRules(false, false)
		ic.setRules(present)
		fixed = append(fixed, f...)
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	ic.setError(err)
	ic.stMu.Lock()
	ic.st.Passes++
	if len(fixed) > 0 {
		ic.st.Repairs += uint64(len(fixed))
		ic.st.LastRepair = ic.now()
	}
	ic.stMu.Unlock()
	if len(fixed) > 0 {
		ic.log.Warn("put back missing interception state", "reason", reason, "repairs", fixed)
	}
	if err != nil {
		ic.log.Error("reconciling interception", "reason", reason, "err", err)
	}
}

// Teardown removes every copy of the rules first, those of the DNS
// fallback and its chains too (traffic then falls back to the cluster DNS
// path), then the link, if this package created it (in
// this process or an earlier one: see linkAlias). From a link it did not
// create, only the local IPs this process added are removed; the link and
// anything that was on it before stay. Run stops repairing once Teardown
// starts.
func (ic *Interceptor) Teardown() error {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.linkOn, ic.rulesOn = false, false
	var errs []error
	if ic.cfg.SetupIptables {
		var plain []rule
		fallback := [2]map[string]bool{{}, {}}
		for _, r := range ic.allRules() {
			if r.fallback {
				fallback[famIndex(r.v6)][r.comment] = true
			} else {
				plain = append(plain, r)
			}
		}
		// The fallback first: its jumps lead to the chain.
		for _, v6 := range []bool{false, true} {
			if ic.ops(v6) != nil {
				_, _, err := ic.removeFallback(v6, fallback[famIndex(v6)], true)
				errs = append(errs, err)
			}
		}
		_, err := ic.removeRules(plain)
		errs = append(errs, err, ic.removeFromOtherBackend())
		ic.setRules(0)
	}
	if ic.cfg.SetupInterface && ic.links != nil {
		var added []netip.Addr
		for _, ip := range ic.cfg.LocalIPs {
			if ic.added[ip] {
				added = append(added, ip)
			}
		}
		errs = append(errs, removeLink(ic.links, ic.cfg.Interface, added, ic.log))
		clear(ic.added)
		ic.stMu.Lock()
		ic.st.LinkType = ""
		ic.stMu.Unlock()
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("tearing down interception: %w", err)
	} else {
		ic.log.Info("interception removed", "link", ic.cfg.Interface, "ips", ic.cfg.LocalIPs)
	}
	ic.setError(err)
	return err
}

// RulesPresent reports whether every wanted rule was in place after the
// last pass (EnsureRules or a reconcile), for /ready. It is true when rules
// are not managed and false after Teardown. It does not run iptables.
func (ic *Interceptor) RulesPresent() bool {
	if !ic.cfg.SetupIptables {
		return true
	}
	ic.stMu.Lock()
	defer ic.stMu.Unlock()
	return ic.st.RulesWanted > 0 && ic.st.RulesPresent == ic.st.RulesWanted
}

// Status returns a snapshot of the interception state.
func (ic *Interceptor) Status() Status {
	ic.stMu.Lock()
	defer ic.stMu.Unlock()
	st := ic.st
	st.Enabled = true
	st.IPs = slices.Clone(ic.st.IPs)
	st.Errors = maps.Clone(ic.st.Errors)
	st.FallbackTargets4 = slices.Clone(ic.st.FallbackTargets4)
	st.FallbackTargets6 = slices.Clone(ic.st.FallbackTargets6)
	st.FallbackClusterIPs = slices.Clone(ic.st.FallbackClusterIPs)
	return st
}

func (ic *Interceptor) setRules(present int) {
	ic.stMu.Lock()
	ic.st.RulesPresent = present
	ic.stMu.Unlock()
}

func (ic *Interceptor) setError(err error) {
	ic.stMu.Lock()
	ic.st.LastError = ""
	if err != nil {
		ic.st.LastError = err.Error()
	}
	ic.stMu.Unlock()
}

// ensureLink converges the link and returns what it changed.
func (ic *Interceptor) ensureLink() ([]string, error) {
	name := ic.cfg.Interface
	info, ok, err := ic.links.Get(name)
	if err != nil {
		return nil, ic.countErr(ErrInterfaceCheck, fmt.Errorf("looking up link %q: %w", name, err))
	}
	var fixed []string
	if !ok {
		kind, created, err := ic.createLink(name)
		if err != nil {
			return nil, ic.countErr(ErrInterfaceAdd, err)
		}
		if created {
			fixed = append(fixed, fmt.Sprintf("created %s link %s", kind, name))
		}
		if info, ok, err = ic.links.Get(name); err != nil || !ok {
			return fixed, ic.countErr(ErrInterfaceCheck, fmt.Errorf("looking up link %q after creating it: %w", name, errors.Join(err, fs.ErrNotExist)))
		}
	}
	own := ownLink(info)
	ic.stMu.Lock()
	ic.st.LinkType = info.Kind
	ic.st.LinkOwned = own
	ic.stMu.Unlock()
	if !own && !ic.foreignLogged {
		ic.foreignLogged = true
		ic.log.Warn("the link exists and was not created by nodedns: using it, and leaving it (and what was on it) in place at teardown",
			"link", name, "kind", info.Kind, "ports", info.Ports, "alias", info.Alias)
	} else if own {
		ic.foreignLogged = false
	}

	have, err := ic.links.Addrs(name)
	if err != nil {
		return fixed, ic.countErr(ErrInterfaceCheck, fmt.Errorf("listing addresses of link %q: %w", name, err))
	}
	var errs []error
	for _, ip := range ic.cfg.LocalIPs {
		if slices.Contains(have, ip) {
			continue
		}
		if err := ic.links.AddAddr(name, ip); err != nil && !errors.Is(err, fs.ErrExist) {
			errs = append(errs, ic.countErr(ErrInterfaceAdd, fmt.Errorf("adding %s to link %q: %w", hostPrefix(ip), name, err)))
			continue
		}
		if !own {
			ic.added[ip] = true
		}
		fixed = append(fixed, fmt.Sprintf("added %s to %s", hostPrefix(ip), name))
	}
	if !info.Up {
		if err := ic.links.SetUp(name); err != nil {
			errs = append(errs, ic.countErr(ErrInterfaceAdd, fmt.Errorf("setting link %q up: %w", name, err)))
		} else {
			fixed = append(fixed, "set "+name+" up")
		}
	}
	return fixed, errors.Join(errs...)
}

// createLink creates the link as a dummy, or as an empty bridge once the
// kernel has refused a dummy (logged the first time only), and marks it
// with linkAlias. created is false when another process created the link
// first.
func (ic *Interceptor) createLink(name string) (kind string, created bool, err error) {
	if ic.kind == kindDummy {
		err := ic.links.Add(name, kindDummy)
		switch {
		case err == nil:
			return kindDummy, true, ic.mark(name, kindDummy)
		case errors.Is(err, fs.ErrExist):
			return kindDummy, false, nil
		case !errors.Is(err, errKindNotSupported):
			return "", false, fmt.Errorf("creating dummy link %q: %w", name, err)
		}
		ic.kind = kindBridge
		ic.log.Warn("kernel has no dummy link driver; using an empty bridge to hold the local IPs", "link", name, "err", err)
	}
	err = ic.links.Add(name, ic.kind)
	switch {
	case err == nil:
		return ic.kind, true, ic.mark(name, ic.kind)
	case errors.Is(err, fs.ErrExist):
		return ic.kind, false, nil
	}
	return "", false, fmt.Errorf("creating %s link %q: %w", ic.kind, name, err)
}

// mark sets linkAlias on a link just created. A link that cannot be marked
// is deleted again: unmarked, no later agent would know to remove it.
func (ic *Interceptor) mark(name, kind string) error {
	err := ic.links.SetAlias(name, linkAlias)
	if err == nil {
		return nil
	}
	err = fmt.Errorf("marking the new %s link %q as nodedns's: %w", kind, name, err)
	if derr := ic.links.Del(name); derr != nil {
		err = errors.Join(err, fmt.Errorf("deleting it again: %w", derr))
	}
	return err
}

// removeLink deletes the link if this package created it (ownLink);
// otherwise it only removes ips from it, leaving the link and everything
// else on it.
func removeLink(links linkOps, name string, ips []netip.Addr, log *slog.Logger) error {
	info, ok, err := links.Get(name)
	if err != nil {
		return fmt.Errorf("looking up link %q: %w", name, err)
	}
	if !ok {
		return nil
	}
	if ownLink(info) {
		if err := links.Del(name); err != nil {
			return fmt.Errorf("deleting link %q: %w", name, err)
		}
		return nil
	}
	log.Warn("the link was not created by nodedns: leaving it, removing only local IPs nodedns added", "link", name, "kind", info.Kind,
		"ports", info.Ports, "alias", info.Alias, "removing", describeIPs(ips))
	have, err := links.Addrs(name)
	if err != nil {
		return fmt.Errorf("listing addresses of link %q: %w", name, err)
	}
	var errs []error
	for _, ip := range ips {
		if !slices.Contains(have, ip) {
			continue
		}
		if err := links.DelAddr(name, ip); err != nil {
			errs = append(errs, fmt.Errorf("removing %s from link %q: %w", hostPrefix(ip), name, err))
		}
	}
	return errors.Join(errs...)
}

func (ic *Interceptor) ops(v6 bool) ruleOps {
	if v6 {
		return ic.rules6
	}
	return ic.rules4
}

// ensureRules makes each wanted rule exist exactly once, and each wanted
// fallback chain hold its targets, and returns what it changed and how
// many wanted rules are in place.
//
// A rule is found by its comment in one listing per chain. With verify
// (EnsureRules, at start; SetFallback) every rule is also checked with
// iptables -C, which catches a copy with our comment but another spec (the
// NOTRACK with or without the socket match); periodic passes trust a
// single listed copy and run iptables -C only for rules the listing lacks,
// so a pass costs one iptables run per chain, not one per rule. With
// settle (EnsureRules, SetFallback), fallback rules and chains no longer
// wanted are removed first.
func (ic *Interceptor) ensureRules(verify, settle bool) (fixed []string, present int, err error) {
	var errs []error
	if settle {
		f, err := ic.removeUnwanted()
		fixed = append(fixed, f...)
		errs = append(errs, err)
	}
	f, changed, err := ic.probeSocket()
	fixed = append(fixed, f...)
	errs = append(errs, err)
	if changed && !settle {
		f, err := ic.removeUnwanted()
		fixed = append(fixed, f...)
		errs = append(errs, err)
	}
	// Chains before the rules that jump to them.
	for _, v6 := range []bool{false, true} {
		if ic.ops(v6) == nil || !ic.chainWanted(v6) {
			continue
		}
		f, n, err := ic.ensureChain(v6)
		fixed = append(fixed, f...)
		present += n
		errs = append(errs, err)
	}
	lists := make(map[string][]string) // family+table/chain -> iptables -S lines
	for _, r := range ic.wanted {
		ops := ic.ops(r.v6)
		lkey := fmt.Sprint(r.v6, r.key())
		lines, ok := lists[lkey]
		if !ok {
			lines, err = ops.List(r.table, r.chain)
			if err != nil {
				errs = append(errs, ic.countRuleErr(fmt.Errorf("listing %s: %w", r.key(), err)))
				continue
			}
			lists[lkey] = lines
		}
		copies := countComment(lines, r.comment)
		exists := copies > 0
		if verify || !exists {
			if exists, err = ops.Exists(r.table, r.chain, r.spec...); err != nil {
				errs = append(errs, ic.countRuleErr(fmt.Errorf("checking rule %s: %w", r, err)))
				continue
			}
		}
		if !exists {
			if err := ops.Insert(r.table, r.chain, 1, r.spec...); err != nil {
				errs = append(errs, ic.countRuleErr(fmt.Errorf("inserting rule %s: %w", r, err)))
				continue
			}
			fixed = append(fixed, "inserted "+r.String())
			copies++
		}
		if copies > 1 {
			removed, err := dedupe(ops, r, copies)
			for range removed {
				fixed = append(fixed, "removed duplicate "+r.String())
			}
			if err != nil {
				errs = append(errs, ic.countRuleErr(err))
				continue
			}
		}
		present++
	}
	return fixed, present, errors.Join(errs...)
}

// dedupe reduces the copies of r (rules carrying its comment) to one.
// Identical copies go through Delete(spec), which removes the first match
// and leaves the last. A copy carrying our comment but a different spec (an
// older rendering) survives that; then every copy is removed by its own
// listed spec and r is inserted again.
func dedupe(ops ruleOps, r rule, copies int) (removed int, err error) {
	for range copies - 1 {
		if err := ops.Delete(r.table, r.chain, r.spec...); err != nil {
			if isNotExist(err) {
				break
			}
			return removed, fmt.Errorf("removing duplicate of rule %s: %w", r, err)
		}
		removed++
	}
	lines, err := ops.List(r.table, r.chain)
	if err != nil {
		return removed, fmt.Errorf("listing %s: %w", r.key(), err)
	}
	exists, err := ops.Exists(r.table, r.chain, r.spec...)
	if err != nil {
		return removed, fmt.Errorf("checking rule %s: %w", r, err)
	}
	if exists && countComment(lines, r.comment) == 1 {
		return removed, nil
	}
	for _, l := range lines {
		if c, ok := lineComment(l); !ok || c != r.comment {
			continue
		}
		words, err := splitRuleLine(l)
		if err != nil || len(words) < 3 {
			return removed, fmt.Errorf("parsing listed rule %q: %w", l, errors.Join(err, errors.New("too short")))
		}
		if err := ops.Delete(r.table, r.chain, words[2:]...); err != nil && !isNotExist(err) {
			return removed, fmt.Errorf("removing stale copy %q: %w", l, err)
		}
		removed++
	}
	if err := ops.Insert(r.table, r.chain, 1, r.spec...); err != nil {
		return removed, fmt.Errorf("inserting rule %s: %w", r, err)
	}
	return removed, nil
}

// removeRules deletes every copy of each of rs and returns how many rules
// it deleted. Copies are found by comment, so stale renderings go too. A
// few rounds cover rules another agent inserts meanwhile.
func (ic *Interceptor) removeRules(rs []rule) (removed int, err error) {
	comments := make(map[string]bool, len(rs))
	chains := make(map[string]rule)
	for _, r := range rs {
		comments[fmt.Sprint(r.v6, r.key(), r.comment)] = true
		chains[fmt.Sprint(r.v6, r.key())] = r
	}
	keys := make([]string, 0, len(chains))
	for k := range chains {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var errs []error
	for round := 0; ; round++ {
		errs = errs[:0]
		left := 0
		for _, k := range keys {
			r := chains[k]
			ops := ic.ops(r.v6)
			lines, err := ops.List(r.table, r.chain)
			if err != nil {
				errs = append(errs, fmt.Errorf("listing %s: %w", r.key(), err))
				continue
			}
			for _, l := range lines {
				c, ok := lineComment(l)
				if !ok || !comments[fmt.Sprint(r.v6, r.key(), c)] {
					continue
				}
				left++
				words, err := splitRuleLine(l)
				if err != nil || len(words) < 3 {
					errs = append(errs, fmt.Errorf("parsing listed rule %q: %w", l, errors.Join(err, errors.New("too short"))))
					continue
				}
				if err := ops.Delete(r.table, r.chain, words[2:]...); err != nil && !isNotExist(err) {
					errs = append(errs, fmt.Errorf("deleting rule %q from %s: %w", l, r.key(), err))
					continue
				}
				removed++
			}
		}
		if left == 0 {
			break
		}
		if round == 3 {
			errs = append(errs, fmt.Errorf("%d rules still present after %d rounds of deletion", left, round+1))
			break
		}
	}
	return removed, errors.Join(errs...)
}

// countErr counts err (not nil) under kind in Status.Errors and returns it.
func (ic *Interceptor) countErr(kind string, err error) error {
	ic.stMu.Lock()
	if ic.st.Errors == nil {
		ic.st.Errors = map[string]uint64{}
	}
	ic.st.Errors[kind]++
	ic.stMu.Unlock()
	return err
}

// countRuleErr counts an iptables error: ErrIptablesLock when iptables gave
// up waiting for the xtables lock, else ErrIptables.
func (ic *Interceptor) countRuleErr(err error) error {
	if isLocked(err) {
		return ic.countErr(ErrIptablesLock, err)
	}
	return ic.countErr(ErrIptables, err)
}

// isLocked reports whether err is iptables exiting with status 4 (resource
// problem), which is what it does when it waited for the xtables lock in
// vain (the rules are run with a wait timeout).
func isLocked(err error) bool {
	var ee interface{ ExitStatus() int }
	return errors.As(err, &ee) && ee.ExitStatus() == 4
}

// isNotExist reports whether err says the rule was not there.
func isNotExist(err error) bool {
	var ne interface{ IsNotExist() bool }
	return errors.As(err, &ne) && ne.IsNotExist()
}

// hostPrefix renders ip as a /32 or /128.
func hostPrefix(ip netip.Addr) netip.Prefix {
	return netip.PrefixFrom(ip, ip.BitLen())
}

// describeIPs joins ips for messages.
func describeIPs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}
