package migrate

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// The forward directives of a server block, as CoreDNS 1.15 runs them: in
// Corefile order, each a plugin whose Next is the following one. A query
// goes to the first forward whose FROM holds its name and whose except
// does not (the FROM apex is never excepted); a reply with one of that
// forward's next rcodes (or NODATA with next_on_nodata) is thrown away and
// the query goes on to the following forwards, the first that takes the
// name answering; none left: SERVFAIL. The last forward's reply is
// written whatever it is.
//
// nodedns has groups instead: the default upstreams, stub zones (the
// longest wins, except sending names further up), each with a chain of
// next groups. To carry a block exactly, its names are cut in regions:
// each FROM and except zone, under the block's zone, is one, holding its
// names but those of deeper regions. Every name of a region meets the
// same forwards, so the region's chain (which forward answers first, and
// where its next replies go) is computed once; the regions are then
// written, parents first, as the default group or stub zones, a region
// written only where nodedns would otherwise answer it differently (an
// except on the enclosing group when that sends it where CoreDNS does).
// A forward no region reaches is never used by CoreDNS: it is left out,
// and the output's header says so.

// fwd is one forward directive of a block, read.
type fwd struct {
	d    *Directive
	from string // lower-case FQDN; "." for the block's own zones
	srv  fwdServers
	o    fwdOptions
	// hostNames say how its servers given by host names are resolved.
	hostNames []string
}

// step is one forward of a region's chain, with the rcodes that brought
// the query to it (none for the first).
type step struct {
	f *fwd
	i int // index in the block
}

// chain is what CoreDNS does with a region's names: the forwards asked,
// and servfail when the last one's next replies find no forward after it.
type chain struct {
	steps    []step
	servfail bool
}

func (c chain) equal(o chain) bool {
	if len(c.steps) != len(o.steps) || c.servfail != o.servfail {
		return false
	}
	for i := range c.steps {
		if c.steps[i].i != o.steps[i].i {
			return false
		}
	}
	return true
}

// queueForward keeps a forward of an ordinary block for blockForwards.
func (m *migrator) queueForward(b *block, d *Directive) {
	if m.forwards == nil {
		m.forwards = map[*block][]*Directive{}
	}
	m.forwards[b] = append(m.forwards[b], d)
}

// readForward reads one forward directive; ok false: nothing to carry
// (each reason noted).
func (m *migrator) readForward(d *Directive) (*fwd, bool) {
	args := d.Args
	if len(args) < 2 {
		m.drop(d.Line, "%s: wants FROM and at least one TO", d.String())
		return nil, false
	}
	from, err := parseKey(args[0].Text)
	if err != nil || len(from.zones) != 1 {
		m.drop(d.Line, "%s: FROM %q is not one zone", d.String(), args[0].Text)
		return nil, false
	}
	o := m.forwardOptions(d)
	before := len(m.dropped)
	hosts := len(m.hostNames)
	srv := m.forwardServers(d, args[1:], o)
	named := slices.Clone(m.hostNames[hosts:])
	m.hostNames = m.hostNames[:hosts]
	if len(srv.addrs) == 0 && !srv.resolvConf {
		if len(m.dropped) == before {
			m.drop(d.Line, "%s: no server left to forward to", d.String())
		}
		return nil, false
	}
	if len(o.resolver) > 0 {
		set(m, &m.cfg.UpstreamResolver, o.resolver, d.Line, fmt.Sprintf("line %d: forward resolver", d.Line))
	}
	return &fwd{d: d, from: from.zones[0], srv: srv, o: o, hostNames: named}, true
}

// blockForwards carries the forwards of an ordinary block (not the
// cluster zone's in forward mode nor a reverse zone's): for each of the
// block's zones, its regions' chains.
func (m *migrator) blockForwards(b *block, blocks []*block) {
	var fs []*fwd
	for _, d := range m.forwards[b] {
		if f, ok := m.readForward(d); ok {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return
	}
	used := make([]bool, len(fs))
	for _, root := range b.zones {
		m.zoneForwards(b, root, fs, used, blocks)
	}
	for i, f := range fs {
		if used[i] {
			m.hostNames = append(m.hostNames, f.hostNames...)
		}
		if !used[i] {
			m.unreached = append(m.unreached, fmt.Sprintf("line %d: %s never answers a name in CoreDNS (an earlier forward of its block, or another block, takes every name it would), so it is not carried.", f.d.Line, f.d.String()))
		}
	}
}

// zoneForwards carries the forwards fs of block b for the names of its
// zone root.
func (m *migrator) zoneForwards(b *block, root string, fs []*fwd, used []bool, blocks []*block) {
	fromOf := func(f *fwd) string {
		if f.from == "." {
			return root
		}
		return f.from
	}
	// Deeper blocks take their names before this one: their regions are
	// not this block's.
	var deeper []string
	for _, o := range blocks {
		for _, z := range o.zones {
			if z != root && dns.IsSubDomain(root, z) {
				deeper = append(deeper, z)
			}
		}
	}
	mine := func(z string) bool {
		if !dns.IsSubDomain(root, z) {
			return false
		}
		for _, d := range deeper {
			if dns.IsSubDomain(d, z) {
				return false
			}
		}
		return true
	}
	regions := []string{root}
	add := func(z string) {
		if mine(z) && !slices.Contains(regions, z) {
			regions = append(regions, z)
		}
	}
	for _, f := range fs {
		add(fromOf(f))
		for _, e := range f.o.except {
			add(e)
		}
	}
	sort.SliceStable(regions, func(i, j int) bool { return dns.CountLabel(regions[i]) < dns.CountLabel(regions[j]) })

	takes := func(f *fwd, z string) bool {
		from := fromOf(f)
		if !dns.IsSubDomain(from, z) {
			return false
		}
		for _, e := range f.o.except {
			if dns.IsSubDomain(e, z) {
				return false
			}
		}
		return true
	}
	first := func(z string, from int) int {
		for i := from; i < len(fs); i++ {
			if takes(fs[i], z) {
				return i
			}
		}
		return -1
	}
	chains := map[string]chain{}
	for _, z := range regions {
		var c chain
		for i := first(z, 0); i >= 0; {
			c.steps = append(c.steps, step{f: fs[i], i: i})
			used[i] = true
			f := fs[i]
			if (len(f.o.next) == 0 && !f.o.nextNoData) || i == len(fs)-1 {
				break
			}
			if i = first(z, i+1); i < 0 {
				c.servfail = true
			}
		}
		chains[z] = c
	}

	// Write the regions, parents first. groups holds what was written:
	// the region's chain and the zones excepted from it.
	type written struct {
		c      chain
		except []string
	}
	groups := map[string]*written{}
	// effective is the chain nodedns gives z's names with the groups
	// written so far: the longest written zone above that does not except
	// them; ok false when none of this block does.
	effective := func(z string) (chain, *written, bool) {
		for a := z; ; a = parentZone(a) {
			if g := groups[a]; g != nil {
				ex := false
				for _, e := range g.except {
					ex = ex || (dns.IsSubDomain(e, z) && z != a)
				}
				if !ex {
					return g.c, g, true
				}
			}
			if a == root || a == "." {
				return chain{}, nil, false
			}
		}
	}
	for _, z := range regions {
		want := chains[z]
		got, g, ok := effective(z)
		switch {
		case z == root:
		case ok && got.equal(want):
			continue
		case g != nil && len(want.steps) > 0:
			// Excepting z from the group that would take it sends its
			// names further up: enough when that is where CoreDNS sends
			// them too.
			g.except = append(g.except, z)
			if got2, _, ok2 := effective(z); ok2 && got2.equal(want) {
				continue
			}
			g.except = g.except[:len(g.except)-1]
		}
		if len(want.steps) == 0 {
			// CoreDNS answers these names SERVFAIL: no forward of the
			// block takes them. Every group of nodedns that would take
			// them excepts them: this block's groups above z here, the
			// other blocks' stub zones and the default upstreams once
			// every block is read (exceptServfailZones). None of those
			// gets such a name from CoreDNS: its block is this one. The
			// root block's own zone keeps the default upstreams (the
			// header says so), a cluster or reverse zone's the agent's
			// own answers.
			if z == root && (root == "." || m.isClusterZone(root) || isReverseZone(root)) {
				continue
			}
			for a := parentZone(z); z != root; a = parentZone(a) {
				if w := groups[a]; w != nil && !slices.Contains(w.except, z) {
					w.except = append(w.except, z)
				}
				if a == root || a == "." {
					break
				}
			}
			m.servfailZones = append(m.servfailZones, servfailZone{zone: z, line: want0Line(fs, z, fromOf)})
			continue
		}
		groups[z] = &written{c: want}
	}
	for _, z := range regions {
		g := groups[z]
		if g == nil {
			continue
		}
		m.writeRegion(b, z, g.c, g.except)
	}
}

// servfailZone is a zone whose names CoreDNS answers SERVFAIL: no
// forward of their block takes them.
type servfailZone struct {
	zone string // lower-case FQDN
	line int
}

// exceptServfailZones makes the zones of servfailZones SERVFAIL: every
// group that would take their names (the stub zones above them, the
// default upstreams) excepts them.
func (m *migrator) exceptServfailZones() {
	keys := slices.Sorted(maps.Keys(m.stubs))
	for _, sz := range m.servfailZones {
		for _, k := range keys {
			st := m.stubs[k]
			key := dnsname.Canonical(k)
			if key != sz.zone && dns.IsSubDomain(key, sz.zone) && !slices.Contains(st.Except, trimDot(sz.zone)) {
				st.Except = append(st.Except, trimDot(sz.zone))
			}
		}
		if m.isSet(&m.cfg.UpstreamExcept) && slices.Contains(m.cfg.UpstreamExcept, trimDot(sz.zone)) {
			continue // the root block's own group excepts it
		}
		m.addZones(&m.cfg.UpstreamExcept, config.List{trimDot(sz.zone)}, sz.line)
		m.comment(&m.cfg.UpstreamExcept, fmt.Sprintf("line %d: names under %s are SERVFAIL in CoreDNS (no forward of their block takes them): no group of nodedns takes them either", sz.line, trimDot(sz.zone)))
	}
}

// want0Line is the line of the first forward of the block that names z.
func want0Line(fs []*fwd, z string, fromOf func(*fwd) string) int {
	for _, f := range fs {
		if fromOf(f) == z || slices.Contains(f.o.except, z) {
			return f.d.Line
		}
	}
	return fs[0].d.Line
}

// isReverseZone reports whether z (lower-case FQDN) is at or under
// in-addr.arpa or ip6.arpa.
func isReverseZone(z string) bool {
	return dns.IsSubDomain("in-addr.arpa.", z) || dns.IsSubDomain("ip6.arpa.", z)
}

func parentZone(z string) string {
	if z == "." {
		return "."
	}
	_, rest, _ := strings.Cut(z, ".")
	if rest == "" {
		return "."
	}
	return rest
}

// writeRegion writes one region's chain: the default upstreams for the
// root zone, else a stub zone.
func (m *migrator) writeRegion(b *block, z string, c chain, except []string) {
	first := c.steps[0].f
	next := m.nextOf(c, 1)
	if z == "." {
		m.rootForward = first.d
		m.rootServers = first.srv
		m.upstreamOptions(first.d, first.o)
		if len(except) > 0 {
			m.addZones(&m.cfg.UpstreamExcept, trimAll(except), first.d.Line)
			m.comment(&m.cfg.UpstreamExcept, fmt.Sprintf("line %d: names under %s are not sent to the default upstreams, as CoreDNS's forwards of that block do not send them", first.d.Line, strings.Join(trimAll(except), ", ")))
		}
		if next != nil {
			set(m, &m.cfg.UpstreamNext, next, first.d.Line, m.chainComment(c))
		}
		return
	}
	sd := m.groupOf(first)
	for _, e := range except {
		sd.Except = append(sd.Except, trimDot(e))
	}
	sd.Next = next
	comments := []string{fmt.Sprintf("line %d: %s", first.d.Line, first.d.String())}
	if next != nil {
		comments = append(comments, m.chainComment(c))
	}
	m.stubChain(first.d, z, first.srv, first.o, sd, comments)
}

// chainComment says where a chain's replies go.
func (m *migrator) chainComment(c chain) string {
	var parts []string
	for i := 1; i < len(c.steps); i++ {
		parts = append(parts, fmt.Sprintf("line %d's", c.steps[i].f.d.Line))
	}
	if c.servfail {
		parts = append(parts, "none (no later forward of the block takes these names: SERVFAIL, servers: [])")
	}
	return fmt.Sprintf("next: replies of line %d's forward with the rcodes of its next / next_on_nodata go on to %s forward, as CoreDNS chains the forwards of a block",
		c.steps[0].f.d.Line, strings.Join(parts, ", then "))
}

// nextOf is the chain from its step i on, as a next.
func (m *migrator) nextOf(c chain, i int) *config.StubDomain {
	if i >= len(c.steps) {
		if !c.servfail {
			return nil
		}
		return &config.StubDomain{On: whenOf(c.steps[i-1].f.o), Servers: config.List{}}
	}
	f := c.steps[i].f
	if f.srv.resolvConf {
		m.drop(f.d.Line, "%s: the node's resolvers as the servers a reply goes on to (next) are not carried; give their addresses", f.d.String())
		return nil
	}
	sd := m.groupOf(f)
	sd.On = whenOf(c.steps[i-1].f.o)
	sd.Next = m.nextOf(c, i+1)
	if f.o.ca != "" {
		set(m, &m.cfg.UpstreamCA, f.o.ca, f.o.caLine)
	}
	for _, n := range f.o.notes {
		m.comment(&m.cfg.UpstreamNext, n)
	}
	return &sd
}

func whenOf(o fwdOptions) config.List {
	w := slices.Clone(o.next)
	if o.nextNoData {
		w = append(w, config.NoData)
	}
	return w
}

// groupOf is the stub-domain form of a forward's servers and options. A
// forward without failover gets an empty list: CoreDNS hands a SERVFAIL
// or REFUSED back as the answer, where nodedns's default would ask
// another server once.
func (m *migrator) groupOf(f *fwd) config.StubDomain {
	o := f.o
	fo := o.failover
	if fo == nil {
		fo = config.List{}
	}
	sd := config.StubDomain{Servers: f.srv.addrs, ForceTCP: o.forceTCP, PreferUDP: o.preferUDP, Policy: o.policy,
		ForwardOptions: config.ForwardOptions{Failover: &fo, Failfast: o.failfast, ReadTO: config.Duration(o.readTimeout),
			MaxFails: o.maxFails, HealthCheck: config.Duration(o.hcInterval), HCNoRec: o.hcNoRec,
			Expire: config.Duration(o.expire), DoHMethod: o.dohMethod}}
	if o.hcDomain != "" && o.hcDomain != "." {
		sd.HCDomain = trimDot(o.hcDomain)
	}
	return sd
}
