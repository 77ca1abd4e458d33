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
# Steps (each a subtest): the chart in pod mode (no link, no rules on the
# node); cluster and external names through both addresses, counted by the
# agent and not by CoreDNS; a rolling update, a kill -9 of the serving
# process and the DaemonSet deleted, each under a direct load of 400 q/s
# per address and glibc getent in a loop, with the queries lost and the
# longest gap.
#
# Needs root. On a shared machine run it under the host lock:
#   flock /tmp/nodedns-host.lock scripts/cilium-e2e.sh
set -euo pipefail
cd "$(dirname "$0")/.."

KEEP=${KEEP:-0}
START=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-cilium-e2e.XXXXXX")

if [[ "${CILIUM:-1}" != 0 ]] && grep -q 'CLUSTER_CNI' scripts/cluster.sh; then
	LRP=cilium
	export CLUSTER_CNI=cilium
else
	LRP=standin
fi
export NODEDNS_E2E_LRP=$LRP

log() { printf '[cilium-e2e %s %3ds] %s\n' "$LRP" "$(($(date +%s) - START))" "$*" >&2; }

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local rc=$? st
	set +e
	if [[ "$KEEP" != 1 ]]; then
		if [[ $rc != 0 ]]; then
			mkdir -p "${work}/logs"
			scripts/cluster.sh kubectl -n kube-system logs -l app.kubernetes.io/name=nodedns --tail=200 --prefix >"${work}/logs/nodedns.log" 2>&1
			scripts/cluster.sh kubectl get events -A --sort-by=.lastTimestamp >"${work}/logs/events.txt" 2>&1
		fi
		scripts/cluster.sh down
		st=$?
		if ((st != 0)); then
			log "FAIL: cleanup: scripts/cluster.sh down failed (exit ${st})"
			rc=1
		elif ! scripts/cluster.sh snapshot "${work}/after.txt"; then
			log "FAIL: cleanup: scripts/cluster.sh snapshot failed"
			rc=1
		elif ! diff -u "${work}/before.txt" "${work}/after.txt" >&2; then
			log "FAIL: the machine differs from before 'up' (diff above)"
			rc=1
		fi
	fi
	if [[ $rc == 0 ]]; then
		rm -rf "$work"
		log "PASS in $(($(date +%s) - START))s (redirect: ${LRP})"
	else
		log "FAIL (exit ${rc}) after $(($(date +%s) - START))s (redirect: ${LRP}); logs in ${work}"
	fi
	exit "$rc"
}
trap cleanup EXIT

[[ $(id -u) == 0 ]] || {
	log "needs root"
	exit 1
}
for p in dnsmasq-base dnsutils iptables conntrack; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq --no-install-recommends "$p" >/dev/null
	}
done

log "redirect: ${LRP} ($([[ $LRP == cilium ]] && echo "Cilium's Local Redirect Policy" || echo "the iptables DNAT stand-in: this tree's cluster has no Cilium mode, or CILIUM=0"))"
if [[ -e "$(scripts/cluster.sh env | sed -n 's/^STATE=//p')" || -e /run/nodedns-cluster ]]; then
	log "a cluster from an earlier run is present; taking it down first"
	scripts/cluster.sh down
fi
scripts/cluster.sh snapshot "${work}/before.txt"
KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
export KUBECONFIG
log "cluster up (${KUBECONFIG})"
NODEDNS_HELM=$(scripts/helm.sh | tail -n 1)
export NODEDNS_HELM
go test -tags e2e -count=1 -v -timeout 30m -run '^TestCiliumPodMode$' ./e2e/ 2>&1 | tee "${work}/test.log"
rc=${PIPESTATUS[0]}
grep -E '^\s+(cilium_test|main_test)\.go:[0-9]+: ok:|--- (PASS|FAIL)' "${work}/test.log" >&2 || true
exit "$rc"
