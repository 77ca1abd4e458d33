#!/usr/bin/env bash
# Loads a real kube-apiserver (started on loopback by the integration
# harness) with 10,000 Services and 100,000 endpoint addresses, starts the
# nodedns agent against it, and reports the agent's RSS, its start-to-ready
# time and the Service-create-to-resolvable latency (p50/p99).
#
#   scripts/k8s-scale.sh                       the default load
#   SCALE_SERVICES=2000 scripts/k8s-scale.sh   a smaller one
#   SCALE_REPORT=/tmp/scale.txt ...            also write the figures there
#   SCALE_AGENT_ENVS="GOGC=50;GOMEMLIMIT=48MiB" also restart the agent with each
#                                              environment and report its memory
#
# Needs root (like the integration suite). Only loopback is used; the
# ClusterIPs and endpoint addresses are data.
set -euo pipefail
cd "$(dirname "$0")/.."

export NODEDNS_CACHE=${NODEDNS_CACHE:-/var/cache/nodedns}
NODEDNS_KUBE_APISERVER=$(scripts/kube-apiserver.sh | tail -n 1)
export NODEDNS_KUBE_APISERVER

go test -tags 'integration scale' -run '^TestClusterScale$' -count=1 -v -timeout 60m ./integration/ 2>&1 |
	tee /tmp/nodedns-k8s-scale.log |
	grep -E '^(=== RUN|--- |PASS|FAIL|ok)|scale_test.go|^ +(cluster zone|start to|agent RSS|Service create|from the create|/stats|with |agent without|index live)' || true
tail -n 1 /tmp/nodedns-k8s-scale.log | grep -q '^ok' || { echo "scale run failed (log: /tmp/nodedns-k8s-scale.log)"; exit 1; }
