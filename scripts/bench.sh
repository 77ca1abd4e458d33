#!/usr/bin/env bash
# Side-by-side DNS benchmark on loopback: nodedns against unbound and dnsmasq
# (Debian's packages), each a caching forwarder to the project's own test
# upstream, under dnsperf. Rerunnable; every process it starts is stopped on
# exit, and every dnsperf run is bounded by -l.
#
#   scripts/bench.sh [-l SECONDS] [-r ROUNDS] [-Q QPS] [-o FILE] [-s SERVERS]
#
# For each workload (external cache hit, cached NXDOMAIN) and each server,
# in rounds A B A B: maximum QPS (dnsperf unthrottled), then a fixed-rate
# run at -Q qps (default 20000) for p50/p99 latency and the server's CPU per
# query (utime+stime from /proc over the queries answered), and its RSS.
# Prints one table per workload and, with -o, appends it to FILE with the
# machine's description.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=10 rounds=2 qps=20000 out="" servers="nodedns unbound dnsmasq"
while getopts "l:r:Q:o:s:" opt; do
  case $opt in
    l) secs=$OPTARG ;; r) rounds=$OPTARG ;; Q) qps=$OPTARG ;; o) out=$OPTARG ;; s) servers=$OPTARG ;;
    *) echo "usage: $0 [-l secs] [-r rounds] [-Q qps] [-o file] [-s 'nodedns unbound dnsmasq nodedns-poller']" >&2; exit 2 ;;
  esac
done

scripts/deps.sh
work=$(mktemp -d /tmp/nodedns-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/nodedns" ./cmd/nodedns
go build -o "$work/testupstream" ./internal/dnstest/testupstream

UP=127.0.0.1:5300
declare -A addr=([nodedns]=127.0.0.2 [unbound]=127.0.0.3 [dnsmasq]=127.0.0.4 [nodedns-poller]=127.0.0.5)
declare -A pid
PORT=5353

"$work/testupstream" -listen $UP -ttl 3600 -for 2h >"$work/upstream.log" 2>&1 &
pids+=($!)

start_nodedns() {
  "$work/nodedns" serve --listen "${addr[nodedns]}:$PORT" --upstream $UP --admin 127.0.0.1:9299 \
    --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn >"$work/nodedns.log" 2>&1 &
  pid[nodedns]=$!; pids+=($!)
}
# nodedns-poller: the same agent reading UDP through the Go netpoller
# instead of its thread readers, for A/B figures.
start_nodedns-poller() {
  "$work/nodedns" serve --listen "${addr[nodedns-poller]}:$PORT" --upstream $UP --admin "" --udp-readers poller \
    --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn >"$work/nodedns-poller.log" 2>&1 &
  pid[nodedns-poller]=$!; pids+=($!)
}
start_unbound() {
  cat >"$work/unbound.conf" <<CONF
server:
  interface: ${addr[unbound]}@$PORT
  port: $PORT
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "$work"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  num-threads: 2
  so-reuseport: yes
  access-control: 127.0.0.0/8 allow
  do-not-query-localhost: no
  module-config: "iterator"
  msg-cache-size: 64m
  rrset-cache-size: 128m
  outgoing-range: 1024
  num-queries-per-thread: 1024
  do-ip6: no
forward-zone:
  name: "."
  forward-addr: ${UP/:/@}
CONF
  unbound -d -c "$work/unbound.conf" >"$work/unbound.log" 2>&1 &
  pid[unbound]=$!; pids+=($!)
}
start_dnsmasq() {
  dnsmasq -k --no-resolv --no-hosts --server="${UP/:/#}" --listen-address="${addr[dnsmasq]}" --bind-interfaces \
    --port=$PORT --cache-size=10000 --dns-forward-max=1000 -u root --pid-file="$work/dnsmasq.pid" \
    --log-facility="$work/dnsmasq.log" >"$work/dnsmasq.out" 2>&1 &
  pid[dnsmasq]=$!; pids+=($!)
}

for s in $servers; do "start_$s"; done
sleep 1
for s in $servers; do
  dig +time=2 +tries=3 @"${addr[$s]}" -p $PORT warm.example.test A +short >/dev/null || { echo "bench: $s does not answer" >&2; cat "$work/$s".* >&2 || true; exit 1; }
done

# Query files: 1000 names x A/AAAA (hits once warm); 1000 NXDOMAIN names.
for i in $(seq 1 1000); do echo "host$i.example.test A"; echo "host$i.example.test AAAA"; done >"$work/hit.txt"
for i in $(seq 1 2000); do echo "nx$i.example.test A"; done >"$work/nx.txt"

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss_kb() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
tck=$(getconf CLK_TCK)

# maxqps SERVER FILE -> prints QPS
maxqps() {
  dnsperf -s "${addr[$1]}" -p $PORT -d "$2" -l "$secs" -c 8 -T 2 -q 500 2>/dev/null |
    awk '/Queries per second/{print int($4)}'
}
# fixed SERVER FILE -> prints "p50_us p99_us cpu_us_per_query lost"
fixed() {
  local before after
  before=$(cpu_ticks "${pid[$1]}")
  dnsperf -s "${addr[$1]}" -p $PORT -d "$2" -l "$secs" -c 4 -T 1 -Q "$qps" -v 2>/dev/null >"$work/fixed.out"
  after=$(cpu_ticks "${pid[$1]}")
  local done lost
  done=$(awk '/Queries completed/{print $3}' "$work/fixed.out")
  lost=$(awk '/Queries lost/{print $3}' "$work/fixed.out")
  awk '/^> /{printf "%.0f\n", $NF * 1e6}' "$work/fixed.out" | sort -n >"$work/lat.txt"
  awk -v cpu=$((after - before)) -v tck="$tck" -v done="$done" -v lost="$lost" '
    { lat[NR] = $1 }
    END {
      p50 = lat[int(NR * 0.50) + 1]; p99 = lat[int(NR * 0.99) + 1]
      printf "%d %d %.1f %d\n", p50, p99, (done > 0 ? cpu / tck * 1e6 / done : 0), lost
    }' "$work/lat.txt"
}

declare -A best_q sum_q n_q res_fixed
table=""
for wl in hit nx; do
  file="$work/$wl.txt"
  # Warm every cache with the whole file.
  for s in $servers; do dnsperf -s "${addr[$s]}" -p $PORT -d "$file" -n 1 -q 100 >/dev/null 2>&1; done
  for s in $servers; do sum_q[$s]=0; n_q[$s]=0; done
  for r in $(seq 1 "$rounds"); do
    for s in $servers; do
      q=$(maxqps "$s" "$file"); sum_q[$s]=$((sum_q[$s] + q)); n_q[$s]=$((n_q[$s] + 1))
      echo "  $wl round $r $s: $q qps" >&2
    done
  done
  for s in $servers; do res_fixed[$s]=$(fixed "$s" "$file"); done
  best=0
  for s in $servers; do best_q[$s]=$((sum_q[$s] / n_q[$s])); ((best_q[$s] > best)) && best=${best_q[$s]}; done
  table+=$'\n'"workload: $wl ($(wc -l <"$file") names, cache warm; max QPS = mean of $rounds unthrottled ${secs}s runs, A B A B; latency/CPU at $qps QPS)"$'\n'
  table+="| server | max QPS | vs best | p50 µs | p99 µs | CPU µs/query | lost | RSS MiB |"$'\n'
  table+="|---|---|---|---|---|---|---|---|"$'\n'
  for s in $servers; do
    read -r p50 p99 cpu lost <<<"${res_fixed[$s]}"
    rss=$(rss_kb "${pid[$s]}")
    table+=$(printf "| %s | %d | %.2f | %s | %s | %s | %s | %.1f |" "$s" "${best_q[$s]}" \
      "$(awk -v a="${best_q[$s]}" -v b="$best" 'BEGIN{print (b ? a / b : 0)}')" "$p50" "$p99" "$cpu" "$lost" \
      "$(awk -v k="$rss" 'BEGIN{print k / 1024}')")$'\n'
  done
done

echo "$table"
if [[ -n $out ]]; then
  {
    echo
    echo "## $(date -u +%Y-%m-%d) scripts/bench.sh -l $secs -r $rounds -Q $qps ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr), $(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//')."
    echo "dnsperf $(dnsperf -h 2>&1 | awk '/Version/{print $2}'), unbound $(unbound -V 2>/dev/null | awk '/Version/{print $2}'), dnsmasq $(dnsmasq -v | awk 'NR==1{print $3}'), $(go version | awk '{print $3}')."
    echo "Client and servers share the machine's cores; every server is a caching forwarder to the same local test upstream."
    echo "$table"
  } >>"$out"
  echo "appended to $out"
fi
