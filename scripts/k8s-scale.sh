#!/usr/bin/env bash
# The cluster zone at scale: loads a real kube-apiserver (started on
# loopback by the integration harness) with 10,000 Services and 100,000
# endpoint addresses, then measures DNS servers started against it.
#
#   scripts/k8s-scale.sh [start]   the agent's start: RSS, start to ready, the
#                                  LIST requests it costs the API server (and
#                                  which reached etcd), Service create to
#                                  resolvable (p50/p99)
#   scripts/k8s-scale.sh race      nodedns against CoreDNS 1.15's kubernetes
#                                  plugin, started the same way one after the
#                                  other: time until the last Service answers,
#                                  peak RSS (SCALE_RUNS runs, default 5)
#   scripts/k8s-scale.sh fleet     ten agents started at once: the LIST
#                                  requests that reach etcd, time to all ready
#   scripts/k8s-scale.sh all       the three on one loaded API server
#
#   SCALE_SERVICES=2000 ...        a smaller load (SCALE_ENDPOINTS per service, 10)
#   SCALE_RUNS=9 ... race          more runs; SCALE_AGENTS=20 ... fleet, more agents
#   SCALE_BASE_REV=main ...        also run nodedns built from that git revision
#                                  ("nodedns-base"): before and after on one load
#   SCALE_BASE_BIN=/path/nodedns   the same with a binary
#   SCALE_REPORT=/tmp/scale.txt    also append the figures there
#   SCALE_AGENT_ENVS="GOGC=50;GOMEMLIMIT=48MiB" (start) also restart the agent
#                                  with each environment and report its memory
#
# Needs root (like the integration suite). Only loopback is used; the
# ClusterIPs and endpoint addresses are data. Takes the CPU: run it on a
# quiet machine (the figures carry the load average).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-start}
case $mode in
start) run='^TestClusterScale$' ;;
race) run='^TestClusterScaleRace$' ;;
fleet) run='^TestClusterScaleFleet$' ;;
all) run='^TestClusterScale(Race|Fleet)?$' ;;
*)
	echo "usage: $0 [start|race|fleet|all]" >&2
	exit 2
	;;
esac

export NODEDNS_CACHE=${NODEDNS_CACHE:-/var/cache/nodedns}
NODEDNS_KUBE_APISERVER=$(scripts/kube-apiserver.sh | tail -n 1)
export NODEDNS_KUBE_APISERVER
if [[ $mode == race || $mode == all ]]; then
	NODEDNS_COREDNS=$(scripts/coredns.sh | tail -n 1)
	export NODEDNS_COREDNS
fi

tmp=$(mktemp -d)
# A temporary directory left behind is named by rm and does not fail the
# run: under set -e a failed command in the trap would exit with its status.
trap 'rm -rf "$tmp" || true' EXIT
if [[ -n ${SCALE_BASE_REV:-} ]]; then
	echo "k8s-scale: building nodedns at ${SCALE_BASE_REV} as nodedns-base" >&2
	git archive "$SCALE_BASE_REV" | tar -x -C "$tmp"
	(cd "$tmp" && go build -o "$tmp/nodedns-base" ./cmd/nodedns)
	export SCALE_BASE_BIN=$tmp/nodedns-base
fi

echo "k8s-scale: $mode at $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), before: $(uptime)"
log=/tmp/nodedns-k8s-scale.log
go test -tags 'integration scale' -run "$run" -count=1 -v -timeout 90m ./integration/ 2>&1 |
	tee "$log" |
	grep -E '^(=== RUN|--- |PASS|FAIL|ok)|scale_test.go|scalerace_test.go|^ +(cluster zone|start|API server|fleet|server|nodedns|coredns|agent RSS|Service create|from the create|/stats|with |agent without|index live|LIST|lists|through)' || true
echo "k8s-scale: after: $(uptime)"
tail -n 1 "$log" | grep -q '^ok' || {
	echo "scale run failed (log: $log)"
	exit 1
}
