package metrics

import (
	"cmp"
	"hash/maphash"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
)

// Per-namespace figures.
//
// Each query from a pod of this node carries its namespace (the pod
// table's string); the busiest Config.Namespaces (K) namespaces are
// counted apart, each in a fixed set of atomic counters, and the rest
// together under "other". Clients that are no pod of this node (host
// network, other nodes, a pod not seen yet) count under "_nonpod", which
// no namespace can be called (a namespace name is a DNS label).
//
// The query path finds a namespace's counters in an open-addressing table
// keyed by its name, read without a lock and replaced whole when the set
// changes; a namespace seen for the first time takes a short lock, once,
// and gets counters of its own at once while fewer than K hold some:
// counts are exact from its first query. Beyond K it is a candidate,
// counted under "other" and ranked by its own count.
//
// Which namespaces hold the K: every nsRebalance the counts of the last
// period go into a score that halves every nsHalfLife. A candidate takes
// the place of the lowest-scoring holder only when its score is more than
// twice the holder's (and at least nsMinScore) and the holder has held its
// place for nsTenure: a namespace cannot flap between its own series and
// "other" at every scrape; a place changes hands at most once per tenure.
// A holder's counters are its own series, so they only grow; when it
// leaves, its series ends (Prometheus marks it stale) and its later
// queries count under "other", which only grows too; when it comes back
// it gets new counters from zero, which rate() and increase() read as a
// counter reset. sum() over the namespace series is therefore not a
// counter: take rate() first, then sum.
//
// Memory is bounded by K: counters and detail tables for K+2 (about
// 6 KiB each when the tables are full), and a tracking entry (about 200
// bytes) for at most max(4K, 1024) namespaces; further namespaces (a node
// never runs pods of that many) count under "other".

// The labels of the namespaces that are not one.
const (
	// NamespaceOther counts the namespaces that are not among the K
	// counted apart. A namespace called "other" is always counted here.
	NamespaceOther = "other"
	// NamespaceNonPod counts clients that are no pod of this node.
	NamespaceNonPod = "_nonpod"
)

// Bounds of the namespace table.
const (
	// MaxNamespaces bounds Config.Namespaces (the --metrics-namespaces
	// setting).
	MaxNamespaces = 1000
	// DefaultNamespaces is the setting's default.
	DefaultNamespaces = 50
	// nsRebalance is how often the holders are reconsidered; nsHalfLife
	// how fast a score forgets; nsTenure how long a holder keeps its
	// place at least; nsMinScore what a candidate must have scored to
	// take one (a few queries in the last minutes); nsIdle how long a
	// candidate without queries is remembered.
	nsRebalance = 10 * time.Second
	nsHalfLife  = 5 * time.Minute
	nsTenure    = 10 * time.Minute
	nsMinScore  = 10
	nsIdle      = time.Hour
	// The detail kept per namespace: the busiest pods and the names
	// failing most (sampled, Space-Saving), and how many of each are
	// reported.
	nsPodsTracked, nsPodsShown   = 16, 5
	nsFailTracked, nsFailsShown  = 32, 10
	minTracked, trackedPerHolder = 1024, 4
)

// nsBounds are the buckets of the per-namespace latency histogram: fewer
// than the agent's own, since each is a series per namespace.
var nsBounds = [...]time.Duration{100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2500 * time.Millisecond}

// nsFigures are one namespace's counters (or other's, or _nonpod's).
type nsFigures struct {
	name  string
	since time.Time // when it got them
	// rcodes counts answers by rcode; their sum is the queries.
	rcodes   [numRcodes]atomic.Uint64
	hits     atomic.Uint64 // cache hits
	upstream atomic.Uint64 // lookups that went upstream
	// The search path: expansions the pods sent, expansions the agent's
	// walk resolved for them, and client queries the walk saved.
	expansions, walked, saved atomic.Uint64
	dur                       [len(nsBounds) + 1]atomic.Uint64
	durSum                    atomic.Uint64 // nanoseconds
	// pods are the busiest clients, failing the names answered other
	// than NOERROR (search-path expansions aside), from a sample.
	pods    *topK[netip.Addr]
	failing *topK[failKey]
}

// failKey is a failing name and its rcode (the index in rcodeNames).
type failKey struct {
	name  string
	rcode int
}

func newNSFigures(name string, now time.Time) *nsFigures {
	return &nsFigures{name: name, since: now,
		pods:    newTopK(nsPodsTracked, func(a netip.Addr) netip.Addr { return a }),
		failing: newTopK(nsFailTracked, func(k failKey) failKey { k.name = strings.Clone(k.name); return k })}
}

func (f *nsFigures) queries() uint64 {
	var n uint64
	for i := range f.rcodes {
		n += f.rcodes[i].Load()
	}
	return n
}

// observe counts ev (answered from source index si with rcode index rc).
// One in mask+1 answers of each rcode, the first included, is sampled
// into the detail tables at second sec.
func (f *nsFigures) observe(ev *pipeline.Event, si, rc int, mask uint64, sec int64) {
	n := f.rcodes[rc].Add(1)
	d := max(ev.Duration, 0)
	i := 0
	for i < len(nsBounds) && d > nsBounds[i] {
		i++
	}
	f.dur[i].Add(1)
	f.durSum.Add(uint64(d))
	if si == srcCache {
		f.hits.Add(1)
	}
	if ev.Upstream > 0 {
		f.upstream.Add(uint64(ev.Upstream))
	}
	if ev.Expansion {
		f.expansions.Add(1)
	}
	if ev.AutopathSteps > 0 || ev.AutopathSaved > 0 {
		f.walked.Add(uint64(max(ev.AutopathSteps, 0)))
		f.saved.Add(uint64(max(ev.AutopathSaved, 0)))
	}
	if (n-1)&mask == 0 {
		if ev.Client.IsValid() {
			f.pods.add(ev.Client.Unmap(), sec)
		}
		if rc != dns.RcodeSuccess && !ev.Expansion {
			f.failing.add(failKey{name: ev.Name, rcode: rc}, sec)
		}
	}
}

// quantile is the upper bound, in milliseconds, of the histogram bucket
// holding quantile q; the last bound for the overflow bucket; 0 without
// answers.
func (f *nsFigures) quantile(q float64) float64 {
	var counts [len(nsBounds) + 1]uint64
	var total uint64
	for i := range counts {
		counts[i] = f.dur[i].Load()
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank && i < len(nsBounds) {
			return float64(nsBounds[i]) / float64(time.Millisecond)
		}
	}
	return float64(nsBounds[len(nsBounds)-1]) / float64(time.Millisecond)
}

// nsSlot is one namespace in the table the query path reads: its own
// counters, or (fig nil) a candidate's count, its queries counted under
// "other".
type nsSlot struct {
	name string
	fig  *nsFigures
	seen *atomic.Uint64
}

// nsIndex is the table the query path reads: open addressing on the
// name's hash, at least twice as many slots as names. Never written after
// it is built.
type nsIndex struct {
	seed  maphash.Seed
	mask  uint64
	slots []nsSlot
}

func (x *nsIndex) get(ns string) *nsSlot {
	for i := maphash.String(x.seed, ns) & x.mask; ; i = (i + 1) & x.mask {
		s := &x.slots[i]
		if s.name == ns {
			return s
		}
		if s.name == "" {
			return nil
		}
	}
}

// nsTrack is a namespace the table knows, on the writer's side.
type nsTrack struct {
	name  string
	fig   *nsFigures     // a holder's counters; nil for a candidate
	seen  *atomic.Uint64 // a candidate's queries
	last  uint64         // its count at the last rebalance
	score float64
	held  time.Time // when it took its place
	quiet time.Time // the last rebalance that found queries
}

func (tr *nsTrack) count() uint64 {
	if tr.fig != nil {
		return tr.fig.queries()
	}
	return tr.seen.Load()
}

// nsTable is the per-namespace figures: K holders, other, _nonpod.
type nsTable struct {
	limit, maxTracked int
	now               func() time.Time
	other, nonpod     *nsFigures
	idx               atomic.Pointer[nsIndex]

	mu      sync.Mutex // the writers: admit, rebalance
	seed    maphash.Seed
	tracked map[string]*nsTrack
	holders int
	last    time.Time // the last rebalance
}

func newNSTable(limit int, now func() time.Time) *nsTable {
	t := &nsTable{limit: limit, maxTracked: max(minTracked, trackedPerHolder*limit), now: now,
		seed: maphash.MakeSeed(), tracked: map[string]*nsTrack{}}
	start := now()
	t.other, t.nonpod, t.last = newNSFigures(NamespaceOther, start), newNSFigures(NamespaceNonPod, start), start
	t.rebuild()
	return t
}

// figures returns the counters a query from namespace ns ("": no pod of
// this node) counts in. Lock-free but for a namespace's first query.
func (t *nsTable) figures(ns string) *nsFigures {
	if ns == "" {
		return t.nonpod
	}
	if s := t.idx.Load().get(ns); s != nil {
		if s.fig != nil {
			return s.fig
		}
		s.seen.Add(1)
		return t.other
	}
	return t.admit(ns)
}

// admit tracks ns, seen for the first time: its own counters while fewer
// than K namespaces hold some, else a candidate's count.
func (t *nsTable) admit(ns string) *nsFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.idx.Load().get(ns); s != nil { // admitted meanwhile
		if s.fig != nil {
			return s.fig
		}
		s.seen.Add(1)
		return t.other
	}
	if len(t.tracked) >= t.maxTracked {
		return t.other
	}
	now := t.now()
	tr := &nsTrack{name: strings.Clone(ns), quiet: now}
	if t.holders < t.limit && ns != NamespaceOther {
		tr.fig, tr.held = newNSFigures(tr.name, now), now
		t.holders++
	} else {
		tr.seen = new(atomic.Uint64)
	}
	t.tracked[tr.name] = tr
	t.rebuild()
	if tr.fig != nil {
		return tr.fig
	}
	tr.seen.Add(1)
	return t.other
}

// rebuild publishes the table of t.tracked (t.mu held, or at creation).
func (t *nsTable) rebuild() {
	n := 8
	for n < 2*len(t.tracked) {
		n <<= 1
	}
	x := &nsIndex{seed: t.seed, mask: uint64(n - 1), slots: make([]nsSlot, n)}
	for _, tr := range t.tracked {
		i := maphash.String(x.seed, tr.name) & x.mask
		for x.slots[i].name != "" {
			i = (i + 1) & x.mask
		}
		x.slots[i] = nsSlot{name: tr.name, fig: tr.fig, seen: tr.seen}
	}
	t.idx.Store(x)
}

// rebalance scores every namespace on the queries since the last call and
// hands places from holders to candidates that have earned them; it
// forgets candidates idle for nsIdle. Recorder.Run calls it every
// nsRebalance.
func (t *nsTable) rebalance() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	dt := now.Sub(t.last)
	if dt <= 0 {
		return
	}
	t.last = now
	decay := math.Exp2(-dt.Seconds() / nsHalfLife.Seconds())
	var cands, holders []*nsTrack
	changed := false
	for name, tr := range t.tracked {
		c := tr.count()
		if c > tr.last {
			tr.quiet = now
		}
		tr.score = tr.score*decay + float64(c-tr.last)
		tr.last = c
		switch {
		case tr.fig != nil:
			holders = append(holders, tr)
		case now.Sub(tr.quiet) >= nsIdle:
			delete(t.tracked, name)
			changed = true
		case name != NamespaceOther:
			cands = append(cands, tr)
		}
	}
	slices.SortFunc(cands, func(a, b *nsTrack) int { return cmp.Compare(b.score, a.score) })
	// Free places first (a holder forgotten, a larger K after a restart
	// is a new table), then the swaps.
	for len(cands) > 0 && t.holders < t.limit {
		t.promote(cands[0], now)
		cands, changed = cands[1:], true
	}
	slices.SortFunc(holders, func(a, b *nsTrack) int { return cmp.Compare(a.score, b.score) })
	for _, c := range cands {
		i := slices.IndexFunc(holders, func(h *nsTrack) bool { return now.Sub(h.held) >= nsTenure })
		if i < 0 {
			break
		}
		h := holders[i]
		if c.score < nsMinScore || c.score <= 2*h.score {
			break
		}
		t.demote(h)
		t.promote(c, now)
		holders = slices.Delete(holders, i, i+1)
		changed = true
	}
	if changed {
		t.rebuild()
	}
}

func (t *nsTable) promote(tr *nsTrack, now time.Time) {
	tr.fig, tr.seen, tr.held, tr.last = newNSFigures(tr.name, now), nil, now, 0
	t.holders++
}

func (t *nsTable) demote(tr *nsTrack) {
	tr.fig, tr.seen, tr.last = nil, new(atomic.Uint64), 0
	t.holders--
}

// holding returns the counters of the namespaces counted apart, then
// other's and _nonpod's; and how many namespaces are tracked.
func (t *nsTable) holding() ([]*nsFigures, int) {
	x := t.idx.Load()
	var out []*nsFigures
	tracked := 0
	for i := range x.slots {
		if s := &x.slots[i]; s.name != "" {
			tracked++
			if s.fig != nil {
				out = append(out, s.fig)
			}
		}
	}
	return append(out, t.other, t.nonpod), tracked
}
