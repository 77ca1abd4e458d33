// Package upstream forwards queries the agent cannot answer itself to
// recursive resolvers: it picks a server per query (longest stub zone first,
// then the selection policy), tracks each server's health, retries truncated
// UDP replies over TCP, coalesces identical in-flight queries into one
// exchange and bounds how many exchanges run at once.
//
// Servers speak plain DNS (UDP first), TCP only (force-tcp) or DNS over
// TLS with certificate verification, over bounded pools of reused
// connections (spec.go, pool.go, tls.go); servers may be given by a name
// of the cluster zone and follow it as it resolves (groups.go).
//
// It does not cache: pkg/cache sits in front of it. A reply is only ever
// accepted when its ID and question match what was sent, so a spoofed or
// stray datagram cannot poison the cache behind it.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Errors returned by Exchange.
var (
	// ErrOverloaded means the bound on in-flight exchanges was reached; the
	// query was not sent.
	ErrOverloaded = errors.New("upstream: too many exchanges in flight")
	// ErrNoUpstream means no server is configured for the name.
	ErrNoUpstream = errors.New("upstream: no server configured")
	// ErrAllFailed means every attempt within the budget failed.
	ErrAllFailed = errors.New("upstream: every attempt failed")
)

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
	// MaxFails consecutive failures mark a server down; default 2.
	MaxFails int
	// ProbeInterval is how often a down server is probed; default 500ms.
	ProbeInterval time.Duration
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
	// Resolver resolves servers given by name (required when there are).
	Resolver Resolver
	Logger   *slog.Logger
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
	if c.MaxFails <= 0 {
		c.MaxFails = 2
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 500 * time.Millisecond
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
	sem    chan struct{}
	reg    registry  // every server by its canonical form (groups.go)
	ca     *caBundle // roots of TLS upstreams

	mu       sync.Mutex
	inflight map[flightKey]*flight

	coalesced atomic.Uint64
	overload  atomic.Uint64
}

type group struct {
	zone    string // lower-case FQDN; "." for the default group
	servers []*Server
	next    atomic.Uint32 // round-robin cursor
	policy  Policy
	// dyn holds the servers given by name, cur the servers with their
	// current addresses (nil: servers is the whole list); groups.go.
	dyn *dynamic
	cur atomic.Pointer[[]*Server]
}

// New validates cfg and returns a Forwarder. Call Run to probe down servers.
func New(cfg Config) (*Forwarder, error) {
	cfg.defaults()
	if err := checkPolicy(cfg.Policy); err != nil {
		return nil, err
	}
	f := &Forwarder{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "upstream"),
		sem:      make(chan struct{}, cfg.MaxInflight),
		inflight: make(map[flightKey]*flight),
		reg:      registry{by: map[string]*Server{}},
	}
	var err error
	if f.ca, err = newCABundle(cfg.CAFile, f.log); err != nil {
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
	for _, g := range f.groups {
		for _, s := range g.list() {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// Run probes down servers until ctx is done.
func (f *Forwarder) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.ProbeInterval)
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
		f.maintain(time.Now())
		for _, s := range f.Servers() {
			if s.Down() {
				s.probe(ctx)
			}
			s.expireIdle()
		}
	}
}

// Coalesced is how many queries were answered by joining another query's
// exchange; Overloaded how many were refused at the in-flight bound.
func (f *Forwarder) Coalesced() uint64  { return f.coalesced.Load() }
func (f *Forwarder) Overloaded() uint64 { return f.overload.Load() }

func (f *Forwarder) groupFor(name string) *group {
	for _, g := range f.groups {
		if g.zone == "." || dns.IsSubDomain(g.zone, name) {
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
// done.
func (f *Forwarder) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if len(q.Question) != 1 {
		return nil, fmt.Errorf("upstream: query has %d questions, want 1", len(q.Question))
	}
	key := keyOf(q)
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
	select {
	case f.sem <- struct{}{}:
	default:
		f.mu.Unlock()
		f.overload.Add(1)
		return nil, ErrOverloaded
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
		fl.reply, fl.err = f.exchange(bctx, shared)
		<-f.sem
		f.mu.Lock()
		delete(f.inflight, key)
		f.mu.Unlock()
		close(fl.done)
	}()
	select {
	case <-fl.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream: waiting for exchange: %w", ctx.Err())
	}
	return withID(fl.reply, q.Id), fl.err
}

func withID(m *dns.Msg, id uint16) *dns.Msg {
	if m == nil {
		return nil
	}
	c := m.Copy()
	c.Id = id
	return c
}

type flightKey struct {
	name          string
	qtype, qclass uint16
	do, cd        bool
}

type flight struct {
	done  chan struct{}
	reply *dns.Msg
	err   error
}

func keyOf(q *dns.Msg) flightKey {
	k := flightKey{name: strings.ToLower(q.Question[0].Name), qtype: q.Question[0].Qtype, qclass: q.Question[0].Qclass, cd: q.CheckingDisabled}
	if o := q.IsEdns0(); o != nil {
		k.do = o.Do()
	}
	return k
}

// exchange tries servers in policy order, at most 2 x servers attempts,
// within ctx's deadline.
func (f *Forwarder) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	g := f.groupFor(strings.ToLower(q.Question[0].Name))
	if g == nil || len(g.list()) == 0 {
		return nil, ErrNoUpstream
	}
	order := f.order(g)
	var lastReply *dns.Msg
	var errs []error
	attempts := 2 * len(order)
	for i := 0; i < attempts; i++ {
		if ctx.Err() != nil {
			break
		}
		s := order[i%len(order)]
		// Skip down servers on the first pass unless every server is down,
		// so that a dead server costs nothing while a live one exists.
		if i < len(order) && s.Down() && anyUp(order) {
			continue
		}
		reply, err := s.exchange(ctx, q, f.cfg.TryTimeout)
		switch {
		case err != nil:
			s.fail(err)
			errs = append(errs, err)
			continue
		case reply.Rcode == dns.RcodeServerFailure:
			// A resolver that cannot resolve is a failed attempt: try the
			// next one, and let health tracking notice.
			s.fail(errors.New("SERVFAIL"))
			lastReply = reply
			continue
		case reply.Rcode == dns.RcodeRefused:
			// Refusing is an answer from a live server (often a policy for
			// this name): try another, but do not mark this one down.
			s.ok()
			lastReply = reply
			continue
		}
		s.ok()
		return reply, nil
	}
	if lastReply != nil {
		return lastReply, nil
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return nil, fmt.Errorf("%w: %w", ErrAllFailed, errors.Join(errs...))
}

func anyUp(ss []*Server) bool {
	for _, s := range ss {
		if !s.Down() {
			return true
		}
	}
	return false
}

func (f *Forwarder) order(g *group) []*Server {
	servers := g.list()
	n := len(servers)
	out := make([]*Server, n)
	switch g.policy {
	case Sequential:
		copy(out, servers)
	case RoundRobin:
		start := int(g.next.Add(1)) % n
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
