package metrics

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
)

// The search-path report: which pods of this node look names up through
// their search list (a name with fewer dots than ndots, 5 in Kubernetes,
// is tried under every search domain before itself), what they asked, and
// what each lookup costs with and without the agent's walk, and with the
// name written as its FQDN, so that an operator can fix the workload
// instead of relying on the agent. A sample of the first expansions pods
// send (one in TopSample) goes into a Space-Saving table of searchTracked
// entries, counts halved every minute: bounded memory, recent estimates.

// searchTracked bounds the lookups the report tracks.
const searchTracked = 256

// searchKey is one name a pod looked up, of one type, and where its walk
// ended (Event.SearchWinner: the step, list when nowhere, -1 when the
// agent did not walk it).
type searchKey struct {
	client    netip.Addr
	ns, base  string
	qtype     uint16
	list, won int16
}

func searchKeyOf(ev *pipeline.Event) searchKey {
	return searchKey{client: ev.Client.Unmap(), ns: ev.Namespace, base: ev.SearchBase, qtype: ev.Qtype,
		list: int16(min(ev.SearchList, 1<<14)), won: int16(min(ev.SearchWinner, 1<<14))}
}

func cloneSearchKey(k searchKey) searchKey {
	k.ns, k.base = strings.Clone(k.ns), strings.Clone(k.base)
	return k
}

// SearchPathStats is the search-path report in /stats.
type SearchPathStats struct {
	// Zone is the cluster domain and Node the node's search domains: a
	// pod's search list is `<ns>.svc.<zone>`, `svc.<zone>`, `<zone>`, the
	// node's domains, then the name itself.
	Zone string   `json:"zone,omitempty"`
	Node []string `json:"node_domains,omitempty"`
	// Sample: one first expansion in Sample is counted; counts are scaled
	// back up and halved every minute.
	Sample    int              `json:"sample"`
	Workloads []SearchWorkload `json:"workloads"`
}

// SearchWorkload is a workload (or a bare pod) of this node whose pods
// walk their search list, and the names they do it for, busiest first.
type SearchWorkload struct {
	Namespace string `json:"namespace"`
	// Kind and Name are the workload's (Deployment, StatefulSet,
	// DaemonSet, Job, ...); Kind "Pod" for a bare pod; Kind "" when the
	// pod is gone (Name is then its address).
	Kind    string         `json:"kind"`
	Name    string         `json:"name"`
	Pods    []string       `json:"pods"`
	Lookups []SearchLookup `json:"lookups"`
	// Ndots is a dnsConfig ndots under which the names found as they
	// are (outside the cluster) are tried as they are first, while those
	// found under a search domain still walk: 0 when no value does that.
	Ndots int `json:"ndots,omitempty"`
}

// SearchLookup is one name a workload's pods look up through the search
// list.
type SearchLookup struct {
	// Name is the name as the pod wrote it; Types the query types asked.
	Name  string   `json:"name"`
	Types []string `json:"types"`
	// Lookups is the recent, estimated count (the busiest type's).
	Lookups uint64 `json:"lookups"`
	// Step is the index in the search list (List long, the name itself
	// last) of what answered; List when nothing did; -1 when the agent
	// did not walk it (autopath off). Answer is that name, the FQDN to
	// write instead: "" when nothing answered or it is not known.
	Step   int    `json:"step"`
	List   int    `json:"list"`
	Answer string `json:"answer,omitempty"`
	// Client queries per lookup, every type: what glibc and musl send
	// without the agent's walk (0: not known), what they send with it,
	// and what they send for the name written as its FQDN (a trailing
	// dot).
	WithoutWalk int `json:"queries_without_walk"`
	WithWalk    int `json:"queries_with_walk"`
	AsFQDN      int `json:"queries_as_fqdn"`
}

// searchPath builds the report from the sample at second sec.
func (r *Recorder) searchPath(sec int64) *SearchPathStats {
	items := r.search.snapshot(sec)
	sp := &SearchPathStats{Sample: r.cfg.TopSample, Workloads: []SearchWorkload{}}
	var zone string
	if src := r.cfg.Sources.Search; src != nil {
		zone, sp.Node = src()
		sp.Zone = zone
	}
	type wkey struct{ ns, kind, name string }
	type lkey struct {
		w    wkey
		base string
	}
	works := map[wkey]*SearchWorkload{}
	looks := map[lkey]*SearchLookup{}
	perType := map[lkey]map[uint16]uint64{}
	scale := uint64(r.cfg.TopSample)
	for _, it := range items {
		k := it.key
		w := wkey{ns: k.ns, name: k.client.String()}
		pod := ""
		if r.cfg.Sources.Pod != nil {
			if p, ok := r.cfg.Sources.Pod(k.client); ok {
				pod, w.ns = p.Name, p.Namespace
				w.kind, w.name = p.Kind, p.Workload
				if w.kind == "" {
					w.kind, w.name = "Pod", p.Name
				}
			}
		}
		wl := works[w]
		if wl == nil {
			wl = &SearchWorkload{Namespace: w.ns, Kind: w.kind, Name: w.name}
			works[w] = wl
		}
		if pod != "" && !slices.Contains(wl.Pods, pod) {
			wl.Pods = append(wl.Pods, pod)
		}
		lk := lkey{w, k.base}
		l := looks[lk]
		if l == nil {
			l = &SearchLookup{Name: k.base, Step: int(k.won), List: int(k.list)}
			looks[lk] = l
			perType[lk] = map[uint16]uint64{}
		}
		perType[lk][k.qtype] += it.count * scale
		if int(k.won) > l.Step {
			l.Step = int(k.won) // a walk that decided tells more than one that did not
		}
	}
	for lk, l := range looks {
		var types []uint16
		for t, n := range perType[lk] {
			types = append(types, t)
			l.Lookups = max(l.Lookups, n)
		}
		slices.Sort(types)
		for _, t := range types {
			l.Types = append(l.Types, typeName(t))
		}
		l.cost(len(types), lk.w.ns, zone, sp.Node)
		works[lk.w].Lookups = append(works[lk.w].Lookups, *l)
	}
	for _, wl := range works {
		slices.SortFunc(wl.Lookups, func(a, b SearchLookup) int {
			if c := cmp.Compare(b.Lookups, a.Lookups); c != 0 {
				return c
			}
			return cmp.Compare(a.Name, b.Name)
		})
		slices.Sort(wl.Pods)
		wl.Ndots = ndotsAdvice(wl.Lookups)
		sp.Workloads = append(sp.Workloads, *wl)
	}
	slices.SortFunc(sp.Workloads, func(a, b SearchWorkload) int {
		if c := cmp.Compare(b.total(), a.total()); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return sp
}

func (w *SearchWorkload) total() uint64 {
	var n uint64
	for _, l := range w.Lookups {
		n += l.Lookups
	}
	return n
}

// cost fills in what a lookup of types query types costs the client, and
// the name that answered (ns: the pod's namespace; zone and node: the
// search list after it, "" when not known).
func (l *SearchLookup) cost(types int, ns, zone string, node []string) {
	l.AsFQDN = types
	switch {
	case l.Step < 0:
		l.WithoutWalk, l.WithWalk = 0, 0
	case l.Step >= l.List:
		// Nothing answered: the client walks the whole list whether the
		// agent walked it first or not.
		l.WithoutWalk, l.WithWalk = l.List*types, l.List*types
	default:
		l.WithoutWalk, l.WithWalk = (l.Step+1)*types, types
	}
	if l.Step < 0 || l.Step >= l.List || zone == "" {
		return
	}
	domains := append([]string{ns + ".svc." + zone, "svc." + zone, zone}, node...)
	switch {
	case l.Step == l.List-1:
		l.Answer = l.Name + "."
	case l.Step < len(domains) && l.Step < l.List-1:
		l.Answer = l.Name + "." + domains[l.Step]
	}
}

// ndotsAdvice is the largest ndots below Kubernetes' 5 under which every
// name the workload found as it is (its walk's last step) has at least as
// many dots, so it is tried first as it is, while every name found under a
// search domain has fewer, so it still walks; 0 when there is none.
func ndotsAdvice(ls []SearchLookup) int {
	lo, hi, outside := 1, 0, false
	for _, l := range ls {
		switch d := dns.CountLabel(l.Name+".") - 1; {
		case l.Step < 0 || l.Step >= l.List:
		case l.Step == l.List-1:
			if !outside || d < hi {
				hi = d
			}
			outside = true
		default:
			lo = max(lo, d+1)
		}
	}
	if !outside || lo > hi {
		return 0
	}
	return min(hi, 4)
}
