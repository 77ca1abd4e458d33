package metrics

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/nodedns/nodedns/pkg/cache"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/upstream"
)

// Document is the /stats JSON document, read by `nodedns stats`. Sections
// whose source is not wired are left out (nil). Fields are only ever
// added, so an older CLI reads a newer agent.
type Document struct {
	Version       string    `json:"version"`
	Started       time.Time `json:"started"`
	Now           time.Time `json:"now"`
	UptimeSeconds float64   `json:"uptime_seconds"`

	QPS QPS `json:"qps"`
	// Total is every answer since start; Answers breaks it down by
	// source, then rcode text (only the pairs seen).
	Total   uint64                       `json:"total"`
	Answers map[string]map[string]uint64 `json:"answers"`

	Cache     *CacheStats              `json:"cache,omitempty"`
	Autopath  AutopathStats            `json:"autopath"`
	Upstreams []upstream.ServerStats   `json:"upstreams,omitempty"`
	Forwarder *upstream.ForwarderStats `json:"forwarder,omitempty"`
	Intercept *intercept.Status        `json:"intercept,omitempty"`
	Informers *k8s.Stats               `json:"informers,omitempty"`
	Peers     *PeerFigures             `json:"peers,omitempty"`
	Server    *server.Stats            `json:"server,omitempty"`
	// Supervisor: which processes serve, how the last ones ended (nil
	// when the agent runs unsupervised).
	Supervisor *SupervisorFigures `json:"supervisor,omitempty"`
	// Dnstap are the dnstap collectors' figures, one each.
	Dnstap []dnstap.Stats `json:"dnstap,omitempty"`

	// TopNames and TopClients are estimates from one answer in TopSample,
	// scaled back up, with counts halved every minute: recent loudness,
	// not totals.
	TopNames   []TopEntry `json:"top_names"`
	TopClients []TopEntry `json:"top_clients"`
	TopSample  int        `json:"top_sample"`

	// Namespaces are the per-namespace figures (namespaces.go): those
	// counted apart, busiest first, then "other" and "_nonpod"; nil when
	// they are off. NamespaceLimit is how many are counted apart at most,
	// NamespacesTracked how many namespaces of this node's pods were seen.
	Namespaces        []NamespaceStats `json:"namespaces,omitempty"`
	NamespaceLimit    int              `json:"namespace_limit,omitempty"`
	NamespacesTracked int              `json:"namespaces_tracked,omitempty"`
	// SearchPath is the search-path report (searchpath.go).
	SearchPath *SearchPathStats `json:"search_path,omitempty"`
}

// QPS are answers per second, averaged over the whole seconds of each
// window before the current one.
type QPS struct {
	Last10s float64 `json:"last_10s"`
	Last1m  float64 `json:"last_1m"`
}

// CacheStats are the cache's figures with the hit ratio worked out
// (hits / (hits + misses); 0 before any lookup).
type CacheStats struct {
	cache.Stats
	HitRatio float64 `json:"hit_ratio"`
}

// AutopathStats are the search-path walk's figures: Shortcuts are walks
// that saved the client a query, Steps the expansions resolved by the
// agent, Saved the client queries (round trips) saved.
type AutopathStats struct {
	Shortcuts uint64 `json:"shortcuts"`
	Steps     uint64 `json:"steps"`
	Saved     uint64 `json:"saved"`
}

// TopEntry is a query name or a client address with its estimated count.
type TopEntry struct {
	Key   string `json:"key"`
	Count uint64 `json:"count"`
}

// Stats returns the /stats document.
func (r *Recorder) Stats() Document {
	now, sec := r.wallNow(), r.second()
	d := Document{
		Version:       r.cfg.Version,
		Started:       r.started.Round(0),
		Now:           now.Round(0),
		UptimeSeconds: now.Sub(r.started).Seconds(),
		QPS:           QPS{Last10s: r.qps.rate(sec, r.startSec, 10), Last1m: r.qps.rate(sec, r.startSec, 60)},
		Answers:       map[string]map[string]uint64{},
		Autopath:      AutopathStats{Shortcuts: r.apShortcuts.Load(), Steps: r.apSteps.Load(), Saved: r.apSaved.Load()},
		TopSample:     r.cfg.TopSample,
	}
	for s := range numSources {
		for rc := range numRcodes {
			v := r.answers[s][rc].Load()
			if v == 0 {
				continue
			}
			m := d.Answers[sourceNames[s]]
			if m == nil {
				m = map[string]uint64{}
				d.Answers[sourceNames[s]] = m
			}
			m[rcodeNames[rc]] = v
			d.Total += v
		}
	}
	src := r.cfg.Sources
	if src.Cache != nil {
		cf := src.Cache()
		cs := CacheStats{Stats: cf}
		if n := cf.Hits + cf.Misses; n > 0 {
			cs.HitRatio = float64(cf.Hits) / float64(n)
		}
		d.Cache = &cs
	}
	if src.Upstreams != nil {
		d.Upstreams = src.Upstreams()
	}
	if src.Dnstap != nil {
		d.Dnstap = src.Dnstap()
	}
	d.Forwarder = section(src.Forwarder)
	d.Intercept = section(src.Intercept)
	d.Informers = section(src.Informers)
	d.Peers = section(src.Peers)
	d.Server = section(src.Server)
	d.Supervisor = section(src.Supervisor)
	scale := uint64(r.cfg.TopSample)
	d.TopNames = topEntries(r.names.snapshot(sec), r.cfg.TopK, scale, func(k string) string { return k })
	d.TopClients = topEntries(r.clients.snapshot(sec), r.cfg.TopK, scale, func(k netip.Addr) string { return k.String() })
	if r.ns != nil {
		d.Namespaces, d.NamespacesTracked = r.namespaceStats(sec)
		d.NamespaceLimit = r.cfg.Namespaces
	}
	d.SearchPath = r.searchPath(sec)
	return d
}

// section returns what source reports, nil when it is not wired: a section
// of the document left out.
func section[T any](source func() T) *T {
	if source == nil {
		return nil
	}
	v := source()
	return &v
}

func topEntries[K comparable](items []topItem[K], n int, scale uint64, str func(K) string) []TopEntry {
	out := make([]TopEntry, len(items))
	for i, it := range items {
		out[i] = TopEntry{Key: str(it.key), Count: it.count * scale}
	}
	slices.SortFunc(out, func(a, b TopEntry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
