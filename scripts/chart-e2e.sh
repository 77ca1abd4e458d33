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
# and imports the images, runs them, and takes the cluster down:
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

KEEP=${KEEP:-0}
KUBE_PROXY_MODE=${KUBE_PROXY_MODE:-iptables}
export KUBE_PROXY_MODE
START=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-chart-e2e.XXXXXX")
failed=1

log() { printf '[chart-e2e %3ds] %s\n' "$(($(date +%s) - START))" "$*" >&2; }
step() { printf '\n[chart-e2e %3ds] ===== %s\n' "$(($(date +%s) - START))" "$*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}
ok() { log "ok: $*"; }

k() { scripts/cluster.sh kubectl "$@"; }

# A command that fails outside a check (and so ends the run under set -e)
# is named: file, line, command, status, and the functions it ran in. A
# subshell's failure is named where this shell sees it.
set -E
on_err() {
	local i
	[[ $BASHPID == "$$" ]] || return 0
	log "FAIL: ${BASH_SOURCE[1]}:$2: $3 exited $1"
	for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
		log "  in ${FUNCNAME[i]}, called from ${BASH_SOURCE[i + 1]}:${BASH_LINENO[i]}"
	done
}
trap 'on_err $? "$LINENO" "$BASH_COMMAND"' ERR

# cleanup, on exit whatever ended the run: every step runs whatever the
# ones before it did (errexit off: under set -e one failed command would
# end the trap, leaving the cluster up, and the script with that command's
# status, in silence); a step that fails where it matters (the cluster not
# taken down, the machine not as before or not compared) is named and
# fails the run; the logs directory or the work directory not written or
# not removed is only reported.
cleanup() {
	local rc=$? st
	set +e
	trap - ERR
	if [[ "$KEEP" != 1 ]]; then
		if [[ $rc != 0 ]]; then
			mkdir -p "${work}/logs" || log "cleanup: could not make ${work}/logs"
			k -n kube-system logs -l app.kubernetes.io/instance=nodedns --all-containers --tail=200 --prefix >"${work}/logs/pods.log" 2>&1 || true
			k get events -A --sort-by=.lastTimestamp >"${work}/logs/events.txt" 2>&1 || true
			tail -n 40 "${work}/logs/pods.log" >&2 || true
		fi
		scripts/cluster.sh down
		st=$?
		if ((st != 0)); then
			log "FAIL: cleanup: scripts/cluster.sh down failed (exit ${st}; its output above)"
			rc=1
		fi
		if [[ $rc == 0 && $failed == 0 ]]; then
			step "5. scripts/cluster.sh down leaves nothing behind"
			if ! scripts/cluster.sh snapshot "${work}/after.txt"; then
				log "FAIL: cleanup: scripts/cluster.sh snapshot failed: the machine was not compared with before 'up'"
				rc=1
			elif ! diff -u "${work}/before.txt" "${work}/after.txt" >&2; then
				log "FAIL: the machine differs from before 'up' (diff above)"
				rc=1
			else
				ok "the machine is as before"
			fi
		fi
	fi
	if [[ $rc == 0 ]]; then
		rm -rf "$work" || log "cleanup: could not remove ${work} (left behind)"
		log "PASS in $(($(date +%s) - START))s"
	else
		log "logs kept in ${work}"
	fi
	exit "$rc"
}
trap cleanup EXIT

deps() {
	local missing=() p
	for p in dnsutils iptables conntrack nftables; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c "install ok installed" >/dev/null || missing+=("$p")
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	fi
}

# ------------------------------------------------------------------ setup

[[ $(id -u) == 0 ]] || fail "needs root"
deps
HELM=${NODEDNS_HELM:-$(scripts/helm.sh | tail -n 1)}
scripts/cluster.sh snapshot "${work}/before.txt"
step "cluster up"
KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
export KUBECONFIG
IMAGE=$(scripts/image.sh nodedns | tail -n 1)
CLIENT=$(scripts/image.sh client | tail -n 1)
ok "node Ready; images ${IMAGE}, ${CLIENT}"
export NODEDNS_E2E_IMAGE_NODEDNS=$IMAGE NODEDNS_E2E_IMAGE_CLIENT=$CLIENT NODEDNS_HELM=$HELM

# ------------------------------------------------------------------ steps 1-4
tests='TestChartInstall|TestChartUpgradeConfig|TestChartUpgradeSurge|TestChartUninstall'
step "steps 1-4: go test -tags e2e -run '^(${tests})$' ./e2e/"
# -failfast: the steps build on each other; the first failure ends the run.
if ! go test -tags e2e -count=1 -v -failfast -timeout 30m -run "^(${tests})\$" ./e2e/ 2>&1 | tee "${work}/go-test.log" >&2; then
	log "failed: $(grep -E -- '--- FAIL' "${work}/go-test.log" | sed 's/^ *//' | paste -sd ';' -)"
	fail "go test failed (the failing check's message above, under its step; the first failed step ends the run)"
fi
ok "steps 1-4 passed"
failed=0
