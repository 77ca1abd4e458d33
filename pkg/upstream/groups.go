package upstream

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
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

	// Failover lists the rcodes whose reply is passed on to the group's
	// next server, each server asked at most once (CoreDNS's failover;
	// failover.go). nil: nodedns's own default, a SERVFAIL or REFUSED
	// asked once more of another live server; empty: none, the reply is
	// the answer (CoreDNS without failover).
	Failover []int
	// Failfast answers at once with ErrAllDown when every server of the
	// group is down, instead of trying one anyway (CoreDNS's
	// failfast_all_unhealthy_upstreams).
	Failfast bool
	// Except lists zones (FQDNs) whose names the group does not take: they
	// go to the next shorter stub zone, else the default group, else
	// nowhere (ErrNoUpstream); the group's own zone apex is never
	// excepted (CoreDNS's except).
	Except []string
	// ReadTimeout bounds one attempt against one server; 0: the
	// forwarder's TryTimeout (CoreDNS's read_timeout).
	ReadTimeout time.Duration
	// Health judges the group's servers; nil: MaxFails and ProbeInterval
	// of the Config, probes of ". NS" with RD (health.go).
	Health *Health
	// Expire is how long a pooled connection (TCP, TLS, HTTPS) may sit
	// idle; 0: 10s (CoreDNS's expire). UDP never reuses a socket.
	Expire time.Duration
	// DoHMethod is POST (default) or GET for the group's https:// servers
	// (CoreDNS's doh_method).
	DoHMethod string
	// Next is where a reply goes on when its rcode is one of Next.On (or
	// it is NODATA and Next.OnNoData): another set of servers with options
	// of its own, as a second forward directive in a CoreDNS server
	// block reached by next / next_on_nodata (failover.go).
	Next *Next
}

// Next is a group chained behind another: the servers a reply is passed
// on to when it has one of the rcodes On, or is NODATA (NOERROR without
// answer records) and OnNoData is set. No Servers: such replies become
// ErrNoUpstream (SERVFAIL), as CoreDNS's when no forward after the first
// takes the name.
type Next struct {
	On       []int
	OnNoData bool
	Servers  []string
	Options  GroupOptions
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
	transportDoH                  // DNS over HTTPS (doh.go)
)

func (f *Forwarder) transportOf(sp Spec, opts GroupOptions) transport {
	switch sp.Scheme {
	case schemeTLS:
		return transportTLS
	case schemeHTTPS:
		return transportDoH
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
	so    serverOpts
	addrs []netip.Addr
	known bool // resolved at least once
	// external: outside the cluster zones, resolved through the node's
	// resolvers (hostnames.go) instead of Config.Resolver.
	external bool
}

// serverOpts are what a group decides about each of its servers; servers
// of one address with different options are different servers.
type serverOpts struct {
	health    Health
	expire    time.Duration
	dohMethod string
}

func (o serverOpts) key() string {
	return fmt.Sprintf("%s,exp=%s,doh=%s", o.health.key(), o.expire, o.dohMethod)
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

// newGroup builds the group of zone from its server addresses, and the
// groups chained behind it (opts.Next).
func (f *Forwarder) newGroup(zone string, addrs []string, opts GroupOptions) (*group, error) {
	g := &group{zone: zone, policy: f.cfg.Policy, failover: opts.Failover, failfast: opts.Failfast,
		readTimeout: f.cfg.TryTimeout, addrs: slices.Clone(addrs), opts: opts}
	if opts.ForceTCP && opts.PreferUDP {
		return nil, fmt.Errorf("force-tcp and prefer-udp together: pick one")
	}
	if opts.Policy != "" {
		if err := checkPolicy(opts.Policy); err != nil {
			return nil, err
		}
		g.policy = opts.Policy
	}
	for _, rc := range opts.Failover {
		if rc == dns.RcodeSuccess || rc < 0 || rc > maxRcode {
			return nil, fmt.Errorf("failover rcode %d: want an error rcode", rc)
		}
	}
	if opts.ReadTimeout < 0 {
		return nil, fmt.Errorf("read timeout %s: want more than 0", opts.ReadTimeout)
	}
	if opts.ReadTimeout > 0 {
		g.readTimeout = opts.ReadTimeout
	}
	for _, z := range opts.Except {
		fq := strings.ToLower(dns.Fqdn(z))
		if _, ok := dns.IsDomainName(fq); !ok {
			return nil, fmt.Errorf("except %q: not a domain name", z)
		}
		g.except = append(g.except, fq)
	}
	so := serverOpts{health: Health{MaxFails: f.cfg.MaxFails, Interval: f.cfg.ProbeInterval}, expire: opts.Expire, dohMethod: opts.DoHMethod}
	if opts.Health != nil {
		if opts.Health.MaxFails < 0 {
			return nil, fmt.Errorf("max fails %d: want 0 or more", opts.Health.MaxFails)
		}
		so.health = *opts.Health
	}
	so.health = so.health.normalized()
	if _, ok := dns.IsDomainName(so.health.Domain); !ok {
		return nil, fmt.Errorf("health check domain %q: not a domain name", so.health.Domain)
	}
	if so.expire < 0 {
		return nil, fmt.Errorf("expire %s: want more than 0", so.expire)
	}
	if so.expire == 0 {
		so.expire = idleTCP
	}
	switch so.dohMethod {
	case "":
		so.dohMethod = http.MethodPost
	case http.MethodPost, http.MethodGet:
	default:
		return nil, fmt.Errorf("DoH method %q: want POST or GET", so.dohMethod)
	}
	for _, a := range addrs {
		sp, err := ParseServer(a)
		if err != nil {
			return nil, err
		}
		tr := f.transportOf(sp, opts)
		if sp.ByName() {
			external := f.external(sp.Name)
			switch {
			case !external && f.cfg.Resolver == nil:
				return nil, fmt.Errorf("upstream %q is a name of the cluster zone: servers given by such names need the cluster index", a)
			case external && len(f.hosts.servers) == 0:
				return nil, fmt.Errorf("upstream %q is a name: no resolver to resolve it (the node's resolvers, or --upstream-resolver)", a)
			}
			if g.dyn == nil {
				g.dyn = &dynamic{}
			}
			g.dyn.names = append(g.dyn.names, &named{spec: sp, tr: tr, so: so, external: external})
			continue
		}
		s, err := f.server(sp, tr, so)
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
	if n := opts.Next; n != nil {
		if len(n.Options.Except) > 0 {
			return nil, fmt.Errorf("next: except is for the first servers of a zone only")
		}
		next, err := f.newGroup(zone, n.Servers, n.Options)
		if err != nil {
			return nil, fmt.Errorf("next: %w", err)
		}
		g.next, g.nextNoData = next, n.OnNoData
		for _, rc := range n.On {
			if rc < 0 || rc > maxRcode {
				return nil, fmt.Errorf("next: rcode %d: want 0 to %d", rc, maxRcode)
			}
			g.nextOn |= 1 << rc
		}
		if g.nextOn == 0 && !g.nextNoData {
			return nil, fmt.Errorf("next: no rcode (nor NODATA) to pass on")
		}
		f.chained = append(f.chained, next)
	}
	return g, nil
}

// server returns the registry's server for sp over tr, making it first.
func (f *Forwarder) server(sp Spec, tr transport, so serverOpts) (*Server, error) {
	key := sp.String()
	if tr == transportTCP && sp.Scheme == schemeDNS {
		// A plain server that its group (or the forwarder) sends over TCP
		// is a server of its own: it keeps apart from the same address
		// asked over UDP elsewhere.
		key = "tcp://" + key
	}
	addr := key
	key += "|" + so.key()
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	if s, ok := f.reg.by[key]; ok {
		return s, nil
	}
	s := newServer(sp.dialAddr(), &f.cfg, so.health, so.expire)
	switch tr {
	case transportTCP:
		s.Addr = addr
		s.stream = newStreamPool(sp.dialAddr(), nil, so.expire)
	case transportTLS:
		s.Addr = addr
		s.stream = newStreamPool(sp.dialAddr(), f.ca.tlsConfigFunc(sp.ServerName, sp.Addr.Addr()), so.expire)
	case transportDoH:
		s.Addr = addr
		s.doh = newDoHClient(sp, f.ca.tlsConfigFunc(sp.ServerName, sp.Addr.Addr()), so.dohMethod, so.expire)
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
		var addrs []netip.Addr
		var ok bool
		if n.external {
			addrs, ok = f.hosts.lookup(n.spec.Name)
		} else {
			addrs, ok = f.cfg.Resolver.ResolveServer(n.spec.Name)
		}
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
			s, err := f.server(n.spec.At(a), n.tr, n.so)
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
	for _, g := range f.allGroups() {
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
	f.hosts.maintain(f.runContext(), now)
	changed := false
	for _, g := range f.allGroups() {
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
	if s.doh != nil {
		s.doh.close()
	}
}

// Transport names the server's transport: "udp" (UDP, TCP after a
// truncated reply), "tcp", "tls" or "https".
func (s *Server) Transport() string {
	switch {
	case s.doh != nil:
		return "https"
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
