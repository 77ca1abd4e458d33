package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodedns/nodedns/pkg/supervisor"
)

// TestSupervisorCollector: the supervisor's figures as series, every
// replacement reason from the start; only nodedns_supervisor_up when the
// supervisor does not answer.
func TestSupervisorCollector(t *testing.T) {
	started := time.Unix(1700000000, 0)
	fig := SupervisorFigures{Status: supervisor.Status{PID: 1, ChildPID: 7, ChildStarted: started, Children: 3,
		Replaced: map[string]uint64{"oom": 1, "hung": 1}, SocketsHeld: 4, Releases: 2}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(SupervisorCollector(func() SupervisorFigures { return fig }))
	want := `
# HELP nodedns_supervisor_serving_processes_replaced_total Serving processes that ended without being asked to and were replaced, by reason: exit (an exit code), signal, oom (killed by the kernel's OOM killer), hung (stopped, or a query left unread, for the hang timeout: killed by the supervisor).
# TYPE nodedns_supervisor_serving_processes_replaced_total counter
nodedns_supervisor_serving_processes_replaced_total{reason="exit"} 0
nodedns_supervisor_serving_processes_replaced_total{reason="hung"} 1
nodedns_supervisor_serving_processes_replaced_total{reason="oom"} 1
nodedns_supervisor_serving_processes_replaced_total{reason="signal"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodedns_supervisor_serving_processes_replaced_total"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	// up, started, 4 reasons, start time, held, releases.
	if n != 9 {
		t.Errorf("%d series, want 9", n)
	}
	for name, v := range map[string]float64{"nodedns_supervisor_up": 1, "nodedns_supervisor_serving_processes_started_total": 3,
		"nodedns_supervisor_serving_process_start_time_seconds": 1700000000, "nodedns_supervisor_sockets_held": 4,
		"nodedns_supervisor_socket_releases_total": 2} {
		mfs, _ := reg.Gather()
		found := false
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			found = true
			m := mf.GetMetric()[0]
			got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if got != v {
				t.Errorf("%s = %g, want %g", name, got, v)
			}
		}
		if !found {
			t.Errorf("%s not exported", name)
		}
	}

	fig = SupervisorFigures{Error: "timeout"}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Errorf("a supervisor that does not answer: %d series (%v), want only nodedns_supervisor_up", n, err)
	}
}
