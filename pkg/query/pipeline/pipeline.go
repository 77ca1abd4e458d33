// Package pipeline answers DNS queries. It decides, in one place
// (lookup, serve.go), the order of the stages: name rewrites, then for a
// pod of this node the search path (pkg/ndots, called once a query:
// search.go gives it the stage order and the access list), static
// records, the cluster zone, cache and upstream, and where the CoreDNS
// plugins around them run (plugins.go: local and chaos first, the access
// list after rewrites, templates before static records, header rules and
// minimal answers on the stages' replies); and it turns
// their one Result into the reply: the client's ID, question case, EDNS
// size, TC bit.
//
// It is the Handler behind pkg/query/server's transport. Answer runs on a
// socket's reader and answers what needs no waiting there (cache hits,
// cluster names, shortcuts), at no allocation; Resolve runs the same code
// allowed to wait, off the reader, for what Answer said needs waiting. Each
// stage that could block (an upstream exchange, the cluster DNS before the
// cluster synced) is where the no-wait run stops.
//
// It keeps cluster and static replies packed (packed.go), which makes
// repeated answers cheap; the search path keeps its own decisions and
// shortcut replies (pkg/ndots). It also owns the
// failure log of SERVFAIL replies (failures.go), the forwarding-loop probe
// (loop.go) and the routing of some zones to a resolver of their own
// (route.go). The stages are the interfaces of pkg/query/stage; this
// package imports none of their implementations.
package pipeline

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/nodedns/nodedns/pkg/ndots"
	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Config configures a Pipeline. Zero values take the defaults named.
//
// Resolution order for one query, as CoreDNS's plugin order has it: name
// rewrites (Rewriter) first, then the search-path walk for pods on this
// node (Pods, when Autopath), each step of which is resolved as below;
// static records (Hosts); the cluster zone (Cluster); cache and upstream
// (Resolver, or Route's for the names it routes).
type Config struct {
	// Rewriter rewrites query names before everything else (see
	// SetRewriter); nil: none.
	Rewriter stage.Rewriter
	// Pods maps clients to namespaces for the search-path walk.
	Pods stage.Pods
	// Autopath enables the server-side search-path walk.
	Autopath bool
	// Search are the extra search domains pods inherit from the node
	// (lower-case FQDNs), walked after the cluster's own.
	Search []string
	// Hosts answers static records before the cluster zone; nil: none.
	Hosts stage.Hosts
	// Cluster answers the cluster zone; nil disables it (and the walk).
	Cluster stage.Cluster
	// Files answers the zones of zone files after the cluster zone, as
	// CoreDNS's file comes after kubernetes (zone.go); nil: none.
	Files stage.ZoneFiles
	// ClusterDNS, when set, answers cluster-zone queries until Cluster has
	// synced; without it they get SERVFAIL (never a false NXDOMAIN).
	ClusterDNS stage.Exchanger
	// Resolver answers everything else: cache, then upstream. Required.
	Resolver stage.Resolver
	// Route sends the names of some zones to a resolver of their own
	// instead of Resolver; nil: none.
	Route *Route
	// Views send the queries they hold, of their zones, to resolvers of
	// their own (views.go); PlainZones are zones of blocks without a
	// view (stub domains, routed zones), which win over a view of a less
	// specific zone. Restart-only.
	Views      []View
	PlainZones []string
	// Plugins are the CoreDNS plugins run around the stages (plugins.go);
	// see SetPlugins. nil: none.
	Plugins *Plugins
	// MinimalResponses empties the authority and additional sections of
	// NOERROR answers, as CoreDNS's minimal (restart-only: packed replies
	// are kept in the form they were packed in).
	MinimalResponses bool
	// LoadBalance rotates the order of A and AAAA records in replies,
	// one step per reply (CoreDNS's `loadbalance round_robin`); see
	// SetLoadBalance.
	LoadBalance bool
	// Observer is told about every answer; nil: nobody.
	Observer Observer
	// Tap is told about every query that gets past the protocol checks
	// and about its reply (CoreDNS's dnstap); nil: none. Restart-only.
	Tap Tap
	// ClientNamespaces tells the Observer the namespace of every client
	// that is a pod of this node (Event.Namespace, for per-namespace
	// figures): Pods is asked about every query, where otherwise only
	// names under svc.<zone> (the search path) and the slow path ask.
	ClientNamespaces bool
	// Failures rate-limits the warn line written for every SERVFAIL sent
	// (failures.go); nil: no such lines.
	Failures FailureLimiter
	// Panics counts the panics recovered while answering; shared with the
	// rest of the agent, which reports one figure. nil: a counter of the
	// pipeline's own.
	Panics *recovery.Counter
	// QueryTimeout bounds the resolution of one query; default 5s.
	QueryTimeout time.Duration
	// MaxUDPSize caps the UDP reply size whatever the client advertises;
	// default 1232 (the DNS flag day value: no fragmentation).
	MaxUDPSize int
	// AutopathMemo is how long the winning step of a walk is remembered for
	// (namespace, name), so that A and AAAA take the same path; default 30s.
	AutopathMemo time.Duration
	Logger       *slog.Logger
}

func (c *Config) defaults() error {
	if c.Resolver == nil {
		return errors.New("pipeline: no resolver")
	}
	if c.QueryTimeout <= 0 {
		c.QueryTimeout = 5 * time.Second
	}
	if c.MaxUDPSize <= 0 {
		c.MaxUDPSize = 1232
	}
	if c.MaxUDPSize < 512 {
		c.MaxUDPSize = 512
	}
	if c.AutopathMemo <= 0 {
		c.AutopathMemo = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Panics == nil {
		c.Panics = new(recovery.Counter)
	}
	return nil
}

// Pipeline answers queries; it implements pkg/query/server's Handler and is
// safe for concurrent use.
type Pipeline struct {
	cfg   Config
	log   *slog.Logger
	route *router // nil: every name goes to cfg.Resolver
	views *views  // nil: none
	// search is the search path of this node's pods: the walk, its
	// decisions and the shortcut replies (pkg/ndots; search.go).
	search *ndots.SearchPath
	// packed holds cluster and static replies in wire form (packed.go).
	packed *packedCache
	// epoch is when the pipeline was made; ages are measured from it on
	// the monotonic clock (see mono).
	epoch time.Time
	// rewriter rewrites query names first; nil: none.
	rewriter atomic.Pointer[rewriterBox]
	// plugins are the CoreDNS plugins around the stages; nil: none.
	plugins atomic.Pointer[Plugins]
	// loadBalance rotates the A and AAAA RRsets of every NOERROR reply
	// (finish); rotation counts replies for the next offset.
	loadBalance atomic.Bool
	rotation    atomic.Uint32
	loop        loopProbe
	// conf moves with every change the pipeline is told of that may
	// change what the stages answer (plugins, rewrites, the search path,
	// routes, Invalidate); with the static records' Generation it stamps
	// the search-path decisions and shortcuts (confGeneration).
	conf atomic.Uint64
}

// New validates cfg and returns the pipeline.
func New(cfg Config) (*Pipeline, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	// Its lines carry the component the operators' documentation names for
	// the request path (docs/logging.md), from before the transport and
	// the pipeline were two packages.
	p := &Pipeline{cfg: cfg, log: cfg.Logger.With("component", "server"),
		packed: newPackedCache(16384, 8<<20),
		search: ndots.New(cfg.Cluster, cfg.AutopathMemo, ndots.Settings{Autopath: cfg.Autopath, Search: cfg.Search})}
	var err error
	if cfg.Route != nil {
		r, err := newRouter(*cfg.Route)
		if err != nil {
			return nil, err
		}
		p.route = r
	}
	if p.views, err = newViews(cfg.Views, cfg.PlainZones); err != nil {
		return nil, err
	}
	p.epoch = time.Now()
	p.loop.name.Store("")
	p.SetRewriter(cfg.Rewriter)
	p.SetPlugins(cfg.Plugins)
	p.loadBalance.Store(cfg.LoadBalance)
	return p, nil
}

// Invalidate drops what the pipeline built from the stages' answers and
// cannot check against them (search-path decisions and shortcuts): the
// caller changed what some stage answers, as replacing the upstreams
// does. Queries under way finish with what they read; anything they keep
// carries the generation they started under and is not used. The packed
// replies stay: each is checked against its stage's message on every use.
func (p *Pipeline) Invalidate() {
	p.conf.Add(1)
	p.search.Purge()
}

// confGeneration moves whenever a search-path decision or shortcut built
// before may no longer hold for a reason outside the cluster zone (which
// its own generation covers): Invalidate, a setter, or a change of the
// static records (their Generation, which the pipeline is not told of:
// the hosts file is re-read by its own watcher). The sum of two counters
// that only grow moves when either does.
func (p *Pipeline) confGeneration() uint64 {
	g := p.conf.Load()
	if p.cfg.Hosts != nil {
		g += p.cfg.Hosts.Generation()
	}
	if p.cfg.Files != nil {
		g += p.cfg.Files.Generation()
	}
	return g
}

// mono returns t (a reading of time.Now) as nanoseconds since the pipeline
// was made, on the monotonic clock: a step of the wall clock moves it not.
func (p *Pipeline) mono(t time.Time) int64 { return int64(t.Sub(p.epoch)) }

type rewriterBox struct{ rw stage.Rewriter }

// SetRewriter replaces the name rewriter while the pipeline runs (nil: no
// rewriting). Queries under way finish with the old one; search-path
// decisions are made again (Invalidate).
func (p *Pipeline) SetRewriter(rw stage.Rewriter) {
	if rw == nil {
		p.rewriter.Store(nil)
	} else {
		p.rewriter.Store(&rewriterBox{rw: rw})
	}
	p.Invalidate()
}

// SetLoadBalance turns the round-robin order of A and AAAA records in
// replies on or off while the pipeline runs (CoreDNS's `loadbalance
// round_robin`). The rotation happens in finish, in wire form, on the copy
// of the reply being sent: cache hits and packed cluster answers keep
// costing no allocation (TestHotPathAllocs).
func (p *Pipeline) SetLoadBalance(on bool) { p.loadBalance.Store(on) }

// Tap logs queries and replies (pkg/observe/dnstap's Set): CLIENT_QUERY
// when a query gets past the protocol checks, CLIENT_RESPONSE when its
// reply is written, as CoreDNS's dnstap, which sits before every plugin
// that answers. It is called on the serving path (the query on the
// reader): it must never wait, and must keep neither byte slice past the
// call.
type Tap interface {
	ClientQuery(tcp bool, client netip.AddrPort, received time.Time, query []byte)
	ClientResponse(tcp bool, client netip.AddrPort, received, sent time.Time, reply []byte)
}

// Observer is told about every answered request. It must be cheap and safe
// for concurrent use; it is called on the serving path.
type Observer interface {
	Observe(ev Event)
}

// Event describes one answered request.
type Event struct {
	Source stage.Source
	Rcode  int
	Proto  string // "udp" or "tcp"
	Client netip.Addr
	// Name is the lower-case question name. It may share memory with a
	// buffer the transport reuses for the next query: copy it
	// (strings.Clone) to keep it beyond the call.
	Name     string
	Qtype    uint16
	Duration time.Duration
	// AutopathSteps is, for a search-path walk or a shortcut taken, how
	// many search-path steps the agent resolved for the client;
	// AutopathSaved how many client queries it saved.
	AutopathSteps, AutopathSaved int
	// Listener is the index in the transport's listen addresses of the
	// one the request came in on.
	Listener int
	// RequestSize and ResponseSize are the request's and the reply's
	// length in bytes (DNS message only: without TCP's length prefix).
	RequestSize, ResponseSize int
	// DO is the request's DNSSEC OK bit.
	DO bool
	// Answers is the reply's answer count (ANCOUNT) and Truncated its TC
	// bit, as sent: with Rcode they tell an answer from NODATA (NOERROR
	// without answers), as the query log classes need.
	Answers   int
	Truncated bool
	// Namespace is the client's namespace when it is a pod of this node,
	// else "" (always with Config.ClientNamespaces; without, only when the
	// search path or the slow path asked).
	Namespace string
	// Upstream is how many lookups of this answer went upstream (a cache
	// miss forwarded, joined to an identical exchange in flight, or
	// failed; the cluster DNS before the sync); a search-path walk may
	// make several.
	Upstream int
	// DNS64Translated is how many replies dns64 synthesized for this
	// answer: the reply's own and its CNAME targets' (each a request
	// CoreDNS's dns64 translates and counts, its plugins asking their
	// whole server).
	DNS64Translated int
	// Expansion: the query is a search-path expansion a pod sent: a first
	// expansion `<name>.<ns>.svc.<zone>` (of a name that does not exist as
	// asked), or an NXDOMAIN for a name under one of the pod's search
	// domains (the expansions a client walks itself).
	Expansion bool
	// For a first expansion: SearchBase is the name the pod looked up
	// (the query name less `.<ns>.svc.<zone>`; it shares Name's memory),
	// SearchList the length of its search list with the name itself,
	// SearchWinner the index in it of the step that answered (then
	// AutopathSaved), SearchList when none did (every step NXDOMAIN), -1
	// when the agent did not walk it (autopath off, a walk that could not
	// decide).
	SearchBase   string
	SearchList   int
	SearchWinner int
}
