#!/usr/bin/env bash
# The agent in the pod network (the chart's networkMode pod) behind Cilium's
# Local Redirect Policy, on the local single-node cluster (scripts/cluster.sh):
# e2e/cilium_test.go's TestCiliumPodMode.
#
#   scripts/cilium-e2e.sh          bring the cluster up, run the test, take
#                                  the cluster down (also on failure) and
#                                  check the machine is as before
#   KEEP=1 scripts/cilium-e2e.sh   leave the cluster up
#   CILIUM=0 scripts/cilium-e2e.sh the stand-in even where Cilium can run
#
# Which redirect it runs, said on its first and last lines:
#  - Cilium, when this tree's scripts/cluster.sh has a Cilium mode
#    (CLUSTER_CNI=cilium: cilium-agent with kube-proxy replacement and
#    Local Redirect Policy, no kube-proxy) and CILIUM is not 0: the chart's
#    CiliumLocalRedirectPolicy objects redirect, and the default-deny egress
#    NetworkPolicy check runs (Cilium enforces it);
#  - else the stand-in (NODEDNS_E2E_LRP=standin): kube-proxy and the bridge
#    CNI plugin, the redirect done by iptables DNAT of 169.254.20.10 and the
#    kube-dns ClusterIP to the Ready agent pod (e2e/cilium_test.go says
#    how); the bridge plugin enforces no NetworkPolicy, so that check does
#    not run, and the test says so.
#
# Steps (each a subtest): on Cilium, the cluster itself (the pods'
# addresses Cilium endpoints', no kube-proxy chains, kube-dns in Cilium's
# service table with an active backend); the chart in pod mode (no link, no rules on the
# node); cluster and external names through both addresses, counted by the
# agent and not by CoreDNS; a rolling update, a kill -9 of the serving
# process and the DaemonSet deleted, each under a direct load of 400 q/s
# per address and glibc getent in a loop, with the queries lost and the
# longest gap.
#
# What the three e2e scripts share is scripts/e2e-run.sh. Needs root;
# installs what it needs. On a shared machine run it under the host lock:
#   flock /tmp/nodedns-host.lock scripts/cilium-e2e.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${CILIUM:-1}" != 0 ]] && grep -q 'CLUSTER_CNI' scripts/cluster.sh; then
	LRP=cilium
	export CLUSTER_CNI=cilium
else
	LRP=standin
fi
export NODEDNS_E2E_LRP=$LRP

E2E_NAME="cilium-e2e ${LRP}"
E2E_DEPS="dnsmasq-base dnsutils iptables conntrack"
# shellcheck disable=SC2317 # run by e2e_cleanup
e2e_collect_logs() {
	k -n kube-system logs -l app.kubernetes.io/name=nodedns --tail=200 --prefix >"$1/nodedns.log" 2>&1 || log "cleanup: no agent logs ($1/nodedns.log says why)"
	tail -n 40 "$1/nodedns.log" >&2
}
# shellcheck source=scripts/e2e-run.sh
source scripts/e2e-run.sh

log "redirect: ${LRP} ($([[ $LRP == cilium ]] && echo "Cilium's Local Redirect Policy" || echo "the iptables DNAT stand-in: this tree's cluster has no Cilium mode, or CILIUM=0"))"
e2e_setup
NODEDNS_HELM=$(scripts/helm.sh | tail -n 1)
export NODEDNS_HELM
e2e_go_test 30m TestCiliumPodMode
