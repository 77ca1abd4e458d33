//go:build linux

package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// New validates cfg, applies its defaults and, when rules are managed,
// picks the iptables backend (Config.Backend, or detection: see
// chooseBackend). It changes nothing on the host.
func New(cfg Config) (*Interceptor, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "intercept")
	var links linkOps
	if cfg.SetupInterface {
		links = netlinkOps{log: log}
	}
	var (
		r4, r6  ruleOps
		backend string
	)
	// The legacy backend is out of reach without CAP_NET_RAW once its
	// tables exist (see legacyUnreadable).
	noLegacy := legacyUnreadable()
	if cfg.SetupIptables {
		var reason string
		backend, reason, err = resolveBackend(cfg.Backend, noLegacy)
		if err != nil {
			return nil, err
		}
		if backend == BackendLegacy && noLegacy {
			// Forced, or the only backend installed.
			return nil, fmt.Errorf("the iptables-legacy backend (%s) needs CAP_NET_RAW: libiptc reaches the kernel through a raw IP socket; add NET_RAW to the container's capabilities", reason)
		}
		log.Info("iptables backend", "backend", backend, "reason", reason)
		if slices.ContainsFunc(cfg.LocalIPs, netip.Addr.Is4) {
			if r4, err = newIPTables(backend, false); err != nil {
				return nil, err
			}
		}
		if slices.ContainsFunc(cfg.LocalIPs, netip.Addr.Is6) {
			if r6, err = newIPTables(backend, true); err != nil {
				return nil, err
			}
		}
	}
	ic := newInterceptor(cfg, log, links, r4, r6, backend)
	if cfg.SetupIptables {
		other := BackendLegacy
		if backend == BackendLegacy {
			other = BackendNFT
		}
		if other == BackendLegacy && noLegacy {
			log.Warn("without CAP_NET_RAW the iptables-legacy tables cannot be read: copies of our rules a run on the legacy backend left there are not removed (nodedns cleanup with NET_RAW removes them)")
			return ic, nil
		}
		ic.purgeOther = func(comments map[string]bool) (int, error) {
			var (
				total int
				errs  []error
			)
			for v6, used := range map[bool]bool{false: r4 != nil, true: r6 != nil} {
				if !used {
					continue
				}
				n, err := cleanupBackend(other, v6, func(c string) bool { return comments[c] })
				total += n
				errs = append(errs, err)
			}
			return total, errors.Join(errs...)
		}
	}
	return ic, nil
}

// Cleanup removes everything nodedns may have left on the node, for
// uninstall and for recovery after a crash: every rule whose comment starts
// with "nodedns: " (all copies, every local IP, IPv4 and IPv6, in both the
// nft and the legacy backend) and the DNS fallback's chains, then the link
// cfg.Interface (or, if it is not a link nodedns creates, cfg.LocalIPs
// from it). Only Interface, LocalIPs and Logger are used; LocalIPs may be
// empty.
func Cleanup(cfg Config) error {
	cfg.SetupInterface, cfg.SetupIptables = false, false
	cfg, err := cfg.normalized()
	if err != nil {
		return err
	}
	log := cfg.Logger.With("component", "intercept")
	var errs []error
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		for _, v6 := range []bool{false, true} {
			n, err := cleanupBackend(backend, v6, nil)
			if n > 0 {
				log.Info("removed nodedns rules", "backend", backend, "ipv6", v6, "rules", n)
			}
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeLink(netlinkOps{log: log}, cfg.Interface, cfg.LocalIPs, log))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up interception: %w", err)
	}
	return nil
}

// cleanupBackend removes our rules (those whose comment satisfies match,
// or all of them when match is nil) from one backend and family, found in
// its iptables-save output, and then the DNS fallback's chain if it is
// there (the rules jumping to it carry our comments, so they are gone by
// then). A backend whose tools are not installed is skipped.
func cleanupBackend(backend string, v6 bool, match func(comment string) bool) (removed int, err error) {
	save := backendBinary(backend, v6) + "-save"
	if _, err := exec.LookPath(save); err != nil {
		return 0, nil
	}
	if backend == BackendLegacy && legacyUnreadable() {
		return 0, fmt.Errorf("reading the iptables-legacy tables needs CAP_NET_RAW (libiptc opens a raw IP socket)")
	}
	var ops ruleOps
	for round := 0; ; round++ {
		out, err := runSave(save)
		if err != nil {
			return removed, err
		}
		found := ourSavedRules(out, match)
		if len(found) == 0 {
			if !hasSavedChain(out, "nat", fallbackChain) {
				return removed, nil
			}
			if ops == nil {
				if ops, err = newIPTables(backend, v6); err != nil {
					return removed, err
				}
			}
			if _, err := ops.RemoveChain("nat", fallbackChain); err != nil {
				return removed, fmt.Errorf("removing nat/%s with %s: %w", fallbackChain, backendBinary(backend, v6), err)
			}
			return removed, nil
		}
		if round == 3 {
			return removed, fmt.Errorf("%d nodedns rules still in %s after %d rounds", len(found), save, round)
		}
		if ops == nil {
			if ops, err = newIPTables(backend, v6); err != nil {
				return removed, err
			}
		}
		var errs []error
		for _, r := range found {
			if err := ops.Delete(r.table, r.chain, r.spec...); err != nil && !isNotExist(err) {
				errs = append(errs, fmt.Errorf("deleting %s/%s rule %q: %w", r.table, r.chain, strings.Join(r.spec, " "), err))
				continue
			}
			removed++
		}
		if err := errors.Join(errs...); err != nil {
			return removed, err
		}
	}
}

// capNetRawBit is CAP_NET_RAW's bit in /proc/self/status's CapEff.
const capNetRawBit = 13

// legacyUnreadable reports whether the iptables-legacy tables exist in this
// network namespace but cannot be read or changed by this process: libiptc
// (iptables-legacy) talks to the kernel through socket(AF_INET, SOCK_RAW,
// IPPROTO_RAW), which needs CAP_NET_RAW; iptables-nft speaks netlink and
// needs CAP_NET_ADMIN only. With no legacy table loaded, iptables-legacy-save
// opens no socket and works without it.
func legacyUnreadable() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false // cannot tell: let iptables say
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil || caps&(1<<capNetRawBit) != 0 {
				return false
			}
		}
	}
	for _, f := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"} {
		if b, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return true
		}
	}
	return false
}

// resolveBackend returns the forced backend, or detects it. noLegacy:
// the legacy tables cannot be read (legacyUnreadable), so they are no
// evidence.
func resolveBackend(want string, noLegacy bool) (backend, reason string, err error) {
	if want != BackendAuto {
		return want, "set in the configuration", nil
	}
	have := func(b string) bool {
		_, err := exec.LookPath(backendBinary(b, false))
		return err == nil
	}
	switch nft, legacy := have(BackendNFT), have(BackendLegacy); {
	case nft && legacy && noLegacy:
		return BackendNFT, "the iptables-legacy tables are loaded but unreadable without CAP_NET_RAW (add NET_RAW if kube-proxy uses iptables-legacy on this node)", nil
	case nft && legacy:
		n := countSave(saveBoth(BackendNFT))
		l := countSave(saveBoth(BackendLegacy))
		backend, reason = chooseBackend(n, l)
		return backend, reason, nil
	case nft:
		return BackendNFT, "only iptables-nft is installed", nil
	case legacy:
		return BackendLegacy, "only iptables-legacy is installed", nil
	}
	// Neither suffixed binary: use plain iptables in whatever mode it is.
	path, err := exec.LookPath("iptables")
	if err != nil {
		return "", "", fmt.Errorf("detecting the iptables backend: none of iptables-nft, iptables-legacy, iptables is installed: %w", err)
	}
	mode, err := iptablesMode(path)
	if err != nil {
		return "", "", err
	}
	return mode, "only " + path + " is installed", nil
}

// saveBoth returns the IPv4 and IPv6 iptables-save output of a backend;
// failures (a family without kernel support) count as no rules.
func saveBoth(backend string) []byte {
	var all []byte
	for _, v6 := range []bool{false, true} {
		out, err := runSave(backendBinary(backend, v6) + "-save")
		if err == nil {
			all = append(all, out...)
		}
	}
	return all
}

// runSave runs an iptables-save binary. iptables-save lists only the tables
// that exist, so unlike "iptables -t raw -S" it never creates one.
func runSave(name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("running %s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// backendBinary is the iptables binary of a backend and family, e.g.
// "ip6tables-legacy".
func backendBinary(backend string, v6 bool) string {
	if v6 {
		return "ip6tables-" + backend
	}
	return "iptables-" + backend
}

// iptablesMode asks an iptables binary which backend it is.
func iptablesMode(path string) (string, error) {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("running %s --version: %w", path, err)
	}
	if strings.Contains(string(out), "nf_tables") {
		return BackendNFT, nil
	}
	return BackendLegacy, nil
}

// newIPTables returns the ruleOps of a backend and family: go-iptables
// bound to the backend's binary (when the suffixed binary is missing,
// plain iptables/ip6tables if it runs in that mode) and its
// iptables-restore.
func newIPTables(backend string, v6 bool) (*iptOps, error) {
	proto, base := iptables.ProtocolIPv4, "iptables"
	if v6 {
		proto, base = iptables.ProtocolIPv6, "ip6tables"
	}
	restore := backendBinary(backend, v6) + "-restore"
	path, err := exec.LookPath(backendBinary(backend, v6))
	if err != nil {
		if path, err = exec.LookPath(base); err != nil {
			return nil, fmt.Errorf("finding %s for the %s backend: %w", base, backend, err)
		}
		mode, err := iptablesMode(path)
		if err != nil {
			return nil, err
		}
		if mode != backend {
			return nil, fmt.Errorf("finding %s for the %s backend: only %s (%s) is installed", base, backend, path, mode)
		}
		restore = base + "-restore"
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(path), iptables.Timeout(5))
	if err != nil {
		return nil, fmt.Errorf("setting up %s: %w", path, err)
	}
	// Found when it is needed: a node without it still gets every rule
	// but the fallback chain, and the error says what is missing.
	return &iptOps{IPTables: ipt, bin: path, restore: restore}, nil
}

// iptOps is ruleOps over go-iptables, with what go-iptables lacks: a
// chain's counters read and zeroed in one run, and a chain rewritten in one
// iptables-restore transaction.
type iptOps struct {
	*iptables.IPTables
	bin     string // the iptables binary
	restore string // its iptables-restore, looked up on use
}

// iptWait is how long iptables waits for the xtables lock, in seconds, as
// go-iptables is told (iptables.Timeout).
const iptWait = "5"

// cmdError is a failed iptables run: its exit status (4 when it gave up
// waiting for the xtables lock, see isLocked) and what it wrote.
type cmdError struct {
	args   []string
	status int
	stderr string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("running %s: exit status %d: %s", strings.Join(e.args, " "), e.status, e.stderr)
}

// ExitStatus is what isLocked reads.
func (e *cmdError) ExitStatus() int { return e.status }

func runIPT(name string, args []string, stdin string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &cmdError{args: append([]string{name}, args...), status: ee.ExitCode(), stderr: strings.TrimSpace(stderr.String())}
	}
	if err != nil {
		return nil, fmt.Errorf("running %s: %w", name, err)
	}
	return stdout.Bytes(), nil
}

// ListCounters runs iptables -t table -v -S chain [-Z]. Exit status 1 is
// iptables's answer for a chain that does not exist (go-iptables's
// ChainExists reads it the same way).
func (o *iptOps) ListCounters(table, chain string, zero bool) ([]string, bool, error) {
	args := []string{"-w", iptWait, "-t", table, "-v", "-S", chain}
	if zero {
		args = append(args, "-Z")
	}
	out, err := runIPT(o.bin, args, "")
	var ce *cmdError
	if errors.As(err, &ce) && ce.status == 1 {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-") { // not "Zeroing chain ..." nor nft's warnings
			lines = append(lines, l)
		}
	}
	return lines, true, nil
}

// ReplaceChain feeds iptables-restore --noflush one table holding the
// chain's declaration, which creates the chain or flushes it, and its
// rules: the kernel takes the table's new state in one commit.
func (o *iptOps) ReplaceChain(table, chain string, rules [][]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n", table, chain)
	for _, r := range rules {
		fmt.Fprintf(&b, "-A %s %s\n", chain, strings.Join(quoteSpec(r), " "))
	}
	b.WriteString("COMMIT\n")
	path, err := exec.LookPath(o.restore)
	if err != nil {
		return fmt.Errorf("finding %s: %w", o.restore, err)
	}
	_, err = runIPT(path, []string{"--noflush", "-w", iptWait}, b.String())
	return err
}

// Save runs the iptables-save of the binary in use.
func (o *iptOps) Save() ([]byte, error) { return runSave(o.bin + "-save") }

// RemoveChain flushes and deletes a chain, if it exists.
func (o *iptOps) RemoveChain(table, chain string) (bool, error) {
	ok, err := o.ChainExists(table, chain)
	if err != nil || !ok {
		return false, err
	}
	return true, o.ClearAndDeleteChain(table, chain)
}

// netlinkOps is linkOps over github.com/vishvananda/netlink, in the network
// namespace of the calling thread.
type netlinkOps struct {
	log *slog.Logger
}

func (netlinkOps) link(name string) (netlink.Link, bool, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return l, true, nil
}

func (o netlinkOps) Get(name string) (linkInfo, bool, error) {
	l, ok, err := o.link(name)
	if err != nil || !ok {
		return linkInfo{}, ok, err
	}
	info := linkInfo{Kind: l.Type(), Up: l.Attrs().Flags&net.FlagUp != 0, Alias: l.Attrs().Alias}
	if info.Kind == kindBridge {
		all, err := retryDump(netlink.LinkList)
		if err != nil {
			return info, true, fmt.Errorf("listing links: %w", err)
		}
		for _, p := range all {
			if p.Attrs().MasterIndex == l.Attrs().Index {
				info.Ports++
			}
		}
	}
	return info, true, nil
}

func (netlinkOps) Add(name, kind string) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	var l netlink.Link
	switch kind {
	case kindDummy:
		l = &netlink.Dummy{LinkAttrs: attrs}
	case kindBridge:
		l = &netlink.Bridge{LinkAttrs: attrs}
	default:
		return fmt.Errorf("link kind %q: %w", kind, errKindNotSupported)
	}
	err := netlink.LinkAdd(l)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: %w", errKindNotSupported, err)
	}
	return err
}

func (o netlinkOps) SetAlias(name, alias string) error {
	l, ok, err := o.link(name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("link %q: %w", name, unix.ENODEV)
	}
	return netlink.LinkSetAlias(l, alias)
}

func (o netlinkOps) Del(name string) error {
	l, ok, err := o.link(name)
	if err != nil || !ok {
		return err
	}
	return netlink.LinkDel(l)
}

func (o netlinkOps) SetUp(name string) error {
	l, ok, err := o.link(name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("link %q: %w", name, unix.ENODEV)
	}
	return netlink.LinkSetUp(l)
}

func (o netlinkOps) Addrs(name string) ([]netip.Addr, error) {
	l, ok, err := o.link(name)
	if err != nil || !ok {
		return nil, err
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

func hostAddr(ip netip.Addr) *netlink.Addr {
	bits := ip.BitLen()
	a := &netlink.Addr{
		IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, bits)},
		// A host address needs no prefix route.
		Flags: unix.IFA_F_NOPREFIXROUTE,
	}
	if ip.Is6() {
		// Usable at once: an address in DAD cannot be bound, and on a
		// bridge without ports DAD would never finish.
		a.Flags |= unix.IFA_F_NODAD
	}
	return a
}

func (o netlinkOps) AddAddr(name string, ip netip.Addr) error {
	l, ok, err := o.link(name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("link %q: %w", name, unix.ENODEV)
	}
	return netlink.AddrAdd(l, hostAddr(ip))
}

func (o netlinkOps) DelAddr(name string, ip netip.Addr) error {
	l, ok, err := o.link(name)
	if err != nil || !ok {
		return err
	}
	return netlink.AddrDel(l, hostAddr(ip))
}

// Watch subscribes to link and address notifications (in the calling
// thread's network namespace).
func (o netlinkOps) Watch(done <-chan struct{}, name string, ips []netip.Addr) (<-chan struct{}, error) {
	var stopping atomic.Bool
	onErr := func(err error) {
		if !stopping.Load() { // closing the sockets makes them report errors
			o.log.Debug("netlink subscription", "err", err)
		}
	}
	linkCh := make(chan netlink.LinkUpdate, 64)
	addrCh := make(chan netlink.AddrUpdate, 64)
	// Each subscription gets its own stop channel so a failure of the
	// second can stop the first.
	linkDone, addrDone := make(chan struct{}), make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(linkCh, linkDone, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(linkDone)
		return nil, fmt.Errorf("subscribing to link updates: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrCh, addrDone, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(linkDone)
		close(addrDone)
		for range linkCh {
		}
		return nil, fmt.Errorf("subscribing to address updates: %w", err)
	}
	ours := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		ours[ip] = true
	}
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default: // one pending report covers this one
		}
	}
	go func() {
		defer close(out)
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				stopping.Store(true)
				close(linkDone)
				close(addrDone)
			}
		}
		defer stop()
		// Runs until both subscriptions have closed their channels, so the
		// library's receive goroutines never block on a full channel.
		for linkCh != nil || addrCh != nil {
			select {
			case <-done:
				stop()
				done = nil
			case u, ok := <-linkCh:
				if !ok {
					linkCh = nil
					stop()
					continue
				}
				if stopped || u.Link == nil || u.Link.Attrs().Name != name {
					continue
				}
				if u.Header.Type == unix.RTM_DELLINK || u.IfInfomsg.Flags&unix.IFF_UP == 0 {
					notify()
				}
			case u, ok := <-addrCh:
				if !ok {
					addrCh = nil
					stop()
					continue
				}
				if stopped || u.NewAddr {
					continue
				}
				if ip, ok := netip.AddrFromSlice(u.LinkAddress.IP); ok && ours[ip.Unmap()] {
					notify()
				}
			}
		}
	}()
	return out, nil
}

// retryDump retries a netlink dump interrupted by a concurrent change.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var (
		out []T
		err error
	)
	for range 5 {
		out, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}
