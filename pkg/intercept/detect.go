package intercept

import (
	"fmt"
	"strings"
)

// saveCounts summarizes the iptables-save output (IPv4 and IPv6) of one
// backend.
type saveCounts struct {
	// kubeletChains: kubelet's KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY
	// chain exists (kubelet 1.17+ creates one in the backend it uses).
	kubeletChains bool
	// kubeRules counts rules mentioning a KUBE- chain; rules counts every
	// rule. Neither counts our own rules, so an earlier choice of ours
	// cannot outvote kube-proxy.
	kubeRules, rules int
}

// countSave reads iptables-save output.
func countSave(save []byte) saveCounts {
	var c saveCounts
	for _, line := range strings.Split(string(save), "\n") {
		switch {
		case strings.HasPrefix(line, ":KUBE-IPTABLES-HINT "), strings.HasPrefix(line, ":KUBE-KUBELET-CANARY "):
			c.kubeletChains = true
		case strings.HasPrefix(line, "-"):
			if strings.Contains(line, commentPrefix) {
				continue
			}
			c.rules++
			if strings.Contains(line, "KUBE-") {
				c.kubeRules++
			}
		}
	}
	return c
}

// chooseBackend picks the backend the node already uses, in the order
// kubernetes-sigs/iptables-wrappers established: kubelet's marker chains
// first (nft checked before legacy), then whichever backend holds more
// kube rules, then more rules of any kind; with no evidence at all, nft,
// the default of every current distribution.
func chooseBackend(nft, legacy saveCounts) (backend, reason string) {
	switch {
	case nft.kubeletChains:
		return BackendNFT, "kubelet chains found in iptables-nft"
	case legacy.kubeletChains:
		return BackendLegacy, "kubelet chains found in iptables-legacy"
	case nft.kubeRules != legacy.kubeRules:
		if legacy.kubeRules > nft.kubeRules {
			return BackendLegacy, fmt.Sprintf("%d kube rules in legacy, %d in nft", legacy.kubeRules, nft.kubeRules)
		}
		return BackendNFT, fmt.Sprintf("%d kube rules in nft, %d in legacy", nft.kubeRules, legacy.kubeRules)
	case nft.rules != legacy.rules:
		if legacy.rules > nft.rules {
			return BackendLegacy, fmt.Sprintf("%d rules in legacy, %d in nft", legacy.rules, nft.rules)
		}
		return BackendNFT, fmt.Sprintf("%d rules in nft, %d in legacy", nft.rules, legacy.rules)
	default:
		return BackendNFT, fmt.Sprintf("no evidence either way (%d rules in each), default", nft.rules)
	}
}
