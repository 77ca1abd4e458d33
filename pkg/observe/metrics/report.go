package metrics

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
)

// sourceOrder is how answer sources are listed: cluster first, then the
// external path from cheapest to dearest, then the agent's own.
var sourceOrder = []string{"cluster", "autopath", "cache", "stale", "upstream", "local"}

// labelWidth is the width of the section labels on the left of the report.
const labelWidth = 14

// report writes the sections of the stats report: a label column of fixed
// width, free text, and tables aligned by a tabwriter of their own.
type report struct{ w io.Writer }

func (r report) line(label, format string, a ...any) {
	l := fmt.Sprintf("%-*s%s", labelWidth, label, fmt.Sprintf(format, a...))
	fmt.Fprintln(r.w, strings.TrimRight(l, " "))
}

func (r report) blank() { fmt.Fprintln(r.w) }

// table writes rows aligned; the first cell of each row is the label
// column.
func (r report) table(rows [][]string) {
	tw := tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintf(tw, "%-*s", labelWidth-2, row[0])
		for _, c := range row[1:] {
			fmt.Fprintf(tw, "\t%s", c)
		}
		fmt.Fprint(tw, "\n")
	}
	_ = tw.Flush()
}

// Report writes the readable report of d, as `nodedns stats` prints it: a
// label column, free text, and tables aligned by a tabwriter of their own.
// Every text that came from the network (names, errors) is escaped with
// Printable.
func (d *Document) Report(w io.Writer) {
	r := report{w}
	fmt.Fprintf(w, "nodedns %s, up %s (since %s)\n\n", Printable(d.Version), fmtSeconds(d.UptimeSeconds),
		d.Started.UTC().Format("2006-01-02 15:04:05 UTC"))

	r.line("Queries", "%s/s last 10s, %s/s last 1m, %d answered since start", fmtRate(d.QPS.Last10s), fmtRate(d.QPS.Last1m), d.Total)
	r.blank()
	renderAnswers(r, d.Answers)
	r.blank()

	if c := d.Cache; c != nil {
		r.line("Cache", "%d of %d entries, hit ratio %.1f%% (%d hits, %d misses)", c.Entries, c.Capacity, 100*c.HitRatio, c.Hits, c.Misses)
		r.line("", "%d evictions, %d stale answers served, %d prefetches", c.Evictions, c.StaleServed, c.Prefetches)
	} else {
		r.line("Cache", "not reported")
	}
	r.line("Autopath", "%d shortcuts, %d upstream round trips saved (%d search-path steps walked by the agent)",
		d.Autopath.Shortcuts, d.Autopath.Saved, d.Autopath.Steps)
	if s := d.Server; s != nil {
		r.line("Server", "%d in flight, %d TCP connections, %d overloaded, %d panics", s.InFlight, s.TCPConns, s.Overloaded, s.Panics)
		readers := fmt.Sprintf("%d of %d UDP readers live (%d holding a P), %d restarts", s.UDPReadersLive, s.UDPReaders, s.UDPReadersHoldingP, s.UDPReaderRestarts)
		if s.UDPReadersLive < s.UDPReaders {
			readers += " [DOWN: see the agent's log]"
		}
		r.line("", "%s", readers)
	}
	r.blank()

	if len(d.Upstreams) == 0 {
		r.line("Upstreams", "none reported")
	} else {
		rows := [][]string{{"Upstreams", "ADDRESS", "STATE", "P50", "P99", "REQUESTS", "FAILURES", "LAST ERROR"}}
		for _, u := range d.Upstreams {
			state := "up"
			if !u.Up {
				state = "DOWN"
			}
			lastErr := Printable(u.LastError)
			if lastErr == "" {
				lastErr = "-"
			}
			rows = append(rows, []string{"", Printable(u.Addr), state, fmtMs(u.P50ms), fmtMs(u.P99ms),
				fmt.Sprint(u.Requests), fmt.Sprint(u.Failures), lastErr})
		}
		r.table(rows)
	}
	r.blank()

	renderIntercept(r, d)
	renderPeers(r, d.Peers)
	renderSupervisor(r, d.Supervisor, d.Now)
	renderDnstap(r, d.Dnstap)
	renderInformers(r, d.Informers)
	r.blank()

	if d.Namespaces != nil {
		renderNamespaces(r, d)
		r.blank()
	}

	sample := ""
	if d.TopSample > 1 {
		sample = fmt.Sprintf(", sampled 1 in %d", d.TopSample)
	}
	r.line("Top names", "recent, estimated%s", sample)
	topList(r, d.TopNames)
	r.line("Top clients", "")
	topList(r, d.TopClients)
}

// renderAnswers writes the table of answers by source and rcode, the usual
// rcodes first, only those seen.
func renderAnswers(r report, answers map[string]map[string]uint64) {
	if len(answers) == 0 {
		r.line("Answers", "none yet")
		return
	}
	rcodes := map[string]bool{}
	sources := make([]string, 0, len(answers))
	for s, m := range answers {
		sources = append(sources, s)
		for rc := range m {
			rcodes[rc] = true
		}
	}
	rank := func(s string) int {
		if i := slices.Index(sourceOrder, s); i >= 0 {
			return i
		}
		return len(sourceOrder)
	}
	sort.Slice(sources, func(i, j int) bool {
		if ri, rj := rank(sources[i]), rank(sources[j]); ri != rj {
			return ri < rj
		}
		return sources[i] < sources[j]
	})
	var cols []string
	for _, rc := range []string{"NOERROR", "NXDOMAIN", "SERVFAIL"} {
		if rcodes[rc] {
			cols = append(cols, rc)
			delete(rcodes, rc)
		}
	}
	rest := make([]string, 0, len(rcodes))
	for rc := range rcodes {
		rest = append(rest, rc)
	}
	sort.Strings(rest)
	cols = append(cols, rest...)

	header := []string{"Answers"}
	for _, rc := range cols {
		header = append(header, Printable(rc))
	}
	rows := [][]string{append(header, "total")}
	for _, s := range sources {
		row := []string{"  " + Printable(s)}
		var total uint64
		for _, rc := range cols {
			v := answers[s][rc]
			total += v
			row = append(row, fmt.Sprint(v))
		}
		rows = append(rows, append(row, fmt.Sprint(total)))
	}
	r.table(rows)
}

func renderIntercept(r report, d *Document) {
	ic := d.Intercept
	switch {
	case ic == nil:
		r.line("Interception", "not reported")
		return
	case !ic.Enabled:
		r.line("Interception", "off (the agent manages no link and no rules)")
		return
	}
	link := Printable(ic.Link)
	if link == "" {
		link = "none"
	}
	if ic.LinkType != "" {
		link += " (" + Printable(ic.LinkType) + ")"
	}
	ips := make([]string, len(ic.IPs))
	for i, ip := range ic.IPs {
		ips[i] = Printable(ip)
	}
	r.line("Interception", "link %s, IPs %s", link, orNone(strings.Join(ips, ", ")))
	backend := Printable(ic.Backend)
	if backend == "" {
		backend = "rules not managed"
	}
	r.line("", "rules %d of %d present (%s)", ic.RulesPresent, ic.RulesWanted, backend)
	last := "never"
	if !ic.LastRepair.IsZero() {
		last = fmtSeconds(d.Now.Sub(ic.LastRepair).Seconds()) + " ago"
	}
	r.line("", "%d repairs, last %s", ic.Repairs, last)
	if ic.LastError != "" {
		r.line("", "last error: %s", Printable(ic.LastError))
	}
	renderFallback(r, ic)
}

// renderFallback writes the DNS fallback's state, its targets and the
// flows it redirected.
func renderFallback(r report, ic *intercept.Status) {
	flows := fmt.Sprintf("%d flows redirected (ipv4 %d, ipv6 %d)", ic.FallbackFlows4+ic.FallbackFlows6, ic.FallbackFlows4, ic.FallbackFlows6)
	switch ic.Fallback {
	case "":
		return // an older agent
	case "off":
		r.line("", "DNS fallback off")
	case "unavailable":
		r.line("", "DNS fallback unavailable: %s", Printable(ic.FallbackError))
	case "waiting":
		r.line("", "DNS fallback waiting for its targets (the chains keep what an earlier agent wrote)")
	default:
		targets := make([]string, 0, len(ic.FallbackTargets4)+len(ic.FallbackTargets6))
		for _, t := range append(slices.Clone(ic.FallbackTargets4), ic.FallbackTargets6...) {
			targets = append(targets, Printable(t))
		}
		r.line("", "DNS fallback on: %s; %s", orNone(strings.Join(targets, ", ")), flows)
		if len(ic.FallbackClusterIPs) > 0 {
			ips := make([]string, len(ic.FallbackClusterIPs))
			for i, ip := range ic.FallbackClusterIPs {
				ips[i] = Printable(ip)
			}
			r.line("", "left to kube-proxy (ClusterIPs): %s", strings.Join(ips, ", "))
		}
	}
}

// renderDnstap writes the dnstap collectors' figures, when there are.
func renderDnstap(r report, taps []dnstap.Stats) {
	label := "dnstap"
	for _, t := range taps {
		state := "connected"
		if !t.Connected {
			state = "NOT CONNECTED"
			if t.LastError != "" {
				state += " (" + Printable(t.LastError) + ")"
			}
		}
		r.line(label, "%s: %s; %d sent, %d dropped (queue full), %d lost, %d reconnects, %d queued (%d bytes)",
			Printable(t.Socket), state, t.Sent, t.Dropped, t.Lost, t.Reconnects, t.QueuedMessages, t.QueuedBytes)
		label = ""
	}
}

// renderPeers writes who else serves the agent's addresses.
func renderPeers(r report, p *PeerFigures) {
	if p == nil {
		return // an older agent
	}
	if len(p.Agents)+len(p.Foreign)+len(p.Unidentified) == 0 {
		r.line("Sharing", "no other process serves our addresses")
		return
	}
	label := "Sharing"
	for _, group := range []struct {
		what string
		list []string
	}{{"FOREIGN DNS SERVER (not ready until it is gone):", p.Foreign}, {"unidentified:", p.Unidentified}, {"nodedns agent:", p.Agents}} {
		for _, s := range group.list {
			r.line(label, "%s %s", group.what, Printable(s))
			label = ""
		}
	}
}

func renderInformers(r report, inf *k8s.Stats) {
	switch {
	case inf == nil:
		r.line("Informers", "not reported")
		return
	case !inf.Enabled:
		r.line("Informers", "off (no Kubernetes configured)")
		return
	}
	state := "synced"
	if !inf.Synced {
		state = "NOT SYNCED (cluster names are not answered from the index yet)"
	}
	kinds := make([]string, 0, len(inf.Objects))
	for k := range inf.Objects {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	objs := make([]string, len(kinds))
	for i, k := range kinds {
		objs[i] = fmt.Sprintf("%s %d", Printable(k), inf.Objects[k])
	}
	r.line("Informers", "%s; %s", state, orNone(strings.Join(objs, ", ")))
}

func topList(r report, l []TopEntry) {
	if len(l) == 0 {
		r.line("", "none yet")
		return
	}
	rows := make([][]string, len(l))
	for i, e := range l {
		rows[i] = []string{"", fmt.Sprint(e.Count), Printable(e.Key)}
	}
	r.table(rows)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func fmtSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func fmtRate(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

func fmtMs(ms float64) string {
	switch {
	case ms <= 0:
		return "-"
	case ms < 1:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 10:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fms", ms)
}

// Printable escapes what a terminal would act on (as \xNN): query names
// and errors come from the network and may hold control bytes.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
