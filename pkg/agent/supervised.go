package agent

import (
	"log/slog"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/observe/metrics"
)

// A supervised agent (Options.Supervisor) is the serving process of
// pkg/supervisor: its listening sockets come from the supervisor, it
// says when it serves and when it drains, and removes
// the interception on exit only when the supervisor stops too (else
// another serving process takes over at once).

// supervisorSource is the /stats source of the supervisor's report; nil
// when unsupervised.
func (a *Agent) supervisorSource() func() metrics.SupervisorFigures {
	if a.sup == nil {
		return nil
	}
	return a.supervisorFigures
}

// supervisorFigures reads the supervisor's report for /stats and /metrics.
func (a *Agent) supervisorFigures() metrics.SupervisorFigures {
	st, err := a.sup.Status()
	if err != nil {
		return metrics.SupervisorFigures{Error: err.Error()}
	}
	return metrics.SupervisorFigures{Status: st}
}

// TeardownAfterStop is the supervisor's end of a stop that found no
// serving process running (one that runs does it itself): the sockets are
// closed; the interception of cfg goes as an unsupervised agent's would
// on exit (--teardown, and no other agent serving the addresses), except
// that addresses put on a link nodedns did not create are left (which of
// them the agent added died with the serving process).
func TeardownAfterStop(cfg config.Config, log *slog.Logger) {
	icfg, ok := interceptConfig(cfg, log)
	if !ok {
		return
	}
	if !cfg.Teardown {
		log.Info("leaving interception in place (--teardown=false)")
		return
	}
	if ok, why := intercept.ShouldTeardown(icfg); !ok {
		log.Info("leaving interception in place", "why", why)
		return
	}
	ic, err := intercept.New(icfg)
	if err != nil {
		log.Error("teardown: interception", "err", err)
		return
	}
	log.Info("tearing down interception", "why", "the agent stopped and no other agent serves its addresses")
	if err := ic.Teardown(); err != nil {
		log.Error("teardown failed", "err", err)
	}
}
