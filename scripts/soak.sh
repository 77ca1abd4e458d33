#!/usr/bin/env bash
# Soak test, for what only time shows (leaks, drift, a rare crash): the
# agent for DURATION under a mixed workload from
# several pod network namespaces (cluster names of a real kube-apiserver,
# autopath, external names, NXDOMAIN, misses), with upstream faults on a
# schedule (stopped, SERVFAIL, silent) and Service churn in the API server.
# At the end it prints queries sent, answered, lost and SERVFAIL per kind,
# and the agent's RSS, threads, goroutines and cache size over time. It
# fails on a crash, on any lost or failed cluster-name answer, on a
# recovered panic, or on gross memory growth.
#
#   scripts/soak.sh DURATION [QPS_PER_CLIENT]     e.g. scripts/soak.sh 30m
#
# Needs root (network namespaces); installs what it needs like test.sh.
# Everything it starts stops with it: the test is bounded by DURATION.
# The report goes to stdout and to ${SOAK_REPORT:-/tmp/nodedns-soak.txt};
# the full log to /tmp/nodedns-soak.log.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:?usage: $0 DURATION [QPS_PER_CLIENT]}
export NODEDNS_SOAK=$duration
export SOAK_QPS=${2:-${SOAK_QPS:-100}}
export SOAK_REPORT=${SOAK_REPORT:-/tmp/nodedns-soak.txt}
export NODEDNS_CACHE=${NODEDNS_CACHE:-/var/cache/nodedns}

scripts/deps.sh
NODEDNS_KUBE_APISERVER=$(scripts/kube-apiserver.sh | tail -n 1)
export NODEDNS_KUBE_APISERVER
# The test's own bound: the soak plus time to start and stop everything.
secs=0 rest=$duration
while [[ $rest =~ ^([0-9]+)(h|m|s)(.*)$ ]]; do
  case ${BASH_REMATCH[2]} in h) mul=3600 ;; m) mul=60 ;; s) mul=1 ;; esac
  secs=$(( secs + BASH_REMATCH[1] * mul )); rest=${BASH_REMATCH[3]}
done
[[ -z $rest && $secs -gt 0 ]] || { echo "soak.sh: DURATION $duration: want e.g. 90s, 30m, 1h30m" >&2; exit 2; }
timeout=$(( secs + 600 ))s
rm -f "$SOAK_REPORT"
status=0
go test -tags integration -count=1 -timeout "$timeout" -run '^TestSoak$' -v ./integration/ >/tmp/nodedns-soak.log 2>&1 || status=$?
if [[ -s $SOAK_REPORT ]]; then
  cat "$SOAK_REPORT"
else
  tail -n 60 /tmp/nodedns-soak.log
fi
grep -E '^(--- |FAIL|ok|panic)|soak_test.go:[0-9]+: [^ ]' /tmp/nodedns-soak.log | grep -v '^\s*$' | tail -n 20 || true
exit $status
