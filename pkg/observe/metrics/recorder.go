package metrics

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Config configures a Recorder. Zero values take the defaults named.
type Config struct {
	// Version is reported in /stats and nodedns_build_info; Revision (the
	// VCS revision, may be empty) in coredns_build_info.
	Version, Revision string
	// Compat picks the compatibility series exported besides nodedns_*;
	// default CompatCoreDNS.
	Compat Compat
	// Listeners are the listen addresses, in the server's order
	// (pipeline.Event.Listener indexes them): CoreDNS's server label.
	Listeners []string
	// Zones are the zones queries are counted under besides "." in the
	// CoreDNS series (see SetZones).
	Zones []string
	// Plugins are the CoreDNS plugins whose work the agent does as
	// configured (coredns_plugin_enabled).
	Plugins []string
	// Sources are read at scrape time and for /stats; nil funcs leave
	// their figures out.
	Sources Sources
	// LogQueries is the fraction (0 to 1) of answered queries logged at
	// Info with component=query; 0 logs none, unless LogClasses is set,
	// which then logs every query of those classes. The sample is one in
	// round(1/LogQueries) answers of each source and rcode, so rare
	// rcodes are logged too.
	LogQueries float64
	// LogClasses restricts the query log to replies of these classes, as
	// CoreDNS's log plugin does: "success", "denial" (NXDOMAIN, and NODATA:
	// NOERROR without answers), "error" (every other rcode: SERVFAIL,
	// REFUSED, NOTIMP, FORMERR, ...), or "all". Empty: all.
	LogClasses []string
	// Logger receives the query log; default slog.Default().
	Logger *slog.Logger
	// TopK is how many entries the top name and client lists report;
	// default 10.
	TopK int
	// TopSample: one answer in TopSample (rounded up to a power of two) is
	// counted into the top lists; default 16.
	TopSample int
	// Namespaces is how many namespaces are counted apart in the
	// per-namespace figures (namespaces.go): the busiest, kept stable;
	// the rest count under "other", clients that are no pod of this node
	// under "_nonpod". 0: no per-namespace figures. At most MaxNamespaces.
	Namespaces int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Sources are the figures other packages own, read when /metrics is
// scraped or /stats is served (never on the query path). Each must be
// safe for concurrent use; a nil func leaves its figures out.
type Sources struct {
	Cache     func() cache.Stats
	Upstreams func() []upstream.ServerStats
	Server    func() server.Stats
	Intercept func() intercept.Status
	Informers func() k8s.Stats
	// Forwarder are the figures of the upstream forwarder as a whole.
	Forwarder func() upstream.ForwarderStats
	// ConfigErrors counts configuration reloads rejected since start.
	ConfigErrors func() uint64
	Peers        func() PeerFigures
	// Supervisor is the supervisor's report; nil when the agent runs
	// unsupervised.
	Supervisor func() SupervisorFigures
	// Pod names the pod of this node that owns a client address, and its
	// workload, for the reports (the busiest pods of a namespace, the
	// search-path report); read when /stats is served.
	Pod func(netip.Addr) (PodInfo, bool)
	// Search is the cluster domain and the node's search domains pods
	// inherit, for the search-path report's advice.
	Search func() (zone string, node []string)
	// Dnstap are the figures of the dnstap collectors, one each.
	Dnstap func() []dnstap.Stats
}

// PodInfo names a pod and the workload that owns it (Kind: Deployment,
// StatefulSet, DaemonSet, Job, ...; empty for a bare pod).
type PodInfo struct {
	Namespace, Name string
	Kind, Workload  string
}

// PeerFigures are the other processes found serving the agent's DNS
// addresses (pkg/intercept/peers): nodedns agents (a rolling update), foreign DNS
// servers (which keep the agent not ready), and sockets whose server could
// not be identified. Each entry describes one address and protocol.
type PeerFigures struct {
	Agents       []string  `json:"agents,omitempty"`
	Foreign      []string  `json:"foreign,omitempty"`
	Unidentified []string  `json:"unidentified,omitempty"`
	Checked      time.Time `json:"checked,omitzero"`
}

// Answer sources, as indexes into the counter arrays. srcOther catches a
// Source this package does not know (a newer server).
const (
	srcCluster = iota
	srcCache
	srcStale
	srcUpstream
	srcAutopath
	srcLocal
	srcHosts
	srcTemplate
	srcFile
	srcOther
	numSources
)

var sourceNames = [numSources]string{"cluster", "cache", "stale", "upstream", "autopath", "local", "hosts", "template", "file", "other"}

func sourceIndex(s stage.Source) int {
	switch s {
	case stage.SourceCluster:
		return srcCluster
	case stage.SourceCache:
		return srcCache
	case stage.SourceStale:
		return srcStale
	case stage.SourceUpstream:
		return srcUpstream
	case stage.SourceAutopath:
		return srcAutopath
	case stage.SourceLocal:
		return srcLocal
	case stage.SourceHosts:
		return srcHosts
	case stage.SourceTemplate:
		return srcTemplate
	case stage.SourceFile:
		return srcFile
	}
	return srcOther
}

// rcodeNames labels rcodes 0 to 23 (RFC 6895's registry; 16 is BADVERS
// in a reply without TSIG, which is all this agent sends); anything else
// is counted as OTHER.
var rcodeNames = [...]string{
	"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED",
	"YXDOMAIN", "YXRRSET", "NXRRSET", "NOTAUTH", "NOTZONE", "DSOTYPENI",
	"RCODE12", "RCODE13", "RCODE14", "RCODE15",
	"BADVERS", "BADKEY", "BADTIME", "BADMODE", "BADNAME", "BADALG", "BADTRUNC", "BADCOOKIE",
	"OTHER",
}

const numRcodes = len(rcodeNames)

func rcodeIndex(rc int) int {
	if rc < 0 || rc >= numRcodes-1 {
		return numRcodes - 1
	}
	return rc
}

// Recorder records answered queries and serves the agent's figures. It is
// safe for concurrent use; Observe is meant for the serving path.
type Recorder struct {
	cfg      Config
	clock    func() time.Time // Config.Now; nil: the monotonic clock
	coarse   atomic.Int64     // the current second while Run runs; 0: read the clock
	started  time.Time
	startSec int64
	qlog     *slog.Logger
	reg      *prometheus.Registry

	// answers counts by source and rcode; its per-cell value also drives
	// the samples (top-k and query log) without another shared counter.
	answers   [numSources][numRcodes]atomic.Uint64
	durations [numSources]durationHistogram
	qps       secondRing

	apShortcuts, apSteps, apSaved atomic.Uint64
	// dns64Translated counts dns64's synthesized replies
	// (coredns_dns64_requests_translated_total).
	dns64Translated atomic.Uint64

	topMask  uint64        // sample when count&topMask == 0
	logEvery atomic.Uint64 // log when count%logEvery == 0; 0: never (SetLogQueries)
	// logClass are the classes logged; classesSet: some were named, so
	// without a fraction every query of them is logged.
	logClass   classSet
	classesSet bool
	// qlimit bounds the query log's lines (querylog.go).
	qlimit  queryLogLimit
	names   *topK[string]
	clients *topK[netip.Addr]

	// ns are the per-namespace figures; nil when off. search samples the
	// lookups that walk a search list (searchpath.go), searchSeen counts
	// them for the sample.
	ns         *nsTable
	search     *topK[searchKey]
	searchSeen atomic.Uint64

	// compat counts for the CoreDNS series; nil with CompatNone.
	compat *compat
}

// New returns a Recorder with its own Prometheus registry (the Go and
// process collectors included).
func New(cfg Config) (*Recorder, error) {
	if cfg.LogQueries < 0 || cfg.LogQueries > 1 || math.IsNaN(cfg.LogQueries) {
		return nil, fmt.Errorf("metrics: query log fraction %g: want 0 to 1", cfg.LogQueries)
	}
	switch cfg.Compat {
	case "":
		cfg.Compat = CompatCoreDNS
	case CompatCoreDNS, CompatNone:
	default:
		return nil, fmt.Errorf("metrics: compatibility series %q: want %s or %s", cfg.Compat, CompatCoreDNS, CompatNone)
	}
	if cfg.TopK <= 0 {
		cfg.TopK = 10
	}
	if cfg.TopSample <= 0 {
		cfg.TopSample = 16
	}
	if cfg.Namespaces < 0 || cfg.Namespaces > MaxNamespaces {
		return nil, fmt.Errorf("metrics: %d namespaces counted apart: want 0 to %d", cfg.Namespaces, MaxNamespaces)
	}
	sample := 1
	for sample < cfg.TopSample && sample < 1<<20 {
		sample <<= 1
	}
	cfg.TopSample = sample
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Recorder{cfg: cfg, clock: cfg.Now, started: time.Now(), qlog: cfg.Logger.With("component", "query"),
		topMask: uint64(sample - 1)}
	if r.clock != nil {
		r.started = r.clock()
	}
	r.startSec = r.started.Unix()
	classes, err := parseLogClasses(cfg.LogClasses)
	if err != nil {
		return nil, err
	}
	r.logClass, r.classesSet = classes, len(cfg.LogClasses) > 0
	r.qlimit.seed = maphash.MakeSeed()
	r.logEvery.Store(r.every(cfg.LogQueries))
	// The tables track more entries than they report: Space-Saving's
	// estimates for the leaders sharpen as the table grows.
	tracked := min(max(64, 8*cfg.TopK), 4096)
	r.names = newTopK(tracked, strings.Clone)
	r.clients = newTopK(tracked, func(a netip.Addr) netip.Addr { return a })
	if cfg.Namespaces > 0 {
		r.ns = newNSTable(cfg.Namespaces, r.wallNow)
	}
	r.search = newTopK(searchTracked, cloneSearchKey)
	if cfg.Compat == CompatCoreDNS {
		r.compat = newCompat(cfg.Listeners, cfg.Logger)
		r.compat.setZones(cfg.Zones)
	}
	r.reg = prometheus.NewRegistry()
	if err := r.registerCollectors(); err != nil {
		return nil, err
	}
	if err := r.registerCompat(); err != nil {
		return nil, err
	}
	return r, nil
}

// Observe records one answered query. It takes no lock and allocates
// nothing, except for the sampled events (one in TopSample per source and
// rcode takes a short mutex for the top lists; one in 1/LogQueries is
// logged).
func (r *Recorder) Observe(ev pipeline.Event) {
	sec := r.coarse.Load()
	if sec == 0 {
		sec = r.second()
	}
	si, rc := sourceIndex(ev.Source), rcodeIndex(ev.Rcode)
	n := r.answers[si][rc].Add(1)
	r.durations[si].observe(ev.Duration)
	if r.compat != nil {
		r.compat.observe(&ev, si, rc)
	}
	if r.ns != nil {
		r.ns.figures(ev.Namespace).observe(&ev, si, rc, r.topMask, sec)
	}
	if ev.SearchBase != "" && (r.searchSeen.Add(1)-1)&r.topMask == 0 {
		r.search.add(searchKeyOf(&ev), sec)
	}
	r.qps.add(sec)
	if ev.DNS64Translated > 0 {
		r.dns64Translated.Add(uint64(ev.DNS64Translated))
	}
	if ev.AutopathSteps > 0 || ev.AutopathSaved > 0 {
		r.apSteps.Add(uint64(max(ev.AutopathSteps, 0)))
		r.apSaved.Add(uint64(max(ev.AutopathSaved, 0)))
		if ev.AutopathSaved > 0 {
			r.apShortcuts.Add(1)
		}
	}
	if n&r.topMask == 0 {
		r.names.add(ev.Name, sec)
		if ev.Client.IsValid() {
			r.clients.add(ev.Client.Unmap(), sec)
		}
	}
	if every := r.logEvery.Load(); every != 0 && n%every == 0 {
		if c := classOf(&ev); r.logClass&(1<<c) != 0 {
			r.logQuery(&ev, c, sec)
		}
	}
}

// SetLogQueries changes the fraction of answers logged (Config.LogQueries)
// while the Recorder runs, for a configuration reload.
func (r *Recorder) SetLogQueries(fraction float64) error {
	if fraction < 0 || fraction > 1 || math.IsNaN(fraction) {
		return fmt.Errorf("metrics: query log fraction %g: want 0 to 1", fraction)
	}
	r.logEvery.Store(r.every(fraction))
	return nil
}

// every is one in how many answers of the logged classes are logged for
// fraction: with classes named and no fraction, all of them.
func (r *Recorder) every(fraction float64) uint64 {
	if e := logEvery(fraction); e != 0 || !r.classesSet {
		return e
	}
	return 1
}

// logEvery is one in how many answers a fraction logs; 0: none.
func logEvery(fraction float64) uint64 {
	if fraction <= 0 {
		return 0
	}
	return uint64(math.Max(1, math.Round(1/fraction)))
}

// coarseTick is how often Run refreshes the coarse clock: an answer may be
// counted in the second before its own for that long after the turn.
const coarseTick = 50 * time.Millisecond

// Run keeps a coarse clock for Observe until ctx is done, so that the
// serving path loads an atomic instead of reading the system clock (on
// some virtual machines the dearest part of Observe), and reconsiders
// every nsRebalance which namespaces are counted apart. Without it, or
// once it returns, Observe reads the clock itself and the namespaces that
// hold their places keep them. Call it once, in its own goroutine.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	defer r.coarse.Store(0)
	var rebalance <-chan time.Time
	if r.ns != nil {
		rt := time.NewTicker(nsRebalance)
		defer rt.Stop()
		rebalance = rt.C
	}
	last := r.second()
	for {
		sec := r.second()
		r.coarse.Store(sec)
		if sec != last {
			// A new second: the query log lines held back in the last
			// are reported now, not only on the next line written.
			r.flushQueryLog()
			last = sec
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rebalance:
			r.ns.rebalance()
		}
	}
}

// second is the current Unix second. Without an injected clock it is
// counted on the monotonic clock from start: reading only that costs about
// half of time.Now, and a wall-clock step cannot scramble the buckets.
func (r *Recorder) second() int64 {
	if r.clock != nil {
		return r.clock().Unix()
	}
	return r.startSec + int64(time.Since(r.started)/time.Second)
}

// wallNow is the time the document reports.
func (r *Recorder) wallNow() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// replyClass is the class of a reply, as CoreDNS's log plugin has them
// (plugin/pkg/response: Classify of Typify).
type replyClass int

const (
	classSuccess replyClass = iota
	classDenial
	classError
	numClasses
)

var classNames = [numClasses]string{"success", "denial", "error"}

// classSet is a set of replyClass bits.
type classSet uint8

const allClasses classSet = 1<<numClasses - 1

// classOf classifies the reply an event reports: NXDOMAIN and NODATA
// (NOERROR without answers, not truncated) are denials; other NOERROR
// replies successes; every other rcode an error.
//
// Where this differs from CoreDNS: CoreDNS calls NOERROR without answers
// NODATA only when the authority section holds an SOA (else a success:
// a referral or an empty answer), and an NXDOMAIN that carries answers (a
// CNAME to a name that does not exist) an error. The event does not carry
// the authority section, and a CNAME chain ending in a missing name is a
// denial to the client that asked, so both are denials here.
func classOf(ev *pipeline.Event) replyClass {
	switch ev.Rcode {
	case dns.RcodeSuccess:
		if ev.Answers == 0 && !ev.Truncated {
			return classDenial
		}
		return classSuccess
	case dns.RcodeNameError:
		return classDenial
	}
	return classError
}

// CheckLogClasses returns an error naming the first of names that is not
// a query log class (all, success, denial, error).
func CheckLogClasses(names []string) error {
	_, err := parseLogClasses(names)
	return err
}

// parseLogClasses reads a list of query log classes; empty means all.
func parseLogClasses(names []string) (classSet, error) {
	if len(names) == 0 {
		return allClasses, nil
	}
	var set classSet
	for _, n := range names {
		switch n {
		case "all":
			set |= allClasses
		case "success":
			set |= 1 << classSuccess
		case "denial":
			set |= 1 << classDenial
		case "error":
			set |= 1 << classError
		default:
			return 0, fmt.Errorf("query log class %q: want all, success, denial or error", n)
		}
	}
	return set, nil
}

func typeName(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// rcodeName is the text of rc as the query log prints it (numbers past the
// labelled range keep their value there, unlike the OTHER metric label).
func rcodeName(rc int) string {
	if i := rcodeIndex(rc); i != numRcodes-1 {
		return rcodeNames[i]
	}
	return "RCODE" + strconv.Itoa(rc)
}
