package metrics

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// NamespaceStats are one namespace's figures in /stats (or other's, or
// _nonpod's), counted since Since.
type NamespaceStats struct {
	Namespace string    `json:"namespace"`
	Since     time.Time `json:"since"`
	Queries   uint64    `json:"queries"`
	// Responses are the answers by rcode text (only those seen).
	Responses map[string]uint64 `json:"responses"`
	CacheHits uint64            `json:"cache_hits"`
	// Upstream are the lookups that went upstream (a walk may make
	// several for one query).
	Upstream uint64 `json:"upstream"`
	// P50ms and P99ms are read from the histogram's buckets (the upper
	// bound of the bucket holding them).
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// The search path: expansions the pods sent, expansions the agent's
	// walk resolved for them, client queries the walk saved.
	SearchExpansions uint64 `json:"search_expansions"`
	SearchWalkSteps  uint64 `json:"search_walk_steps"`
	SearchSaved      uint64 `json:"search_queries_saved"`
	// Pods are the busiest clients and Failing the names answered other
	// than NOERROR most (search-path expansions aside): recent, estimated
	// from a sample of one answer in TopSample of each rcode.
	Pods    []NamespacePod `json:"pods,omitempty"`
	Failing []FailingName  `json:"failing,omitempty"`
}

// NamespacePod is a busy client of a namespace: its pod (and workload)
// when it is still a pod of this node, else its address alone.
type NamespacePod struct {
	Addr     string `json:"addr"`
	Pod      string `json:"pod,omitempty"`
	Workload string `json:"workload,omitempty"` // "Deployment/web"
	Count    uint64 `json:"count"`
}

// FailingName is a name a namespace's pods were answered other than
// NOERROR for.
type FailingName struct {
	Name  string `json:"name"`
	Rcode string `json:"rcode"`
	Count uint64 `json:"count"`
}

// namespaceStats are the figures of every namespace counted apart,
// busiest first, then other's and _nonpod's; and how many namespaces are
// tracked.
func (r *Recorder) namespaceStats(sec int64) ([]NamespaceStats, int) {
	figs, tracked := r.ns.holding()
	scale := uint64(r.cfg.TopSample)
	out := make([]NamespaceStats, 0, len(figs))
	for _, f := range figs {
		s := NamespaceStats{Namespace: f.name, Since: f.since.Round(0), Responses: map[string]uint64{},
			CacheHits: f.hits.Load(), Upstream: f.upstream.Load(), P50ms: f.quantile(0.5), P99ms: f.quantile(0.99),
			SearchExpansions: f.expansions.Load(), SearchWalkSteps: f.walked.Load(), SearchSaved: f.saved.Load()}
		for rc := range f.rcodes {
			if v := f.rcodes[rc].Load(); v > 0 {
				s.Responses[rcodeNames[rc]] = v
				s.Queries += v
			}
		}
		for _, it := range topItems(f.pods.snapshot(sec), nsPodsShown, func(a netip.Addr) string { return a.String() }) {
			p := NamespacePod{Addr: it.key.String(), Count: it.count * scale}
			if r.cfg.Sources.Pod != nil {
				if pi, ok := r.cfg.Sources.Pod(it.key); ok {
					p.Pod = pi.Name
					if pi.Kind != "" {
						p.Workload = pi.Kind + "/" + pi.Workload
					}
				}
			}
			s.Pods = append(s.Pods, p)
		}
		for _, it := range topItems(f.failing.snapshot(sec), nsFailsShown, func(k failKey) string { return k.name }) {
			s.Failing = append(s.Failing, FailingName{Name: it.key.name, Rcode: rcodeNames[it.key.rcode], Count: it.count * scale})
		}
		out = append(out, s)
	}
	// The namespaces counted apart by queries; other and _nonpod stay
	// last (holding puts them there).
	n := len(out) - 2
	slices.SortStableFunc(out[:n], func(a, b NamespaceStats) int {
		if c := cmp.Compare(b.Queries, a.Queries); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
	return out, tracked
}

// topItems sorts items by count (then key) and keeps n.
func topItems[K comparable](items []topItem[K], n int, str func(K) string) []topItem[K] {
	slices.SortFunc(items, func(a, b topItem[K]) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return cmp.Compare(str(a.key), str(b.key))
	})
	return items[:min(n, len(items))]
}

// nsDescs are the per-namespace series.
type nsDescs struct {
	queries, responses, hits, upstream, duration *prometheus.Desc
	expansions, walked, saved                    *prometheus.Desc
	tracked, limit                               *prometheus.Desc
}

func newNSDescs(d func(name, help string, labels ...string) *prometheus.Desc) nsDescs {
	return nsDescs{
		queries:    d("namespace_queries_total", "Answered queries by the client's namespace: the busiest namespaces of this node's pods, the rest as other, clients that are no pod of this node as _nonpod.", "namespace"),
		responses:  d("namespace_responses_total", "Answers by the client's namespace and response code.", "namespace", "rcode"),
		hits:       d("namespace_cache_hits_total", "Answers from the cache by the client's namespace.", "namespace"),
		upstream:   d("namespace_upstream_requests_total", "Lookups that went upstream (a search-path walk may make several) by the client's namespace.", "namespace"),
		duration:   d("namespace_request_duration_seconds", "Time from reading a query to answering it, by the client's namespace.", "namespace"),
		expansions: d("namespace_search_expansions_total", "Search-path expansions the namespace's pods sent (first expansions, and NXDOMAIN under their search domains).", "namespace"),
		walked:     d("namespace_search_walk_steps_total", "Search-path expansions the agent resolved on behalf of the namespace's pods.", "namespace"),
		saved:      d("namespace_search_queries_saved_total", "Client queries the agent's search-path walk saved the namespace's pods.", "namespace"),
		tracked:    d("namespace_tracked", "Namespaces of this node's pods the agent has seen (counted apart or under other)."),
		limit:      d("namespace_limit", "How many namespaces are counted apart (--metrics-namespaces)."),
	}
}

func (n nsDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{n.queries, n.responses, n.hits, n.upstream, n.duration, n.expansions, n.walked, n.saved, n.tracked, n.limit}
}

// collect exports the per-namespace series: only the namespaces counted
// apart now, other and _nonpod (from the start), and the rcodes seen
// besides NOERROR, SERVFAIL and NXDOMAIN (always).
func (n nsDescs) collect(t *nsTable, ch chan<- prometheus.Metric) {
	figs, tracked := t.holding()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, f := range figs {
		counter(n.queries, f.queries(), f.name)
		for rc := range f.rcodes {
			// NOERROR, SERVFAIL and NXDOMAIN from the start: the
			// dashboard's ratios and the alerts divide by them.
			if v := f.rcodes[rc].Load(); v > 0 || rc == dns.RcodeSuccess || rc == dns.RcodeServerFailure || rc == dns.RcodeNameError {
				counter(n.responses, v, f.name, rcodeNames[rc])
			}
		}
		counter(n.hits, f.hits.Load(), f.name)
		counter(n.upstream, f.upstream.Load(), f.name)
		counter(n.expansions, f.expansions.Load(), f.name)
		counter(n.walked, f.walked.Load(), f.name)
		counter(n.saved, f.saved.Load(), f.name)
		buckets := make(map[float64]uint64, len(nsBounds))
		var count uint64
		for i, b := range nsBounds {
			count += f.dur[i].Load()
			buckets[b.Seconds()] = count
		}
		count += f.dur[len(nsBounds)].Load()
		ch <- prometheus.MustNewConstHistogram(n.duration, count, float64(f.durSum.Load())/1e9, buckets, f.name)
	}
	ch <- prometheus.MustNewConstMetric(n.tracked, prometheus.GaugeValue, float64(tracked))
	ch <- prometheus.MustNewConstMetric(n.limit, prometheus.GaugeValue, float64(t.limit))
}

// nsShown is how many namespaces the stats report lists besides other and
// _nonpod.
const nsShown = 10

// renderNamespaces writes the Namespaces section of the report.
func renderNamespaces(r report, d *Document) {
	if d.Namespaces == nil {
		return // off, or an older agent
	}
	apart := max(len(d.Namespaces)-2, 0)
	r.line("Namespaces", "%d seen, %d counted apart (limit %d), the rest as %s; clients that are no pod of this node as %s",
		d.NamespacesTracked, apart, d.NamespaceLimit, NamespaceOther, NamespaceNonPod)
	rows := [][]string{{"", "NAMESPACE", "QUERIES", "NOERROR", "NXDOMAIN", "SERVFAIL", "OTHER", "HIT%", "UPSTREAM", "P50", "P99", "EXPANSIONS", "SAVED"}}
	shown := 0
	for _, s := range d.Namespaces {
		if s.Namespace != NamespaceOther && s.Namespace != NamespaceNonPod {
			if shown == nsShown {
				continue
			}
			shown++
		}
		rows = append(rows, namespaceRow(s))
	}
	r.table(rows)
	if apart > nsShown {
		r.line("", "%d more: nodedns stats --json, or --namespace NS for one", apart-nsShown)
	}
}

func namespaceRow(s NamespaceStats) []string {
	var rest uint64
	for rc, v := range s.Responses {
		if rc != "NOERROR" && rc != "NXDOMAIN" && rc != "SERVFAIL" {
			rest += v
		}
	}
	hit := "-"
	if s.Queries > 0 {
		hit = fmt.Sprintf("%.0f%%", 100*float64(s.CacheHits)/float64(s.Queries))
	}
	return []string{"", Printable(s.Namespace), fmt.Sprint(s.Queries), fmt.Sprint(s.Responses["NOERROR"]),
		fmt.Sprint(s.Responses["NXDOMAIN"]), fmt.Sprint(s.Responses["SERVFAIL"]), fmt.Sprint(rest), hit,
		fmt.Sprint(s.Upstream), fmtMs(s.P50ms), fmtMs(s.P99ms), fmt.Sprint(s.SearchExpansions), fmt.Sprint(s.SearchSaved)}
}

// Namespace returns the figures of namespace ns ("other" and "_nonpod"
// too), or an error saying why the document has none.
func (d *Document) Namespace(ns string) (*NamespaceStats, error) {
	if d.Namespaces == nil {
		return nil, errors.New("no per-namespace figures: the agent runs with --metrics-namespaces 0 (or predates them)")
	}
	names := make([]string, 0, len(d.Namespaces))
	for i := range d.Namespaces {
		if d.Namespaces[i].Namespace == ns {
			return &d.Namespaces[i], nil
		}
		names = append(names, Printable(d.Namespaces[i].Namespace))
	}
	return nil, fmt.Errorf("namespace %q is not counted apart: no pod of this node asked from it, or it counts under %q (at most %d namespaces are counted apart); the agent has: %s",
		Printable(ns), NamespaceOther, d.NamespaceLimit, strings.Join(names, " "))
}

// NamespaceReport writes the report of one namespace, s (`nodedns stats
// --namespace NS`): its figures, its busiest pods and its most-failing
// names.
func (d *Document) NamespaceReport(w io.Writer, s *NamespaceStats) {
	r := report{w}
	r.line("Namespace", "%s, counted since %s", Printable(s.Namespace), s.Since.UTC().Format("2006-01-02 15:04:05 UTC"))
	r.table([][]string{
		{"", "QUERIES", "NOERROR", "NXDOMAIN", "SERVFAIL", "OTHER", "HIT%", "UPSTREAM", "P50", "P99", "EXPANSIONS", "SAVED"},
		namespaceRow(*s)[1:],
	})
	rcodes := make([]string, 0, len(s.Responses))
	for rc := range s.Responses {
		rcodes = append(rcodes, rc)
	}
	slices.Sort(rcodes)
	parts := make([]string, len(rcodes))
	for i, rc := range rcodes {
		parts[i] = fmt.Sprintf("%s %d", Printable(rc), s.Responses[rc])
	}
	r.line("Answers", "%s", orNone(strings.Join(parts, ", ")))
	r.line("Search path", "%d expansions sent by the pods, %d resolved by the agent's walk, %d client queries saved",
		s.SearchExpansions, s.SearchWalkSteps, s.SearchSaved)
	r.blank()
	sample := ""
	if d.TopSample > 1 {
		sample = fmt.Sprintf(", sampled 1 in %d", d.TopSample)
	}
	r.line("Busiest pods", "recent, estimated%s", sample)
	if len(s.Pods) == 0 {
		r.line("", "none yet")
	} else {
		rows := make([][]string, len(s.Pods))
		for i, p := range s.Pods {
			rows[i] = []string{"", fmt.Sprint(p.Count), Printable(orDash(p.Pod)), Printable(orDash(p.Workload)), p.Addr}
		}
		r.table(rows)
	}
	r.line("Failing names", "answered other than NOERROR, search-path expansions aside")
	if len(s.Failing) == 0 {
		r.line("", "none yet")
	} else {
		rows := make([][]string, len(s.Failing))
		for i, f := range s.Failing {
			rows[i] = []string{"", fmt.Sprint(f.Count), Printable(f.Rcode), Printable(f.Name)}
		}
		r.table(rows)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// SearchPathReport writes the search-path report (`nodedns stats
// --search-path`): the workloads whose pods walk their search list, the
// names, what each lookup costs, and what would fix it.
func (d *Document) SearchPathReport(w io.Writer) {
	r := report{w}
	sp := d.SearchPath
	if sp == nil {
		r.line("Search path", "not reported (an agent without the report)")
		return
	}
	list := "<namespace>.svc.<zone> svc.<zone> <zone>"
	if sp.Zone != "" {
		z := strings.TrimSuffix(sp.Zone, ".")
		list = "<namespace>.svc." + z + " svc." + z + " " + z
	}
	for _, n := range sp.Node {
		list += " " + strings.TrimSuffix(n, ".")
	}
	sample := ""
	if sp.Sample > 1 {
		sample = fmt.Sprintf(", sampled 1 in %d", sp.Sample)
	}
	r.line("Search path", "lookups this node's pods send through their search list (recent, estimated%s)", sample)
	r.line("", "search list: %s, then the name itself", Printable(list))
	if len(sp.Workloads) == 0 {
		r.line("", "none yet")
		return
	}
	for _, wl := range sp.Workloads {
		r.blank()
		what := Printable(wl.Kind + " " + wl.Name)
		if wl.Kind == "" {
			what = "client " + Printable(wl.Name) + " (no pod of this node now)"
		}
		pods := podList(wl.Pods)
		if wl.Kind == "Pod" {
			pods = ""
		}
		r.line(Printable(wl.Namespace), "%s%s", what, pods)
		rows := [][]string{{"", "NAME", "TYPES", "LOOKUPS", "ANSWERED BY", "QUERIES/LOOKUP", "WITHOUT WALK", "AS FQDN"}}
		fqdn := 0
		for _, l := range wl.Lookups {
			by := "-"
			switch {
			case l.Answer != "":
				by = l.Answer
				fqdn++
			case l.Step >= 0 && l.Step >= l.List:
				by = "nothing (NXDOMAIN)"
			case l.Step < 0:
				by = "not walked by the agent"
			}
			without := "?"
			if l.WithoutWalk > 0 {
				without = fmt.Sprint(l.WithoutWalk)
			}
			with := without
			if l.WithWalk > 0 {
				with = fmt.Sprint(l.WithWalk)
			}
			rows = append(rows, []string{"", Printable(l.Name), strings.Join(l.Types, ","), fmt.Sprint(l.Lookups), Printable(by),
				with, without, fmt.Sprint(l.AsFQDN)})
		}
		r.table(rows)
		if fqdn > 0 {
			r.line("", "fix: write each name as the FQDN that answered, with its trailing dot")
		}
		if wl.Ndots > 0 {
			r.line("", "or: dnsConfig.options ndots:%d (the names found as they are go straight; those found in the cluster still walk)", wl.Ndots)
		}
	}
}

func podList(pods []string) string {
	if len(pods) == 0 {
		return ""
	}
	const most = 3
	p := make([]string, 0, most)
	for _, n := range pods[:min(len(pods), most)] {
		p = append(p, Printable(n))
	}
	s := " (pods " + strings.Join(p, ", ")
	if len(pods) > most {
		s += fmt.Sprintf(" and %d more", len(pods)-most)
	}
	return s + ")"
}
