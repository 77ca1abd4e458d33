package agent

import (
	"errors"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/query/pipeline"
)

// buildDNS64External adds the `dns64:` and `k8s-external:` plugins of cfg
// to pl. k8s-external reads the cluster index's Services: without the
// cluster zone it is an error naming the key.
func (a *Agent) buildDNS64External(cfg config.Config, pl *pipeline.Plugins) error {
	d, err := cfg.DNS64()
	if err != nil {
		return err
	}
	if d != nil {
		pl.DNS64 = d
	}
	xc, ok, err := cfg.K8sExternal()
	if err != nil || !ok {
		return err
	}
	if a.ix == nil {
		return errors.New("k8s-external: needs the cluster zone (a kubeconfig, or running in a cluster)")
	}
	x, err := a.ix.External(xc)
	if err != nil {
		return err
	}
	pl.External = x
	return nil
}
