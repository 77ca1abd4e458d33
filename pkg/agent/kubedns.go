package agent

import (
	"log/slog"
	"path/filepath"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/k8s/kubedns"
)

// kubeDNSState is the agent's view of the --kube-dns-config directory:
// what was read last and what the running forwarder applies. A directory
// that does not read, parse or validate changes nothing: the running
// settings stay and one warning names the file (again only when the
// problem changes).
type kubeDNSState struct {
	src     *kubedns.Source // nil: no --kube-dns-config
	applied kubedns.Config
	lastErr string
}

func newKubeDNSState(dir string) *kubeDNSState {
	if dir == "" {
		return &kubeDNSState{}
	}
	return &kubeDNSState{src: &kubedns.Source{Dir: dir}}
}

// poll reads the directory; changed reports content that differs from
// what is applied and is valid for cfg (the candidate is returned).
func (k *kubeDNSState) poll(cfg config.Config, log *slog.Logger) (kubedns.Config, bool) {
	if k.src == nil {
		return kubedns.Config{}, false
	}
	c, _, err := k.src.Load()
	if err == nil {
		err = cfg.CheckKubeDNS(c)
	}
	if err != nil {
		if err.Error() != k.lastErr {
			log.Warn("kube-dns config not applied; keeping the running settings", "dir", k.src.Dir, "err", err)
			k.lastErr = err.Error()
		}
		return k.applied, false
	}
	if k.lastErr != "" {
		log.Info("kube-dns config readable again", "dir", k.src.Dir)
		k.lastErr = ""
	}
	if c.Federations && !k.applied.Federations {
		log.Warn("kube-dns config: federations is obsolete and ignored", "file", filepath.Join(k.src.Dir, kubedns.FederationsKey))
	}
	return c, !c.Equal(k.applied)
}
