package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRules is an iptables of one family, keyed by table/chain. Built-in
// chains always exist; fallbackChain only once created (ReplaceChain), and
// a rule jumping to it cannot be inserted before.
type fakeRules struct {
	mu     sync.Mutex
	chains map[string][][]string
	user   map[string]bool // user chains created, by table/chain
	pkts   map[string]uint64
	calls  map[string]int // method -> count
	fail   map[string]error
	// refuse fails Insert of any spec holding it (a match the kernel
	// lacks).
	refuse string
	// tables counts the calls naming each table (iptables -t TABLE ...).
	tables map[string]int
}

func newFakeRules() *fakeRules {
	return &fakeRules{chains: make(map[string][][]string), user: make(map[string]bool), pkts: make(map[string]uint64),
		calls: make(map[string]int), fail: make(map[string]error), tables: make(map[string]int)}
}

type notExistErr struct{}

func (notExistErr) Error() string    { return "Bad rule (does a matching rule exist in that chain?)" }
func (notExistErr) IsNotExist() bool { return true }

// exitErr is an iptables exit status.
type exitErr int

func (e exitErr) Error() string   { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitErr) ExitStatus() int { return int(e) }

func (f *fakeRules) missing(table, chain string) bool {
	return chain == fallbackChain && !f.user[table+"/"+chain]
}

func (f *fakeRules) call(m string) error {
	f.calls[m]++
	return f.fail[m]
}

func (f *fakeRules) Exists(table, chain string, spec ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("Exists"); err != nil {
		return false, err
	}
	for _, r := range f.chains[table+"/"+chain] {
		if slices.Equal(r, spec) {
			return true, nil
		}
	}
	return false, nil
}

func (f *fakeRules) Insert(table, chain string, pos int, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("Insert"); err != nil {
		return err
	}
	k := table + "/" + chain
	if pos < 1 || pos > len(f.chains[k])+1 {
		return fmt.Errorf("index of insertion too big")
	}
	if f.refuse != "" && slices.Contains(spec, f.refuse) {
		return fmt.Errorf("Couldn't load match `%s': No such file or directory", f.refuse)
	}
	if i := slices.Index(spec, "-j"); i >= 0 && i+1 < len(spec) && f.missing(table, spec[i+1]) {
		return exitErr(2)
	}
	f.chains[k] = slices.Insert(f.chains[k], pos-1, slices.Clone(spec))
	return nil
}

func (f *fakeRules) Delete(table, chain string, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("Delete"); err != nil {
		return err
	}
	k := table + "/" + chain
	for i, r := range f.chains[k] {
		if slices.Equal(r, spec) {
			f.chains[k] = slices.Delete(f.chains[k], i, i+1)
			return nil
		}
	}
	return notExistErr{}
}

func (f *fakeRules) List(table, chain string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("List"); err != nil {
		return nil, err
	}
	if f.missing(table, chain) {
		return nil, exitErr(1)
	}
	out := []string{"-P " + chain + " ACCEPT"}
	for _, r := range f.chains[table+"/"+chain] {
		out = append(out, "-A "+chain+" "+strings.Join(quoteSpec(r), " "))
	}
	return out, nil
}

func (f *fakeRules) ListCounters(table, chain string, zero bool) ([]string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("ListCounters"); err != nil {
		return nil, false, err
	}
	if f.missing(table, chain) {
		return nil, false, nil
	}
	out := []string{"-N " + chain}
	for _, r := range f.chains[table+"/"+chain] {
		c := commentOf(r)
		out = append(out, fmt.Sprintf("-A %s %s -c %d 0", chain, strings.Join(quoteSpec(r), " "), f.pkts[c]))
		if zero {
			delete(f.pkts, c)
		}
	}
	return out, true, nil
}

func (f *fakeRules) ReplaceChain(table, chain string, rules [][]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("ReplaceChain"); err != nil {
		return err
	}
	k := table + "/" + chain
	for _, r := range f.chains[k] {
		delete(f.pkts, commentOf(r))
	}
	f.user[k] = true
	f.chains[k] = nil
	for _, r := range rules {
		f.chains[k] = append(f.chains[k], slices.Clone(r))
	}
	return nil
}

func (f *fakeRules) RemoveChain(table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table]++
	if err := f.call("RemoveChain"); err != nil {
		return false, err
	}
	k := table + "/" + chain
	if !f.user[k] {
		return false, nil
	}
	for ck, rs := range f.chains {
		if !strings.HasPrefix(ck, table+"/") {
			continue
		}
		for _, r := range rs {
			if i := slices.Index(r, "-j"); i >= 0 && i+1 < len(r) && r[i+1] == chain {
				return false, fmt.Errorf("chain %s is still referenced by %s: %q", chain, ck, r)
			}
		}
	}
	delete(f.user, k)
	delete(f.chains, k)
	return true, nil
}

// count packets on the chain rule whose comment is c, as the kernel would.
func (f *fakeRules) hit(c string, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pkts[c] += n
}

func commentOf(spec []string) string {
	if i := slices.Index(spec, "--comment"); i >= 0 && i+1 < len(spec) {
		return spec[i+1]
	}
	return ""
}

// seed appends a rule (as iptables -A would).
func (f *fakeRules) seed(table, chain string, spec ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := table + "/" + chain
	f.chains[k] = append(f.chains[k], spec)
}

// count returns how many copies of spec are in table/chain.
func (f *fakeRules) count(table, chain string, spec []string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.chains[table+"/"+chain] {
		if slices.Equal(r, spec) {
			n++
		}
	}
	return n
}

// total returns the number of rules in every chain.
func (f *fakeRules) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, rs := range f.chains {
		n += len(rs)
	}
	return n
}

func (f *fakeRules) Save() ([]byte, error) {
	f.mu.Lock()
	err := f.call("Save")
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.save(), nil
}

// save renders iptables-save output.
func (f *fakeRules) save() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b bytes.Buffer
	keys := make([]string, 0, len(f.chains))
	for k := range f.chains {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	table := ""
	for _, k := range keys {
		t, c, _ := strings.Cut(k, "/")
		if t != table {
			if table != "" {
				b.WriteString("COMMIT\n")
			}
			fmt.Fprintf(&b, "*%s\n", t)
			table = t
		}
		if f.user[k] {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		for _, r := range f.chains[k] {
			fmt.Fprintf(&b, "-A %s %s\n", c, strings.Join(quoteSpec(r), " "))
		}
	}
	if table != "" {
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// fakeLink is one link of fakeLinks.
type fakeLink struct {
	kind  string
	up    bool
	ports int
	alias string
	addrs []netip.Addr
}

// fakeLinks is a netlink keyed by link name.
type fakeLinks struct {
	mu       sync.Mutex
	noDummy  bool  // the kernel has no dummy driver
	aliasErr error // SetAlias fails with it
	links    map[string]*fakeLink
	adds     []string // kinds passed to Add, in order
	watches  int
	events   chan struct{} // the channel of the current Watch
}

func newFakeLinks() *fakeLinks { return &fakeLinks{links: make(map[string]*fakeLink)} }

func (f *fakeLinks) Get(name string) (linkInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return linkInfo{}, false, nil
	}
	return linkInfo{Kind: l.kind, Up: l.up, Ports: l.ports, Alias: l.alias}, true, nil
}

func (f *fakeLinks) SetAlias(name, alias string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return errors.New("no such device")
	}
	if f.aliasErr != nil {
		return f.aliasErr
	}
	l.alias = alias
	return nil
}

func (f *fakeLinks) Add(name, kind string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adds = append(f.adds, kind)
	if kind == kindDummy && f.noDummy {
		return fmt.Errorf("%w: operation not supported", errKindNotSupported)
	}
	if _, ok := f.links[name]; ok {
		return fs.ErrExist
	}
	f.links[name] = &fakeLink{kind: kind}
	return nil
}

func (f *fakeLinks) Del(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[name]; !ok {
		return errors.New("no such device")
	}
	delete(f.links, name)
	return nil
}

func (f *fakeLinks) SetUp(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return errors.New("no such device")
	}
	l.up = true
	return nil
}

func (f *fakeLinks) Addrs(name string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil, errors.New("no such device")
	}
	return slices.Clone(l.addrs), nil
}

func (f *fakeLinks) AddAddr(name string, ip netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return errors.New("no such device")
	}
	if slices.Contains(l.addrs, ip) {
		return fs.ErrExist
	}
	l.addrs = append(l.addrs, ip)
	return nil
}

func (f *fakeLinks) DelAddr(name string, ip netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return errors.New("no such device")
	}
	i := slices.Index(l.addrs, ip)
	if i < 0 {
		return errors.New("cannot assign requested address")
	}
	l.addrs = slices.Delete(l.addrs, i, i+1)
	return nil
}

// Watch returns a channel the test fires with fire; it closes when done
// closes.
func (f *fakeLinks) Watch(done <-chan struct{}, name string, ips []netip.Addr) (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches++
	in := make(chan struct{}, 1)
	out := make(chan struct{}, 1)
	f.events = in
	go func() {
		defer close(out)
		for {
			select {
			case <-done:
				return
			case _, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

// fire reports a removal, as netlink would.
func (f *fakeLinks) fire() {
	f.mu.Lock()
	ch := f.events
	f.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// breakWatch ends the current subscription as a netlink error would.
func (f *fakeLinks) breakWatch() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.events)
	f.events = make(chan struct{}, 1) // later fires go nowhere until a new Watch
}

func (f *fakeLinks) link(name string) fakeLink {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		return fakeLink{kind: l.kind, up: l.up, ports: l.ports, alias: l.alias, addrs: slices.Clone(l.addrs)}
	}
	return fakeLink{}
}

// logRecorder is a slog handler that keeps messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) count(substr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// harness is an Interceptor on fakes.
type harness struct {
	ic       *Interceptor
	links    *fakeLinks
	r4, r6   *fakeRules
	logs     *logRecorder
	nowValue time.Time
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{
		links:    newFakeLinks(),
		r4:       newFakeRules(),
		r6:       newFakeRules(),
		logs:     &logRecorder{},
		nowValue: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	cfg.Logger = slog.New(h.logs)
	cfg, err := cfg.normalized()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	h.ic = newInterceptor(cfg, cfg.Logger, h.links, h.r4, h.r6, BackendNFT)
	h.ic.now = func() time.Time { return h.nowValue }
	return h
}

func (h *harness) ops(v6 bool) *fakeRules {
	if v6 {
		return h.r6
	}
	return h.r4
}

// assertRulesOnce fails unless every wanted rule is present exactly once.
func (h *harness) assertRulesOnce(t *testing.T) {
	t.Helper()
	for _, r := range h.ic.wanted {
		if n := h.ops(r.v6).count(r.table, r.chain, r.spec); n != 1 {
			t.Errorf("rule %s present %d times, want 1", r, n)
		}
	}
}
