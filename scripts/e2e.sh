#!/usr/bin/env bash
# What nodedns promises, shown on a real single-node cluster
# (scripts/cluster.sh): the DaemonSet from deploy/daemonset.yaml, pods whose
# resolv.conf kubelet wrote, workloads made by the real controllers,
# kube-proxy's rules beside the agent's, rolling updates under load, the
# agent's death under load.
#
#   scripts/e2e.sh          bring the cluster up, build and import the images,
#                           run every step, take the cluster down and check
#                           the machine is as before
#   KEEP=1 scripts/e2e.sh   leave the cluster up (then run any step alone:
#                           go test -tags e2e -count=1 -v -run TestRollouts ./e2e/)
#   KUBE_PROXY_MODE=nftables scripts/e2e.sh
#                           the same with kube-proxy in nftables mode (its
#                           rules in its own nftables tables; the agent's
#                           still iptables rules, through iptables-nft)
#   LOAD_QPS (600)          the rollouts' load, queries/s
#   DEATH_QPS (400)         the death steps' direct load, queries/s
#   E2E_DEATH_COMPARE=1     the death steps once more with one process and no
#                           fallback (figures only)
#
# The steps are Go tests on client-go (e2e/, build tag e2e, written on
# e2e/framework); this script only brings the cluster up, builds and
# imports the images, runs them, and takes the cluster down (what the three
# e2e scripts share is scripts/e2e-run.sh):
#  1. TestDaemonSet: deploy/daemonset.yaml, unchanged but for the image and
#     one ConfigMap value (upstream: the test upstream on 127.0.53.53); the
#     DaemonSet becomes Ready; the link and each rule exist exactly once,
#     beside kube-proxy's rules.
#  2. TestLookups: a Deployment, a StatefulSet, an ExternalName Service in
#     two namespaces resolved by glibc, musl and dig from client pods (SRV,
#     PTR, external names); one external lookup costs the agent 2 queries.
#  3. TestKubeDNSClusterIP: the kube-dns ClusterIP in local-ip: answered by
#     the agent despite kube-proxy's DNAT, no conntrack entry.
#  4. TestRollouts: `rollout restart` and an image change under LOAD_QPS:
#     surge counted from watch events (at most 2 pods, and 2), 0 lost, 0
#     SERVFAIL, at least half of LOAD_QPS reached, rules still once.
#  5. TestStatsProbesMetrics: `nodedns stats` (text and --json), probes,
#     metrics on the node.
#  5c. TestDocsCommands: the marked shell blocks of docs/install.md and
#     docs/troubleshooting.md run against this agent (scripts/docs-e2e.sh).
#  5b. TestAgentDeath: kill -9, SIGSTOP, OOM kill and a crash loop under
#     load: at most 0.5 % failed and 1 s without an answer (kill -9, OOM),
#     at least 99 % answered (SIGSTOP, crash loop).
#  6. TestDelete: the link and every rule gone after the delete.
#  7. (here) `scripts/cluster.sh down`: the machine is as before.
#
# Needs root; installs what it needs. Exits non-zero when a step fails,
# after cleaning up.
set -euo pipefail
cd "$(dirname "$0")/.."

LOAD_QPS=${LOAD_QPS:-600}
KUBE_PROXY_MODE=${KUBE_PROXY_MODE:-iptables}
case $KUBE_PROXY_MODE in iptables | nftables) ;; *)
	echo "e2e: KUBE_PROXY_MODE=${KUBE_PROXY_MODE}: want iptables or nftables" >&2
	exit 2
	;;
esac
export KUBE_PROXY_MODE LOAD_QPS

# What the tests read with on the node (dnsmasq: their upstream; dig,
# iptables, nft, conntrack: what they read).
E2E_NAME="e2e ${KUBE_PROXY_MODE}"
E2E_DEPS="dnsmasq-base dnsutils iptables nftables conntrack curl jq"
# shellcheck disable=SC2317 # run by e2e_cleanup
e2e_collect_logs() {
	k -n kube-system logs -l app.kubernetes.io/name=nodedns --tail=200 --prefix >"$1/nodedns.log" 2>&1 || log "cleanup: no agent logs ($1/nodedns.log says why)"
	cp -r /var/lib/nodedns-cluster/logs "$1/cluster" 2>/dev/null || log "cleanup: no cluster logs in /var/lib/nodedns-cluster/logs"
	tail -n 40 "$1/nodedns.log" >&2
}
# shellcheck source=scripts/e2e-run.sh
source scripts/e2e-run.sh

e2e_setup
# The NetworkPolicy rules of docs/install.md (host mode: ipBlock peers for
# 169.254.20.10 and the kube-dns ClusterIP) need a policy engine; the
# bridge CNI plugin is none, and none runs here.
log "NetworkPolicy: not checked: this cluster's CNI (Debian's bridge plugin) enforces no NetworkPolicy and no policy engine runs on it; the policy check runs on Cilium (scripts/cilium-e2e.sh)"
IMAGE=$(scripts/image.sh nodedns | tail -n 1)
CLIENT=$(scripts/image.sh client | tail -n 1)
CENTRAL=$(scripts/image.sh coredns | tail -n 1)
ok "images ${IMAGE}, ${CLIENT} and ${CENTRAL} imported"
export NODEDNS_E2E_IMAGE_NODEDNS=$IMAGE NODEDNS_E2E_IMAGE_CLIENT=$CLIENT NODEDNS_E2E_IMAGE_COREDNS=$CENTRAL

# Steps 1-6; step 7 is e2e_cleanup's.
tests=(TestDaemonSet TestLookups TestKubeDNSClusterIP TestRollouts TestStatsProbesMetrics TestDocsCommands TestAgentDeath)
[[ ${E2E_DEATH_COMPARE:-0} == 1 ]] && tests+=(TestAgentDeathCompare)
tests+=(TestDelete)
e2e_go_test 40m "${tests[@]}"
