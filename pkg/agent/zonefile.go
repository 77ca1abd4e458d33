package agent

import (
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
