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
# imports the images, runs them, and takes the cluster down:
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

KEEP=${KEEP:-0}
LOAD_QPS=${LOAD_QPS:-600}
KUBE_PROXY_MODE=${KUBE_PROXY_MODE:-iptables}
case $KUBE_PROXY_MODE in iptables | nftables) ;; *)
	echo "e2e: KUBE_PROXY_MODE=${KUBE_PROXY_MODE}: want iptables or nftables" >&2
	exit 2
	;;
esac
export KUBE_PROXY_MODE LOAD_QPS
START=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-e2e.XXXXXX")
failed=1

log() { printf '[e2e %s %3ds] %s\n' "$KUBE_PROXY_MODE" "$(($(date +%s) - START))" "$*" >&2; }
step() { printf '\n[e2e %s %3ds] ===== %s\n' "$KUBE_PROXY_MODE" "$(($(date +%s) - START))" "$*" >&2; }
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
			log "collecting logs into ${work}/logs before taking the cluster down"
			mkdir -p "${work}/logs" || log "cleanup: could not make ${work}/logs"
			k -n kube-system logs -l app.kubernetes.io/name=nodedns --tail=200 --prefix >"${work}/logs/nodedns.log" 2>&1 || true
			k get events -A --sort-by=.lastTimestamp >"${work}/logs/events.txt" 2>&1 || true
			cp -r /var/lib/nodedns-cluster/logs "${work}/logs/cluster" 2>/dev/null || true
			tail -n 40 "${work}/logs/nodedns.log" >&2 || true
		fi
		scripts/cluster.sh down
		st=$?
		if ((st != 0)); then
			log "FAIL: cleanup: scripts/cluster.sh down failed (exit ${st}; its output above)"
			rc=1
		fi
		if [[ $rc == 0 && $failed == 0 ]]; then
			step "7. scripts/cluster.sh down leaves nothing behind"
			if ! scripts/cluster.sh snapshot "${work}/after.txt"; then
				log "FAIL: cleanup: scripts/cluster.sh snapshot failed: the machine was not compared with before 'up'"
				rc=1
			elif ! diff -u "${work}/before.txt" "${work}/after.txt" >&2; then
				log "FAIL: the machine differs from before 'up' (diff above)"
				rc=1
			else
				ok "links, addresses, routes, netns, iptables (nft and legacy), nft tables, mounts, sysctls, paths, cgroups and processes as before"
			fi
		fi
	fi
	if [[ $rc == 0 ]]; then
		rm -rf "$work" || log "cleanup: could not remove ${work} (left behind)"
		log "PASS in $(($(date +%s) - START))s (kube-proxy ${KUBE_PROXY_MODE} mode)"
	else
		log "logs kept in ${work}"
	fi
	exit "$rc"
}
trap cleanup EXIT

# deps: what the tests use on the node (dnsmasq: their upstream; dig,
# iptables, nft, conntrack: what they read).
deps() {
	local missing=() p
	for p in dnsmasq-base dnsutils iptables nftables conntrack curl jq; do
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
# A cluster left up by an earlier run (KEEP=1, a killed run) would make the
# "before" snapshot describe a running cluster, and step 7 would then report
# the clean machine after 'down' as a difference. Start from a clean machine.
if [[ -e "$(scripts/cluster.sh env | sed -n 's/^STATE=//p')" || -e /run/nodedns-cluster ]]; then
	log "a cluster from an earlier run is present; taking it down first"
	scripts/cluster.sh down
fi
scripts/cluster.sh snapshot "${work}/before.txt"
step "cluster up"
KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
export KUBECONFIG
ok "node Ready (${KUBECONFIG})"
# The NetworkPolicy rules of docs/install.md (host mode: ipBlock peers for
# 169.254.20.10 and the kube-dns ClusterIP) need a policy engine; the
# bridge CNI plugin is none, and none runs here.
log "NetworkPolicy: not checked: this cluster's CNI (Debian's bridge plugin) enforces no NetworkPolicy and no policy engine runs on it; the policy check runs on Cilium (scripts/cilium-e2e.sh)"
IMAGE=$(scripts/image.sh nodedns | tail -n 1)
CLIENT=$(scripts/image.sh client | tail -n 1)
CENTRAL=$(scripts/image.sh coredns | tail -n 1)
ok "images ${IMAGE}, ${CLIENT} and ${CENTRAL} imported"
export NODEDNS_E2E_IMAGE_NODEDNS=$IMAGE NODEDNS_E2E_IMAGE_CLIENT=$CLIENT NODEDNS_E2E_IMAGE_COREDNS=$CENTRAL

# ------------------------------------------------------------------ steps 1-6
tests='TestDaemonSet|TestLookups|TestKubeDNSClusterIP|TestRollouts|TestStatsProbesMetrics|TestDocsCommands|TestAgentDeath'
[[ ${E2E_DEATH_COMPARE:-0} == 1 ]] && tests+='|TestAgentDeathCompare'
tests+='|TestDelete'
step "steps 1-6: go test -tags e2e -run '^(${tests})$' ./e2e/"
# -failfast: the steps build on each other; the first failure ends the run.
if ! go test -tags e2e -count=1 -v -failfast -timeout 40m -run "^(${tests})\$" ./e2e/ 2>&1 | tee "${work}/go-test.log" >&2; then
	log "failed: $(grep -E -- '--- FAIL' "${work}/go-test.log" | sed 's/^ *//' | paste -sd ';' -)"
	fail "go test failed (the failing check's message above, under its step; the first failed step ends the run)"
fi
ok "steps 1-6 passed"
failed=0
