// Package upstream forwards queries the agent cannot answer itself to
// recursive resolvers: it picks a server per query (longest stub zone first,
// then the selection policy), tracks each server's health, retries truncated
// UDP replies over TCP, coalesces identical in-flight queries into one
// exchange and bounds how many exchanges run at once, for everyone together
// and for each client and namespace (see admit).
//
// Servers speak plain DNS (UDP first), TCP only (force-tcp), DNS over
// TLS or DNS over HTTPS with certificate verification, over bounded pools
// of reused connections (spec.go, pool.go, tls.go, doh.go); servers may be
// given by a name, of the cluster zone or resolved through the node's
// resolvers, and follow it as it resolves (groups.go, hostnames.go).
//
// A group of servers (the default upstreams, a stub zone) carries the
// options of CoreDNS's forward: failover on chosen rcodes, a chained group
// reached on chosen rcodes or NODATA (next), fail-fast when every server
// is down, zones excepted, the read timeout, the health probes, the idle
// lifetime of connections (failover.go, health.go).
//
// It does not cache: pkg/cache sits in front of it. A reply is only ever
// accepted when its ID and question match what was sent, so a spoofed or
// stray datagram cannot poison the cache behind it, and it is cut down to
// what answers the question (minimal.go) before anyone sees it.
//
// Health follows timeouts and network errors only, through probes as
// CoreDNS's (health.go). A SERVFAIL or REFUSED is an answer from a live
// server (a DNSSEC-broken name, a policy): by default it is tried once
// more on another server and then returned, and it never marks a server
// down.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/fairshare"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Errors returned by Exchange.
var (
	// ErrOverloaded means the bound on in-flight exchanges was reached; the
	// query was not sent. It matches stage.ErrOverloaded.
	ErrOverloaded error = &classed{"upstream: too many exchanges in flight", stage.ErrOverloaded}
	// ErrNoUpstream means no server is configured for the name. It matches
	// stage.ErrNoServer.
	ErrNoUpstream error = &classed{"upstream: no server configured", stage.ErrNoServer}
	// ErrAllFailed means every attempt within the budget failed.
	ErrAllFailed = errors.New("upstream: every attempt failed")
	// ErrAllDown means every server of the group was down and the group
	// fails fast (GroupOptions.Failfast): no server was asked. It matches
	// stage.ErrAllDown.
	ErrAllDown error = &classed{"upstream: every server is down (failfast)", stage.ErrAllDown}
)

// classed is a sentinel error that also matches a class of failure of
// pkg/query/stage, which the pipeline reads without importing this package.
type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string        { return e.msg }
func (e *classed) Is(target error) bool { return target == e.class }

// Policy orders the servers of a group for one query.
type Policy string

// Selection policies.
const (
	Sequential Policy = "sequential"
	Random     Policy = "random"
	RoundRobin Policy = "round_robin"
)

// Config configures a Forwarder. Zero values take the defaults named.
type Config struct {
	// Servers are the default upstreams, host:port.
	Servers []string
	// Stubs maps a zone (FQDN, any case) to its own servers; the longest
	// matching zone wins over Servers.
	Stubs map[string][]string
	// Policy orders servers for each query; default random.
	Policy Policy
	// TryTimeout bounds one attempt against one server; default 2s.
	TryTimeout time.Duration
	// Budget bounds a whole Exchange (all attempts); default 5s.
	Budget time.Duration
	// MaxInflight bounds concurrent upstream exchanges; default 1000.
	MaxInflight int
	// MaxClientInflight bounds the exchanges started on behalf of one
	// client address (the query's stage.Origin); default MaxInflight/8,
	// at least 1 (fairshare.PerClient). MaxNamespaceInflight bounds those
	// of one namespace's pods together; default MaxInflight/4, at least 1.
	// Negative: no such bound. Work on no client's behalf (prefetch) has neither. See admit
	// for the light clients these bounds never refuse.
	MaxClientInflight, MaxNamespaceInflight int
	// Panics counts panics recovered in shared exchanges and in the
	// probes of down servers; nil: a counter of the forwarder's own.
	Panics *recovery.Counter
	// MaxFails: a server is down once more health probes than this have
	// failed in a row; default 2 (GroupOptions.Health sets it per group,
	// 0 included: never down).
	MaxFails int
	// ProbeInterval is the pause between a failed probe and the next;
	// default 500ms.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one health probe; default 1s.
	ProbeTimeout time.Duration
	// UDPSize is the EDNS0 buffer size advertised upstream; default 1232.
	UDPSize uint16
	// ForceTCP sends every exchange (and health probe) of plain-DNS
	// servers over TCP, as CoreDNS's force_tcp: how NodeLocal DNSCache
	// talks to the central cluster DNS. GroupOptions.PreferUDP overrides
	// it for a group.
	ForceTCP bool
	// Options apply to Servers; StubOptions to the stub zone of the same
	// spelling in Stubs (groups.go).
	Options     GroupOptions
	StubOptions map[string]GroupOptions
	// CAFile is a PEM bundle that DNS-over-TLS upstreams are verified
	// against, re-read when it changes; "": the system's roots.
	CAFile string
	// Resolver resolves servers given by a name of ClusterZones (required
	// when there are).
	Resolver Resolver
	// ClusterZones are the zones (FQDNs) whose names Resolver resolves;
	// names elsewhere are resolved by asking NameServers (hostnames.go).
	ClusterZones []string
	// NameServers (ip[:port]) resolve servers given by names outside
	// ClusterZones: the node's resolvers, never the agent itself.
	NameServers []string
	// Tap is told about every exchange with a server; nil: none.
	Tap    Tap
	Logger *slog.Logger
}

// Tap logs the exchanges with upstream servers (pkg/observe/dnstap's
// Set), as CoreDNS's forward does when dnstap is configured: the query as
// sent (its ID the one on the wire) and, when one came, the reply, each
// attempt apart (a UDP reply truncated and the TCP retry are two). server
// is invalid for DNS-over-HTTPS servers. It is called on the exchange's
// goroutine and must not wait; the messages are read-only.
type Tap interface {
	Forwarded(tcp bool, server netip.AddrPort, sent time.Time, query *dns.Msg, received time.Time, reply *dns.Msg)
}

func (c *Config) defaults() {
	if c.Policy == "" {
		c.Policy = Random
	}
	if c.TryTimeout <= 0 {
		c.TryTimeout = 2 * time.Second
	}
	if c.Budget <= 0 {
		c.Budget = 5 * time.Second
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 1000
	}
	if c.MaxClientInflight == 0 {
		c.MaxClientInflight = fairshare.PerClient(c.MaxInflight, 1)
	}
	if c.MaxNamespaceInflight == 0 {
		c.MaxNamespaceInflight = max(c.MaxInflight/4, 1)
	}
	if c.Panics == nil {
		c.Panics = new(recovery.Counter)
	}
	if c.MaxFails <= 0 {
		c.MaxFails = 2
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 500 * time.Millisecond
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = defaultProbeTimeout
	}
	if c.UDPSize == 0 {
		c.UDPSize = 1232
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// NormalizeAddr turns "host" or "host:port" into "host:port" (port 53 by
// default). It rejects anything that is not an IP address: an upstream named
// by a host name would need DNS to reach DNS.
func NormalizeAddr(s string) (string, error) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return "", fmt.Errorf("upstream %q: port 0", s)
		}
		return ap.String(), nil
	}
	h := s
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	return "", fmt.Errorf("upstream %q: want an IP address with an optional :port", s)
}

// Forwarder sends queries upstream. It is safe for concurrent use.
type Forwarder struct {
	cfg    Config
	log    *slog.Logger
	groups []*group // sorted by zone length, longest first; the default group ("." zone) last
	// chained are the groups reached only through another's Next.
	chained []*group
	sem     chan struct{}
	// run performs one shared exchange: exchange, or a test's stand-in.
	run func(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
	// probe asks a server the health question: (*Server).probe, or a
	// test's stand-in.
	probe func(ctx context.Context, s *Server) error
	reg   registry  // every server by its canonical form (groups.go)
	ca    *caBundle // roots of TLS upstreams
	hosts *hostNames
	// running holds Run's context while it runs: the probe loops end with
	// it (health.go).
	running atomic.Pointer[context.Context]

	mu sync.Mutex
	// inflight holds the exchanges under way by the cache's key of their
	// query: queries the cache would answer alike share one exchange.
	inflight map[stage.Key]*flight
	// byClient and byNamespace count the exchanges in flight started for
	// each client and namespace (under mu); entries exist only while some
	// are, so their size is bounded by MaxInflight.
	byClient    map[netip.Addr]int
	byNamespace map[string]int

	coalesced     atomic.Uint64
	overload      atomic.Uint64
	clientLimited atomic.Uint64
	// allDown counts exchanges that found every server of their group
	// marked down (and tried them anyway).
	allDown atomic.Uint64
}

type group struct {
	zone    string // lower-case FQDN; "." for the default group
	servers []*Server
	rr      atomic.Uint32 // round-robin cursor
	policy  Policy
	// The options of GroupOptions, checked (failover.go).
	failover    []int
	failfast    bool
	except      []string
	readTimeout time.Duration
	// next takes the replies whose rcode is in nextOn (a bit per rcode)
	// or that are NODATA when nextNoData is set.
	next       *group
	nextOn     uint32
	nextNoData bool
	// dyn holds the servers given by name, cur the servers with their
	// current addresses (nil: servers is the whole list); groups.go.
	dyn *dynamic
	cur atomic.Pointer[[]*Server]
	// addrs and opts are what the group was made of, as given: Moved
	// compares them.
	addrs []string
	opts  GroupOptions
}

// New validates cfg and returns a Forwarder. Call Run to probe down servers.
func New(cfg Config) (*Forwarder, error) {
	cfg.defaults()
	// Canonical once, here, so that telling a server's name in or out of
	// them compares bytes.
	zs := make([]string, len(cfg.ClusterZones))
	for i, z := range cfg.ClusterZones {
		zs[i] = dnsname.Canonical(z)
	}
	cfg.ClusterZones = zs
	if err := checkPolicy(cfg.Policy); err != nil {
		return nil, err
	}
	f := &Forwarder{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "upstream"),
		sem:         make(chan struct{}, cfg.MaxInflight),
		inflight:    make(map[stage.Key]*flight),
		byClient:    make(map[netip.Addr]int),
		byNamespace: make(map[string]int),
		reg:         registry{by: map[string]*Server{}},
	}
	f.run = f.exchange
	f.probe = func(ctx context.Context, s *Server) error { return s.probe(ctx) }
	var err error
	if f.ca, err = newCABundle(cfg.CAFile, f.log); err != nil {
		return nil, err
	}
	if f.hosts, err = newHostNames(cfg.NameServers, f.log); err != nil {
		return nil, err
	}
	zones := map[string]string{}
	for zone, addrs := range cfg.Stubs {
		z := dns.CanonicalName(zone)
		if _, ok := dns.IsDomainName(z); !ok || z == "." {
			return nil, fmt.Errorf("stub domain %q: not a domain name", zone)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("stub domain %q: no servers", zone)
		}
		if prev, ok := zones[z]; ok {
			// Two spellings of one zone: which one won would depend on
			// map order.
			return nil, fmt.Errorf("stub domain %q: same zone as %q", zone, prev)
		}
		zones[z] = zone
		g, err := f.newGroup(z, addrs, cfg.StubOptions[zone])
		if err != nil {
			return nil, fmt.Errorf("stub domain %q: %w", zone, err)
		}
		f.groups = append(f.groups, g)
	}
	sort.Slice(f.groups, func(i, j int) bool {
		if len(f.groups[i].zone) != len(f.groups[j].zone) {
			return len(f.groups[i].zone) > len(f.groups[j].zone)
		}
		return f.groups[i].zone < f.groups[j].zone
	})
	def, err := f.newGroup(".", cfg.Servers, cfg.Options)
	if err != nil {
		return nil, err
	}
	if len(cfg.Servers) == 0 && cfg.Options.Next != nil {
		return nil, errors.New("next: the default group has no servers of its own")
	}
	f.groups = append(f.groups, def)
	for zone := range cfg.StubOptions {
		if _, ok := cfg.Stubs[zone]; !ok {
			return nil, fmt.Errorf("options for stub domain %q, which has no servers", zone)
		}
	}
	return f, nil
}

// Servers lists every distinct configured server.
func (f *Forwarder) Servers() []*Server {
	seen := map[*Server]bool{}
	var out []*Server
	for _, g := range f.allGroups() {
		for _, s := range g.list() {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// allGroups are the routed groups and those chained behind them.
func (f *Forwarder) allGroups() []*group {
	if len(f.chained) == 0 {
		return f.groups
	}
	return append(slices.Clone(f.groups), f.chained...)
}

// Running reports whether Run runs (and so do the health probes).
func (f *Forwarder) Running() bool { return f.running.Load() != nil }

// runContext is Run's context while Run runs, else nil: the context the
// forwarder's background work (health probes, name resolution) runs
// under, so that it ends with Run.
func (f *Forwarder) runContext() context.Context {
	if p := f.running.Load(); p != nil {
		return *p
	}
	return nil
}

// maintainEvery is how often Run does the forwarder's periodic work:
// names resolved again, the CA bundle re-read, idle connections closed.
const maintainEvery = 500 * time.Millisecond

// Run keeps the forwarder's servers until ctx is done: it runs their
// health probes (started by failed exchanges, health.go) and the periodic
// work of maintain.
func (f *Forwarder) Run(ctx context.Context) {
	f.running.Store(&ctx)
	defer f.running.Store(nil)
	t := time.NewTicker(maintainEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, s := range f.Servers() {
				s.closeIdle()
			}
			f.closeStreams()
			return
		case <-t.C:
		}
		f.maintenanceTick()
	}
}

// maintenanceTick does Run's periodic work once, every maintainEvery:
// maintain, and the idle connections of every server closed. A panic
// there is recovered, counted and logged: it must not take the agent
// down.
func (f *Forwarder) maintenanceTick() {
	defer f.cfg.Panics.Recover(f.log, "maintaining the upstreams")
	f.maintain(time.Now())
	for _, s := range f.Servers() {
		s.expireIdle()
	}
}

// ForwarderStats are the forwarder's own counters (Coalesced, Overloaded,
// ClientLimited, AllDown). pkg/observe/metrics reports them as they are:
// the JSON names are the /stats document's forwarder section (read by
// `nodedns stats --json`), so fields are added, never renamed.
type ForwarderStats struct {
	Coalesced     uint64 `json:"coalesced"`
	Overloaded    uint64 `json:"overloaded"`
	ClientLimited uint64 `json:"client_limited"`
	AllDown       uint64 `json:"all_down"`
}

// Stats returns the forwarder's own counters.
func (f *Forwarder) Stats() ForwarderStats {
	return ForwarderStats{Coalesced: f.Coalesced(), Overloaded: f.Overloaded(), ClientLimited: f.ClientLimited(), AllDown: f.AllDown()}
}

// Coalesced is how many queries were answered by joining another query's
// exchange; Overloaded how many were refused at an in-flight bound (all of
// them), ClientLimited how many of those at a client's or namespace's
// share.
func (f *Forwarder) Coalesced() uint64     { return f.coalesced.Load() }
func (f *Forwarder) Overloaded() uint64    { return f.overload.Load() }
func (f *Forwarder) ClientLimited() uint64 { return f.clientLimited.Load() }

// AllDown is how many exchanges found every server of their group marked
// down: health checking had given up on all of them (CoreDNS counts this
// as coredns_forward_healthcheck_broken_total).
func (f *Forwarder) AllDown() uint64 { return f.allDown.Load() }

// groupFor is the group of name (lower-case): the longest stub zone that
// holds it and does not except it, else the default group unless it
// excepts it.
func (f *Forwarder) groupFor(name string) *group {
	for _, g := range f.groups {
		if dnsname.InZone(name, g.zone) && !g.excepts(name) {
			return g
		}
	}
	return nil
}

// Exchange answers q (exactly one question) from upstream. The reply's ID is
// q's. Identical concurrent queries share one exchange. A reply with any
// rcode is returned as a reply; an error means no usable reply arrived.
//
// The exchange itself runs on its own goroutine (at most MaxInflight of
// them) under the Budget alone, so that it survives the caller that started
// it; every caller, that one included, stops waiting when its own ctx is
// done. The exchange counts against the share of the client (and
// namespace) of o, for as long as it runs; the zero Origin (work on no
// client's behalf) counts against the total only.
func (f *Forwarder) Exchange(ctx context.Context, o stage.Origin, q *dns.Msg) (*dns.Msg, error) {
	if len(q.Question) != 1 {
		return nil, fmt.Errorf("upstream: query has %d questions, want 1", len(q.Question))
	}
	key := stage.KeyOf(q)
	hasOrigin := !o.IsZero()
	f.mu.Lock()
	if fl, ok := f.inflight[key]; ok {
		f.mu.Unlock()
		f.coalesced.Add(1)
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("upstream: waiting for coalesced exchange: %w", ctx.Err())
		}
		return withID(fl.reply, q.Id), fl.err
	}
	if err := f.admit(o, hasOrigin); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	fl := &flight{done: make(chan struct{})}
	f.inflight[key] = fl
	f.mu.Unlock()

	// The exchange is shared, so it must not die with the first caller's
	// context: it runs under the budget alone, on a copy of the query (the
	// caller may be gone, and its message reused, before it ends).
	shared := q.Copy()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.Budget)
	go func() {
		defer cancel()
		defer func() {
			// Whatever happened (a panic included), the slots go back and
			// every waiter is released with what there is.
			f.mu.Lock()
			delete(f.inflight, key)
			f.leave(o, hasOrigin)
			f.mu.Unlock()
			close(fl.done)
		}()
		defer func() {
			if p := recover(); p != nil {
				fl.reply = nil
				fl.err = f.cfg.Panics.Caught(f.log, p, "exchanging with upstream", "name", shared.Question[0].Name, "type", shared.Question[0].Qtype)
			}
		}()
		fl.reply, fl.err = f.run(bctx, shared)
	}()
	select {
	case <-fl.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream: waiting for exchange: %w", ctx.Err())
	}
	return withID(fl.reply, q.Id), fl.err
}

// lightInflight: a client with fewer exchanges than this in flight is
// light (a pod resolving as pods do: A and AAAA, a search-path step or
// two). The namespace share never refuses a light client, nor the reserve
// one holding fewer than reserveInflight.
const (
	lightInflight   = 4
	reserveInflight = 2
)

// admit takes an in-flight slot for a new exchange on behalf of o (f.mu
// held). Without shares, a few pods asking random names under a zone whose
// servers do not answer hold every slot for the whole budget, and every
// other pod's cache misses fail meanwhile; the server's own per-client
// bound does not prevent that, its slots being more than the forwarder's.
// So, the fuller the slots, the lighter a client must be to get one:
//   - one client holds at most MaxClientInflight;
//   - a heavy client (heavyAt or more in flight: lightInflight, or fewer
//     for a small MaxClientInflight) is refused once its namespace holds
//     MaxNamespaceInflight;
//   - the last eighth of MaxInflight is a reserve: only a client holding
//     fewer than reserveInflight gets a slot from it.
//
// A pod that is not flooding gets a slot while any is left, whether the
// flooders are in its own namespace or are more than the shares can hold
// (it takes an eighth of MaxInflight / reserveInflight flooding pods
// beyond those filling their shares to use up the reserve).
func (f *Forwarder) admit(o stage.Origin, hasOrigin bool) error {
	if hasOrigin {
		held := f.byClient[o.Client]
		refuse := func(why string, args ...any) error {
			f.overload.Add(1)
			f.clientLimited.Add(1)
			return fmt.Errorf("%w: "+why, append([]any{ErrOverloaded}, args...)...)
		}
		if m := f.cfg.MaxClientInflight; m > 0 && held >= m {
			return refuse("client %s holds its share (%d)", o.Client, m)
		}
		if m := f.cfg.MaxNamespaceInflight; m > 0 && held >= f.heavyAt() && o.Namespace != "" && f.byNamespace[o.Namespace] >= m {
			return refuse("namespace %s holds its share (%d)", o.Namespace, m)
		}
		if held >= reserveInflight && len(f.sem) >= cap(f.sem)-cap(f.sem)/8 {
			return refuse("client %s holds %d and the slots left are a reserve for clients holding fewer than %d", o.Client, held, reserveInflight)
		}
	}
	select {
	case f.sem <- struct{}{}:
	default:
		f.overload.Add(1)
		return ErrOverloaded
	}
	if hasOrigin {
		f.byClient[o.Client]++
		if o.Namespace != "" {
			f.byNamespace[o.Namespace]++
		}
	}
	return nil
}

// heavyAt is how many exchanges in flight make a client heavy (it is
// light while it holds fewer): lightInflight, or half its share
// (MaxClientInflight, at least 1) when that is smaller.
func (f *Forwarder) heavyAt() int {
	if m := f.cfg.MaxClientInflight; m > 0 {
		return min(lightInflight, max(m/2, 1))
	}
	return lightInflight
}

// leave gives back what admit took (f.mu held).
func (f *Forwarder) leave(o stage.Origin, hasOrigin bool) {
	<-f.sem
	if !hasOrigin {
		return
	}
	if f.byClient[o.Client] <= 1 {
		delete(f.byClient, o.Client)
	} else {
		f.byClient[o.Client]--
	}
	if o.Namespace == "" {
		return
	}
	if f.byNamespace[o.Namespace] <= 1 {
		delete(f.byNamespace, o.Namespace)
	} else {
		f.byNamespace[o.Namespace]--
	}
}

func withID(m *dns.Msg, id uint16) *dns.Msg {
	if m == nil {
		return nil
	}
	c := m.Copy()
	c.Id = id
	return c
}

type flight struct {
	done  chan struct{}
	reply *dns.Msg
	err   error
}

func (f *Forwarder) order(g *group) []*Server {
	servers := g.list()
	n := len(servers)
	out := make([]*Server, n)
	switch g.policy {
	case Sequential:
		copy(out, servers)
	case RoundRobin:
		start := int(g.rr.Add(1)) % n
		for i := range out {
			out[i] = servers[(start+i)%n]
		}
	default:
		perm := randPerm(n)
		for i, p := range perm {
			out[i] = servers[p]
		}
	}
	return out
}
