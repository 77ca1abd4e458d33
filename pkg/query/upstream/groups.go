package upstream

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// GroupOptions apply to the servers of one group: the default upstreams
// (Config.Options) or one stub zone (Config.StubOptions).
type GroupOptions struct {
	// ForceTCP sends every query of the group's plain-DNS servers over TCP
	// (pooled connections, see pool.go), as CoreDNS's force_tcp.
	ForceTCP bool
	// PreferUDP sends them over UDP first (TCP only for a truncated reply)
	// even when the forwarder forces TCP (Config.ForceTCP), as CoreDNS's
	// prefer_udp. It is what plain servers do by default.
	PreferUDP bool
	// Policy overrides Config.Policy for the group; "" keeps it.
	Policy Policy
}

// Resolver resolves servers given by name (Services of the cluster zone).
// Implementations must be safe for concurrent use and cheap: the
// forwarder asks every ProbeInterval.
type Resolver interface {
	// ResolveServer returns the addresses of name (a lower-case FQDN). ok
	// is false when the answer is not known yet (the cluster index has not
	// synced): the forwarder then keeps what it had.
	ResolveServer(name string) (addrs []netip.Addr, ok bool)
}

// transport of a server, resolved from its scheme and its group's options.
type transport uint8

const (
	transportUDP transport = iota // UDP, TCP after a truncated reply
	transportTCP                  // TCP only, pooled stream connections
	transportTLS                  // DNS over TLS, pooled stream connections
)

func (f *Forwarder) transportOf(sp Spec, opts GroupOptions) transport {
	switch sp.Scheme {
	case schemeTLS:
		return transportTLS
	case schemeTCP:
		return transportTCP
	}
	switch {
	case opts.ForceTCP:
		return transportTCP
	case opts.PreferUDP:
		return transportUDP
	case f.cfg.ForceTCP:
		return transportTCP
	}
	return transportUDP
}

// registry holds the servers of a forwarder by their canonical form, so
// that one server in several groups (or resolved again after a Service
// change) keeps its health, figures and connections.
type registry struct {
	mu sync.Mutex
	by map[string]*Server
}

// named is a group's server given by name, with its current addresses.
type named struct {
	spec  Spec
	tr    transport
	addrs []netip.Addr
	known bool // resolved at least once
}

// dynamic is the part of a group whose servers are given by name.
type dynamic struct {
	mu    sync.Mutex // serializes refreshes
	names []*named
}

// list is the group's servers now.
func (g *group) list() []*Server {
	if p := g.cur.Load(); p != nil {
		return *p
	}
	return g.servers
}

// newGroup builds the group of zone from its server addresses.
func (f *Forwarder) newGroup(zone string, addrs []string, opts GroupOptions) (*group, error) {
	g := &group{zone: zone, policy: f.cfg.Policy}
	if opts.ForceTCP && opts.PreferUDP {
		return nil, fmt.Errorf("force-tcp and prefer-udp together: pick one")
	}
	if opts.Policy != "" {
		if err := checkPolicy(opts.Policy); err != nil {
			return nil, err
		}
		g.policy = opts.Policy
	}
	for _, a := range addrs {
		sp, err := ParseServer(a)
		if err != nil {
			return nil, err
		}
		tr := f.transportOf(sp, opts)
		if sp.ByName() {
			if f.cfg.Resolver == nil {
				return nil, fmt.Errorf("upstream %q is a name: servers given by name need the cluster index", a)
			}
			if g.dyn == nil {
				g.dyn = &dynamic{}
			}
			g.dyn.names = append(g.dyn.names, &named{spec: sp, tr: tr})
			continue
		}
		s, err := f.server(sp, tr)
		if err != nil {
			return nil, err
		}
		g.servers = append(g.servers, s)
	}
	if g.dyn != nil {
		empty := slices.Clone(g.servers)
		g.cur.Store(&empty)
		f.refreshGroup(g)
	}
	return g, nil
}

// server returns the registry's server for sp over tr, making it first.
func (f *Forwarder) server(sp Spec, tr transport) (*Server, error) {
	key := sp.String()
	if tr == transportTCP && sp.Scheme == schemeDNS {
		// A plain server that its group (or the forwarder) sends over TCP
		// is a server of its own: it keeps apart from the same address
		// asked over UDP elsewhere.
		key = "tcp://" + key
	}
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	if s, ok := f.reg.by[key]; ok {
		return s, nil
	}
	s := newServer(sp.dialAddr(), &f.cfg)
	switch tr {
	case transportTCP:
		s.Addr = key
		s.stream = newStreamPool(sp.dialAddr(), nil)
	case transportTLS:
		s.Addr = key
		s.stream = newStreamPool(sp.dialAddr(), f.ca.tlsConfigFunc(sp.ServerName, sp.Addr.Addr()))
	}
	f.reg.by[key] = s
	return s, nil
}

// refreshGroup resolves the group's named servers again and, when an
// address changed, swaps in the new server list and reports true.
func (f *Forwarder) refreshGroup(g *group) bool {
	d := g.dyn
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := false
	for _, n := range d.names {
		addrs, ok := f.cfg.Resolver.ResolveServer(n.spec.Name)
		if !ok {
			continue
		}
		addrs = slices.Clone(addrs)
		slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
		addrs = slices.Compact(addrs)
		if n.known && slices.Equal(addrs, n.addrs) {
			continue
		}
		if len(addrs) == 0 {
			f.log.Warn("upstream name resolves to no address; its zone has no server from it until it does",
				"zone", g.zone, "server", n.spec.String())
		} else {
			f.log.Info("upstream name resolved", "zone", g.zone, "server", n.spec.String(), "addresses", fmt.Sprint(addrs))
		}
		n.addrs, n.known, changed = addrs, true, true
	}
	if !changed {
		return false
	}
	list := slices.Clone(g.servers)
	for _, n := range d.names {
		for _, a := range n.addrs {
			s, err := f.server(n.spec.At(a), n.tr)
			if err != nil {
				continue
			}
			if !slices.Contains(list, s) {
				list = append(list, s)
			}
		}
	}
	g.cur.Store(&list)
	return true
}

// prune drops (and closes the connections of) servers no group lists any
// more: a Service that moved leaves its old addresses behind.
func (f *Forwarder) prune() {
	used := map[*Server]bool{}
	for _, g := range f.groups {
		for _, s := range g.list() {
			used[s] = true
		}
	}
	var gone []*Server
	f.reg.mu.Lock()
	for k, s := range f.reg.by {
		if !used[s] {
			delete(f.reg.by, k)
			gone = append(gone, s)
		}
	}
	f.reg.mu.Unlock()
	for _, s := range gone {
		s.closeStream()
	}
}

// maintain is the forwarder's periodic work besides probing: names
// resolved again, the CA bundle re-read, idle stream connections closed.
func (f *Forwarder) maintain(now time.Time) {
	changed := false
	for _, g := range f.groups {
		if g.dyn != nil && f.refreshGroup(g) {
			changed = true
		}
	}
	if changed {
		f.prune()
	}
	f.ca.refresh(now)
	for _, s := range f.Servers() {
		if s.stream != nil {
			s.stream.expireIdle()
		}
	}
}

// closeStreams closes every stream connection (the forwarder stops).
func (f *Forwarder) closeStreams() {
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	for _, s := range f.reg.by {
		s.closeStream()
	}
}

func (s *Server) closeStream() {
	if s.stream != nil {
		s.stream.close()
	}
}

// Transport names the server's transport: "udp" (UDP, TCP after a
// truncated reply), "tcp" or "tls".
func (s *Server) Transport() string {
	switch {
	case s.stream == nil:
		return "udp"
	case s.stream.tls != nil:
		return "tls"
	}
	return "tcp"
}

// StreamConns is how many stream (TCP-only or TLS) connections the server
// has open, and how many it has opened in all.
func (s *Server) StreamConns() (open int, opened uint64) {
	if s.stream == nil {
		return 0, 0
	}
	return s.stream.open(), s.stream.dials.Load()
}

func checkPolicy(p Policy) error {
	switch p {
	case Sequential, Random, RoundRobin:
		return nil
	}
	return fmt.Errorf("upstream policy %q: want sequential, random or round_robin", p)
}
