#!/usr/bin/env bash
# A/B of two nodedns binaries on cache hits at fixed rates, with dnsmasq
# measured the same way for reference (the table "UDP readers" in
# RESULTS.md). Loopback only; everything started here stops on exit.
#
#   bench/ab-readers.sh OLD_BINARY NEW_BINARY
#
# e.g. git worktree add /tmp/old 4da78cc && (cd /tmp/old && go build -o /tmp/nodedns-old ./cmd/nodedns)
#      go build -o /tmp/nodedns-new ./cmd/nodedns && bench/ab-readers.sh /tmp/nodedns-old /tmp/nodedns-new
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: $0 OLD_BINARY NEW_BINARY} new=${2:?usage: $0 OLD_BINARY NEW_BINARY}
work=$(mktemp -d /tmp/nodedns-ab.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/testupstream" ./internal/dnstest/testupstream
UP=127.0.0.1:5312
"$work/testupstream" -listen $UP -ttl 3600 -for 1h >"$work/upstream.log" 2>&1 &
pids+=($!)
for i in $(seq 1 1000); do echo "host$i.example.test A"; echo "host$i.example.test AAAA"; done >"$work/hit.txt"
sleep 0.5
tck=$(getconf CLK_TCK)

# measure LABEL PID ADDR PORT RATE SECS MAX: one fixed-rate run (and a max-QPS run if MAX=1)
measure() {
  local label=$1 pid=$2 addr=$3 port=$4 rate=$5 secs=$6 max=$7 t0 t1 n mq=-
  dnsperf -s "$addr" -p "$port" -d "$work/hit.txt" -n 1 -q 100 >/dev/null 2>&1
  t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  dnsperf -s "$addr" -p "$port" -d "$work/hit.txt" -l "$secs" -c 4 -T 1 -Q "$rate" -v 2>/dev/null >"$work/fixed.out"
  t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  n=$(awk '/Queries completed/{print $3}' "$work/fixed.out")
  awk '/^> /{printf "%.0f\n", $NF * 1e6}' "$work/fixed.out" | sort -n >"$work/lat.txt"
  if ((max)); then
    mq=$(dnsperf -s "$addr" -p "$port" -d "$work/hit.txt" -l 10 -c 8 -T 2 -q 500 2>/dev/null | awk '/Queries per second/{print int($4)}')
  fi
  awk -v l="$label" -v c=$((t1 - t0)) -v tck="$tck" -v n="$n" -v mq="$mq" '{a[NR] = $1}
    END {printf "%-18s %8.1f us/q  p50 %6d us  p99 %6d us  max %s QPS\n", l, c / tck * 1e6 / n, a[int(NR*0.5)+1], a[int(NR*0.99)+1], mq}' "$work/lat.txt"
}
nodedns_run() { # LABEL BINARY RATE SECS MAX
  local port=$((20000 + RANDOM % 10000)) pid
  "$2" serve --listen "127.0.0.79:$port" --upstream $UP --admin "" --cache-size 100000 --loop-check=false \
    --lameduck 0s --log-level warn >"$work/nodedns.log" 2>&1 &
  pid=$!
  sleep 1
  measure "$1@$3" "$pid" 127.0.0.79 "$port" "$3" "$4" "$5"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
dnsmasq_run() { # RATE SECS
  local port=$((30000 + RANDOM % 2000)) pid
  dnsmasq -k --no-resolv --no-hosts --server="${UP/:/#}" --listen-address=127.0.0.80 --bind-interfaces \
    --port=$port --cache-size=10000 -u root --pid-file="$work/dnsmasq.pid" --log-facility="$work/dnsmasq.log" &
  pid=$!
  sleep 1
  measure "dnsmasq@$1" "$pid" 127.0.0.80 "$port" "$1" "$2" 0
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
for round in 1 2 3; do
  nodedns_run old "$old" 20000 10 1
  nodedns_run new "$new" 20000 10 1
  dnsmasq_run 20000 10
done
for rate in 1000 100; do
  for round in 1 2; do
    nodedns_run old "$old" $rate 20 0
    nodedns_run new "$new" $rate 20 0
    dnsmasq_run $rate 20
  done
done
