package metrics

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/supervisor"
)

// SupervisorFigures are the supervisor's report (pkg/supervisor) as the
// serving process got it; Error says why it could not be had.
type SupervisorFigures struct {
	supervisor.Status
	Error string `json:"error,omitempty"`
}

// supervisorReasons are the reasons a serving process is replaced for,
// each exported (0 until it happens) so that rate() works from the start.
var supervisorReasons = []string{"exit", "signal", "oom", "hung"}

// SupervisorCollector exports the supervisor's figures: which processes
// serve, how often one was replaced and why.
func SupervisorCollector(src func() SupervisorFigures) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("nodedns_supervisor_"+name, help, labels, nil)
	}
	return &supCollector{src: src,
		started:  d("serving_processes_started_total", "Serving processes the supervisor started, the first included."),
		replaced: d("serving_processes_replaced_total", "Serving processes that ended without being asked to and were replaced, by reason: exit (an exit code), signal, oom (killed by the kernel's OOM killer), hung (stopped, or a query left unread, for the hang timeout: killed by the supervisor).", "reason"),
		since:    d("serving_process_start_time_seconds", "When the serving process now running started (Unix time); 0 between two."),
		held:     d("sockets_held", "Listening sockets the supervisor holds for the serving process."),
		releases: d("socket_releases_total", "Times the supervisor closed its sockets because no serving process came back within the hang timeout (the node's fallback rules then answer)."),
		up:       d("up", "1 when the supervisor answered the serving process's last question about it."),
	}
}

type supCollector struct {
	src                                          func() SupervisorFigures
	started, replaced, since, held, releases, up *prometheus.Desc
}

func (c *supCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.started, c.replaced, c.since, c.held, c.releases, c.up} {
		ch <- d
	}
}

func (c *supCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.src()
	if f.Error != "" {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.started, prometheus.CounterValue, float64(f.Children))
	for _, r := range supervisorReasons {
		ch <- prometheus.MustNewConstMetric(c.replaced, prometheus.CounterValue, float64(f.Replaced[r]), r)
	}
	since := 0.0
	if !f.ChildStarted.IsZero() {
		since = float64(f.ChildStarted.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.since, prometheus.GaugeValue, since)
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(f.SocketsHeld))
	ch <- prometheus.MustNewConstMetric(c.releases, prometheus.CounterValue, float64(f.Releases))
}

// renderSupervisor writes which processes serve and how the last ones
// ended.
func renderSupervisor(r report, s *SupervisorFigures, now time.Time) {
	switch {
	case s == nil:
		r.line("Supervisor", "none (one process; --supervise=false, or an older agent)")
		return
	case s.Error != "":
		r.line("Supervisor", "NOT ANSWERING: %s", Printable(s.Error))
		return
	}
	serving := "none now"
	if s.ChildPID != 0 {
		serving = fmt.Sprintf("pid %d, up %s", s.ChildPID, now.Sub(s.ChildStarted).Round(time.Second))
	}
	var replaced []string
	for _, k := range slices.Sorted(maps.Keys(s.Replaced)) {
		replaced = append(replaced, fmt.Sprintf("%s %d", Printable(k), s.Replaced[k]))
	}
	r.line("Supervisor", "pid %d; serving process %s; %d started, replaced: %s; sockets held %d, released %d times; hang timeout %s",
		s.PID, serving, s.Children, orNone(strings.Join(replaced, ", ")), s.SocketsHeld, s.Releases, time.Duration(s.HangTimeout))
	for i := len(s.Exits) - 1; i >= 0 && i >= len(s.Exits)-3; i-- {
		e := s.Exits[i]
		how := e.Signal
		if how == "" {
			how = fmt.Sprintf("exit code %d", e.Code)
		}
		line := fmt.Sprintf("pid %d ended %s ago: %s (%s) after %s, peak RSS %.1f MiB", e.PID, now.Sub(e.At).Round(time.Second), Printable(e.Reason), Printable(how),
			time.Duration(e.RanFor), float64(e.MaxRSSKiB)/1024)
		if e.Why != "" {
			line += "; " + Printable(e.Why)
		}
		r.line("", "%s", line)
	}
}
