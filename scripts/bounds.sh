#!/usr/bin/env bash
# Bounds, since memory and goroutines must not grow with what clients
# ask: 1,000,000 distinct random names through the agent (a
# local test upstream answers everything), sampling RSS, cache size and
# goroutines every 50,000 queries; then the latency of well-behaved
# clients alone and while one client floods random names. Traffic stays on
# loopback; every process started here is stopped on exit.
#
#   scripts/bounds.sh [-n NAMES] [-c CACHE_SIZE] [-s FLOOD_SECS] [-f 'FLOOD_QPS...'] [-a 'EXTRA AGENT FLAGS']
#
# -f lists the flooder's rates, one flood phase each (0: open loop, as fast
# as it can send); -n 0 skips the sweep.
set -euo pipefail
cd "$(dirname "$0")/.."

n=1000000 cache=10000 fsecs=10 extra="" rates="5000 20000 0"
while getopts "n:c:s:a:f:" opt; do
  case $opt in
    n) n=$OPTARG ;; c) cache=$OPTARG ;; s) fsecs=$OPTARG ;; a) extra=$OPTARG ;; f) rates=$OPTARG ;;
    *) echo "usage: $0 [-n names] [-c cache-size] [-s flood-secs] [-a 'agent flags']" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d /tmp/nodedns-bounds.XXXXXX)
pids=()
# ours PID: PID is a running child of this shell (a pid that exited and was
# reaped may name another process by now, not ours to signal).
ours() {
  local st state parent
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  read -r state parent _ <<<"${st##*) }"
  [[ $state != [ZX] && $parent == "$$" ]]
}
# cleanup, on exit: every step runs (errexit off: under set -e a failed
# command would end the trap, and the script with its status), and the
# run's own status is kept; a temporary directory left behind is reported.
cleanup() {
  local rc=$? p
  set +e
  for p in "${pids[@]}"; do if ours "$p"; then kill "$p" 2>/dev/null; fi; done
  wait 2>/dev/null
  rm -rf "$work" || echo "bounds: could not remove $work (left behind)" >&2
  exit "$rc"
}
trap cleanup EXIT

go build -o "$work/nodedns" ./cmd/nodedns
go build -o "$work/testupstream" ./internal/dnstest/testupstream
go build -o "$work/stress" ./internal/dnstest/stress

UP=127.0.0.1:5311 DNS=127.0.0.5:5354 ADMIN=127.0.0.1:9298
"$work/testupstream" -listen $UP -ttl 3600 -for 1h >"$work/upstream.log" 2>&1 &
pids+=($!)
start_agent() {
  # shellcheck disable=SC2086
  "$work/nodedns" serve --listen $DNS --upstream $UP --admin $ADMIN --cache-size "$cache" \
    --loop-check=false --lameduck 0s --log-level warn $extra >"$work/nodedns.log" 2>&1 &
  agent=$!; pids+=($agent)
  for _ in $(seq 50); do
    dig +short +time=1 +tries=1 @"${DNS%:*}" -p "${DNS#*:}" up.example.test >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "agent did not start:"; cat "$work/nodedns.log"; exit 1
}

# stop_agent: the agent stopped at the end of a phase. One already gone
# died during the phase: that is named, with its log, and fails the run.
stop_agent() {
  if ! kill "$agent" 2>/dev/null; then
    echo "bounds: the agent (pid $agent) exited during the phase; its log:" >&2
    tail -n 20 "$work/nodedns.log" >&2
    exit 1
  fi
  wait "$agent" 2>/dev/null || true
}

if ((n > 0)); then
  echo "== sweep: $n distinct names, --cache-size $cache $extra"
  start_agent
  "$work/stress" -mode sweep -server $DNS -admin $ADMIN -pid "$agent" -n "$n" -sample $((n / 20))
  stop_agent
fi

for r in $rates; do
  echo
  echo "== flood fairness: flooder at ${r/#0/open loop} q/s, $fsecs s per phase $extra"
  start_agent
  "$work/stress" -mode flood -server $DNS -admin $ADMIN -pid "$agent" -secs "$fsecs" -flood-qps "$r"
  stop_agent
done
