package agent

import (
	"os"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/builtin"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
)

// buildPlugins builds the CoreDNS plugins the pipeline runs around its stages
// (local, chaos, acl, templates, header) from cfg; nil when none is
// configured. Everything that can fail is built here, so that a reload
// prepares them before it applies anything.
func (a *Agent) buildPlugins(cfg config.Config) (*pipeline.Plugins, error) {
	pl := &pipeline.Plugins{}
	if cfg.Local {
		pl.Local = builtin.NewLocal(cfg.LocalLocalhostPrefix)
	}
	if cfg.Chaos {
		version := cfg.ChaosVersion
		if version == "" {
			version = "nodedns-" + a.version
		}
		pl.Chaos = builtin.NewChaos(version, cfg.ChaosAuthors)
	}
	acl, err := cfg.AccessList()
	if err != nil {
		return nil, err
	}
	if acl != nil {
		pl.ACL = acl
	}
	ts, err := cfg.TemplateSet()
	if err != nil {
		return nil, err
	}
	if ts != nil {
		pl.Templates = ts
	}
	if pl.Header.Set, pl.Header.Clear, _, err = cfg.HeaderMasks(); err != nil {
		return nil, err
	}
	if cfg.NSID {
		pl.NSID = &pipeline.NSID{Data: cfg.NSIDPayload(os.Hostname), Zones: canonicalZones(cfg.NSIDZones), Except: canonicalZones(cfg.NSIDExcept)}
	}
	if err := a.buildDNS64External(cfg, pl); err != nil {
		return nil, err
	}
	if *pl == (pipeline.Plugins{}) {
		return nil, nil
	}
	return pl, nil
}
