package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/zonefile"
)

// applyZoneFiles reads the zone files of the `zone-files:` key again
// (prepare: a bad file fails the reload, which changes nothing) and serves
// them (commit), as CoreDNS's reload builds its file plugin anew. Between
// reloads the zones follow their files every reload interval
// (zonefile.Files.Run).
var applyZoneFiles = &applier{class: config.ApplyZoneFiles, prepare: func(a *Agent, cfg *config.Config) (func() error, error) {
	zc := cfg.ZoneFileSettings()
	zc.Logger = a.log
	apply, err := a.zones.Prepare(zc)
	if err != nil {
		return nil, err
	}
	return func() error { apply(); return nil }, nil
}}

// newZoneFiles reads the zone files of cfg (none: an empty set, which
// answers nothing and costs the query path one pointer load).
func newZoneFiles(cfg config.Config, a *Agent) (*zonefile.Files, error) {
	zc := cfg.ZoneFileSettings()
	zc.Logger = a.log
	return zonefile.New(zc)
}

// canonicalZones makes the zones of a key lower-case FQDNs; nil for none.
func canonicalZones(zs config.List) []string {
	var out []string
	for _, z := range zs {
		out = append(out, dnsname.Canonical(z))
	}
	return out
}

// zoneFileCollectors are the zone files' figures: zones read (at start,
// after a config reload, a new serial) and file versions rejected (the
// zone served before kept). The agent's zone set lives as long as the
// agent, so both only grow.
func zoneFileCollectors(f *zonefile.Files) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodedns_zone_file_loads_total",
			Help: "Zones of zone-files read and served: at start, after a config reload, and when a file's SOA serial changed."},
			func() float64 { return float64(f.Stats().Loaded) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodedns_zone_file_rejected_total",
			Help: "Versions of zone files that did not parse at a reload interval; the zone served before was kept."},
			func() float64 { return float64(f.Stats().Rejected) }),
	}
}
