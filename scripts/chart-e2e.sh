#!/usr/bin/env bash
# The Helm chart on a real single-node cluster (scripts/cluster.sh): what
# `helm install`, `helm upgrade` and `helm uninstall` do to a node.
#
#   scripts/chart-e2e.sh          bring the cluster up, build and import the
#                                 images, run every step, take the cluster
#                                 down and check the machine is as before
#   KEEP=1 scripts/chart-e2e.sh   leave the cluster up
#   KUBE_PROXY_MODE=nftables scripts/chart-e2e.sh
#                                 the same with kube-proxy in nftables mode
#
# The steps are Go tests on client-go (e2e/chart_test.go, build tag e2e,
# written on e2e/framework); this script only brings the cluster up, builds
# and imports the images, runs them, and takes the cluster down (what the
# three e2e scripts share is scripts/e2e-run.sh):
#  1. TestChartInstall: helm install with the kube-dns ClusterIP intercepted
#     and metrics on the node's IP: the DaemonSet Ready; the link holds both
#     addresses; the agent's --cluster-dns is the kube-dns-upstream
#     Service's ClusterIP; cluster names answered on 169.254.20.10 and on
#     the kube-dns ClusterIP (which kube-proxy load-balances to pods that
#     run no DNS server), from the node and from a pod, with no conntrack
#     entry; /metrics on the node's IP at port 9253.
#  2. TestChartUpgradeConfig: helm upgrade of a config value only: the same
#     pod, no restart, the change applied live (configuration reloaded).
#  3. TestChartUpgradeSurge: helm upgrade with --teardown=false: a surge
#     rollout, a new pod, the rules once each.
#  4. TestChartUninstall: the pre-delete hooks stop the agents, run
#     `nodedns cleanup` on the node, and succeed; no link, no rule in either
#     iptables backend, no pod, no hook object left.
#  5. (here) scripts/cluster.sh down: the machine is as before.
#
# Against a cluster left up (KEEP=1), a step runs alone:
#   NODEDNS_HELM=... go test -tags e2e -count=1 -v -run TestChartUpgradeConfig ./e2e/
#
# Needs root; installs what it needs. Exits non-zero when a step fails,
# after cleaning up.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBE_PROXY_MODE=${KUBE_PROXY_MODE:-iptables}
export KUBE_PROXY_MODE

E2E_NAME="chart-e2e ${KUBE_PROXY_MODE}"
E2E_DEPS="dnsutils iptables conntrack nftables"
# shellcheck disable=SC2317 # run by e2e_cleanup
e2e_collect_logs() {
	k -n kube-system logs -l app.kubernetes.io/instance=nodedns --all-containers --tail=200 --prefix >"$1/pods.log" 2>&1 || log "cleanup: no pod logs ($1/pods.log says why)"
	tail -n 40 "$1/pods.log" >&2
}
# shellcheck source=scripts/e2e-run.sh
source scripts/e2e-run.sh

HELM=${NODEDNS_HELM:-$(scripts/helm.sh | tail -n 1)}
e2e_setup
IMAGE=$(scripts/image.sh nodedns | tail -n 1)
CLIENT=$(scripts/image.sh client | tail -n 1)
ok "images ${IMAGE}, ${CLIENT}"
export NODEDNS_E2E_IMAGE_NODEDNS=$IMAGE NODEDNS_E2E_IMAGE_CLIENT=$CLIENT NODEDNS_HELM=$HELM

# Steps 1-4; step 5 is e2e_cleanup's.
e2e_go_test 30m TestChartInstall TestChartUpgradeConfig TestChartUpgradeSurge TestChartUninstall
