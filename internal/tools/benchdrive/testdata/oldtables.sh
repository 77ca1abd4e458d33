#!/usr/bin/env bash
# The old bench.sh's table code (copied from scripts/bench.sh and
# scripts/bench-pod.sh at cc3ee2c), fed fixed figures.
set -euo pipefail
has() { [[ " $1 " == *" $2 "* ]]; }
mean() { awk -v l="$1" 'BEGIN { n = split(l, v, " "); for (i = 1; i <= n; i++) s += v[i]; printf "%d\n", (n ? s / n : 0) }'; }
spread() {
  awk -v f="$1" -v l="$2" 'BEGIN {
    n = split(l, v, " ")
    if (n == 0) { print "-"; exit }
    lo = hi = v[1] + 0
    for (i = 1; i <= n; i++) { x = v[i] + 0; s += x; if (x < lo) lo = x; if (x > hi) hi = x }
    m = sprintf(f, s / n)
    if (n == 1) print m
    else printf "%s (%s–%s)\n", m, sprintf(f, lo), sprintf(f, hi)
  }'
}
secs=2 rounds=3 qps=2000 nsvc=100 NS_COUNT=5 lservers="nodedns unbound dnsmasq coredns"
caption() {
  local c peers="" x
  case $1 in
    hit) echo "external names, A and AAAA, from the cache" ;;
    nx) echo "NXDOMAIN external names, from the negative cache" ;;
    cluster)
      c="names of $nsvc Services in $NS_COUNT namespaces of a real kube-apiserver: A for each, SRV for every 10th and the headless ones, PTR for every 10th ClusterIP"
      if has "$lservers" nodedns || has "$lservers" nodedns-poller; then c+="; nodedns answers from its informer index"; fi
      for x in unbound dnsmasq; do has "$lservers" $x && peers+="${peers:+ and }$x"; done
      [[ -z $peers ]] || c+="; $peers forward cluster.local and 96.10.in-addr.arpa to a separate nodedns (as node-cache forwards to the central CoreDNS) and answer from their caches (TTL 5 s)"
      has "$lservers" coredns && c+="; coredns: kubernetes plugin + cache against the same API server"
      echo "$c"
      ;;
  esac
}
rounds_note="every figure the mean of $rounds rounds (min–max), the servers taking turns: max QPS unthrottled for ${secs}s, then latency/CPU at $qps QPS for ${secs}s; RSS after each round"
declare -A acc
acc[nodedns.qps]=" 51234 49876 50321" acc[nodedns.p50]=" 101 99 120" acc[nodedns.p99]=" 900 1200 1010" acc[nodedns.cpu]=" 12.3 11.9 12.8" acc[nodedns.rss]=" 30.1 30.4 30.4" acc[nodedns.lost]=0
acc[unbound.qps]=" 40000 41000 39999" acc[unbound.p50]=" 130 131 129" acc[unbound.p99]=" 2000 2100 1999" acc[unbound.cpu]=" 20.0 21.5 19.95" acc[unbound.rss]=" 80.0 80.2 80.3" acc[unbound.lost]=3
acc[dnsmasq.qps]=" 20001" acc[dnsmasq.p50]=" 150" acc[dnsmasq.p99]=" 3000" acc[dnsmasq.cpu]=" 33.3" acc[dnsmasq.rss]=" 5.5" acc[dnsmasq.lost]=0
acc[coredns.qps]=" 0 0 0" acc[coredns.p50]=" 0 0 0" acc[coredns.p99]=" 0 0 0" acc[coredns.cpu]=" 0.0 0.0 0.0" acc[coredns.rss]=" 60.0 61.0 62.0" acc[coredns.lost]=17
table=""
for wl in hit cluster; do
  best=0
  for s in $lservers; do m=$(mean "${acc[$s.qps]}"); ((m > best)) && best=$m; done
  n=2000; [[ $wl == cluster ]] && n=131
  table+=$'\n'"workload: $wl ($n names: $(caption "$wl"); cache warm; $rounds_note)"$'\n'
  table+="| server | max QPS | vs best | p50 µs | p99 µs | CPU µs/query | lost | RSS MiB |"$'\n'
  table+="|---|---|---|---|---|---|---|---|"$'\n'
  for s in $lservers; do
    table+=$(printf "| %s | %s | %.2f | %s | %s | %s | %s | %s |" "$s" "$(spread %d "${acc[$s.qps]}")" \
      "$(awk -v a="$(mean "${acc[$s.qps]}")" -v b="$best" 'BEGIN{print (b ? a / b : 0)}')" \
      "$(spread %d "${acc[$s.p50]}")" "$(spread %d "${acc[$s.p99]}")" "$(spread %.1f "${acc[$s.cpu]}")" "${acc[$s.lost]}" \
      "$(spread %.1f "${acc[$s.rss]}")")$'\n'
  done
done
table+=$'\n'"QPS per reader: $(spread %d "${acc[nodedns.qps]}") (nodedns-1r: one UDP reader, --udp-sockets 1 on one listen address, nodedns_server_udp_readers 1; max QPS on the hit workload, mean of $rounds unthrottled ${secs}s runs, min–max)."$'\n'
# pod
pservers="nodedns coredns node-cache nodedns-noautopath"
cpu_limit=1.5 churn_rate=50 POD_NS_K8S=bench-0
declare -A pqpl gmp lookups=([pod]=1100)
pqpl[nodedns]=1.00 pqpl[coredns]=1.00 pqpl[node-cache]=3.64 pqpl[nodedns-noautopath]=3.64
gmp[nodedns]=2 gmp[nodedns-noautopath]=2
for s in $pservers; do
  acc[$s.lps]="" acc[$s.cpul]=""
  for q in ${acc[nodedns.qps]}; do acc[$s.lps]+=" $(awk -v q="$q" -v p="${pqpl[$s]}" 'BEGIN { printf "%d", q / p }')"; done
  for c in ${acc[unbound.cpu]}; do acc[$s.cpul]+=" $(awk -v c="$c" -v p="${pqpl[$s]}" 'BEGIN { printf "%.1f", c * p }')"; done
  acc[$s.qps]=${acc[nodedns.qps]} acc[$s.p50]=${acc[unbound.p50]} acc[$s.p99]=${acc[unbound.p99]} acc[$s.cpu]=${acc[unbound.cpu]} acc[$s.rss]=${acc[unbound.rss]}
done
acc[node-cache.lost]=300
wl=pod
best=0
for s in $pservers; do m=$(mean "${acc[$s.lps]}"); ((m > best)) && best=$m; done
table+=$'\n'"workload: $wl (from the pod's network namespace: what a pod of $POD_NS_K8S sends for ${lookups[pod]} lookups (1000 external names, 100 Services by short name or <svc>.<ns>), A and AAAA; cache warm; $rounds_note; queries/lookup: what the client sent this server per lookup, A and AAAA, counted on the wire over two passes of the file${cpu_limit:+; every server limited to $cpu_limit CPU}${churn_rate:+; $churn_rate Services/s created and deleted meanwhile})"$'\n'
table+="| server | queries/lookup | max QPS | lookups/s | vs best | p50 µs | p99 µs | CPU µs/query | CPU µs/lookup | lost | RSS MiB | GOMAXPROCS |"$'\n'
table+="|---|---|---|---|---|---|---|---|---|---|---|---|"$'\n'
for s in $pservers; do
  table+=$(printf "| %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s |" "$s" "${pqpl[$s]}" "$(spread %d "${acc[$s.qps]}")" \
    "$(spread %d "${acc[$s.lps]}")" "$(awk -v a="$(mean "${acc[$s.lps]}")" -v b="$best" 'BEGIN{print (b ? a / b : 0)}')" \
    "$(spread %d "${acc[$s.p50]}")" "$(spread %d "${acc[$s.p99]}")" "$(spread %.1f "${acc[$s.cpu]}")" "$(spread %.1f "${acc[$s.cpul]}")" \
    "${acc[$s.lost]:-0}" "$(spread %.1f "${acc[$s.rss]}")" "${gmp[$s]:--}")$'\n'
done
# pairs
pairs=3
table+=$'\n'"Search-path shortcut (pod-shortcut) against a plain cache hit (pod-hit) on the same server: $pairs pairs of runs back to back (shortcut, hit; ${secs}s each, unthrottled for max QPS, at $qps QPS for CPU), means:"$'\n'
table+="| server | max QPS shortcut / hit | ratio | CPU µs/query shortcut / hit | ratio | per pair (QPS ratio, CPU ratio) |"$'\n'"|---|---|---|---|---|---|"$'\n'
for s in nodedns coredns; do
  qs=0 qh=0 cs=0 ch=0 each=""
  set -- 40001 45000 11.1 10.2  39000 44444 12.3 9.9  41234 0 10.0 0.0
  for r in 1 2 3; do
    a=$1 b=$2 ca=$3 cb=$4; shift 4
    qs=$((qs + ${a:-0})) qh=$((qh + ${b:-0}))
    cs=$(awk -v x="$cs" -v y="$ca" 'BEGIN { print x + y }') ch=$(awk -v x="$ch" -v y="$cb" 'BEGIN { print x + y }')
    each+=$(awk -v a="$a" -v b="$b" -v c="$ca" -v d="$cb" 'BEGIN { printf "%s%.2f, %.2f", "", (b ? a / b : 0), (d ? c / d : 0) }')"; "
  done
  table+=$(awk -v s="$s" -v n="$pairs" -v qs="$qs" -v qh="$qh" -v cs="$cs" -v ch="$ch" -v e="${each%; }" \
    'BEGIN { printf "| %s | %d / %d | %.2f | %.1f / %.1f | %.2f | %s |", s, qs / n, qh / n, (qh ? qs / qh : 0), cs / n, ch / n, (ch ? cs / ch : 0), e }')$'\n'
done
# glibc
declare -A gacc
gtable="| server | lookups/s | vs best | p50 µs/lookup | p99 µs/lookup | queries/lookup | round trips/lookup | TCP conns | failed | server CPU µs/lookup |"$'\n'
gtable+="|---|---|---|---|---|---|---|---|---|---|"$'\n'
for s in $pservers; do
  gacc[$s.lps]=" 3000 3100 2950" gacc[$s.p50]=" 500 510 490" gacc[$s.p99]=" 2000 2500 2100" gacc[$s.qpl]=" 1.00 1.02 0.98"
  gacc[$s.rt]=" 0.50 0.51 0.49" gacc[$s.cpu]=" 30.5 31.0 29.9" gacc[$s.tcp]=0 gacc[$s.failed]=0
done
gacc[node-cache.lps]=" 1000 1001 999" gacc[node-cache.tcp]=12 gacc[node-cache.failed]=2
gbest=0
for s in $pservers; do m=$(mean "${gacc[$s.lps]}"); ((m > gbest)) && gbest=$m; done
gai_threads=2 pod_search="bench-0.svc.cluster.local svc.cluster.local cluster.local"
for s in $pservers; do
  gtable+=$(printf "| %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s |" "$s" "$(spread %d "${gacc[$s.lps]}")" \
    "$(awk -v a="$(mean "${gacc[$s.lps]}")" -v b="$gbest" 'BEGIN{print (b ? a / b : 0)}')" \
    "$(spread %d "${gacc[$s.p50]}")" "$(spread %d "${gacc[$s.p99]}")" "$(spread %.2f "${gacc[$s.qpl]}")" \
    "$(spread %.2f "${gacc[$s.rt]}")" "${gacc[$s.tcp]}" "${gacc[$s.failed]}" "$(spread %.1f "${gacc[$s.cpu]}")")$'\n'
done
table+=$'\n'"glibc: getaddrinfo (AF_UNSPEC, AI_ADDRCONFIG: A and AAAA) in a loop from $gai_threads threads inside the pod's namespace for ${secs}s over the ${lookups[pod]} names as the pod writes them (resolv.conf: search $pod_search; ndots:5), warmed 3 s; mean of $rounds rounds (min–max), the servers taking turns; queries/lookup counted on the wire; glibc sends a step's A and AAAA together, so round trips/lookup are half of them; TCP connections and failed lookups summed over the rounds; CPU of the server process only"$'\n'"$gtable"
# gomaxprocs
gmp_variants="1 4" gwl=pod
run="storm (-S $churn_rate)"
run="${churn_rate:+$run, }$cpu_limit-CPU limit (-C $cpu_limit)"
table+=$'\n'"GOMAXPROCS: nodedns with its default Ps and with --gomaxprocs $gmp_variants; max QPS, CPU µs/query and p99 from dnsperf on the $gwl workload (unthrottled; at $qps QPS), glibc from $gai_threads threads of getaddrinfo; mean of $rounds rounds (min–max); Ps as each agent's go_sched_gomaxprocs_threads reports them"$'\n'
table+="| run | Ps | max QPS | CPU µs/query | p99 µs | glibc lookups/s | glibc CPU µs/lookup |"$'\n'"|---|---|---|---|---|---|---|"$'\n'
for s in nodedns nodedns-g1; do
  ps=${gmp[$s]:--}
  [[ $s == nodedns ]] && ps+=" (default)"
  table+=$(printf "| %s | %s | %s | %s | %s | %s | %s |" "$run" "$ps" "$(spread %d "${acc[$s.qps]:-}")" "$(spread %.1f "${acc[$s.cpu]:-}")" \
    "$(spread %d "${acc[$s.p99]:-}")" "$(spread %d "${gacc[$s.lps]:-}")" "$(spread %.1f "${gacc[$s.cpu]:-}")")$'\n'
done
table+=$'\n'"Informer event storm meanwhile: churn: created 100"$'\n'
# lost
printf '%s\n' "0 at 2000 QPS 127.0.0.2:5353 hit.txt" "12 unthrottled 127.0.0.3:5353 hit.txt" "? at 2000 QPS 127.0.0.3:5353 hit.txt" "2 glibc lookups (failed) node-cache round 1" >/tmp/oldgold-lost.txt
read -r lost_runs lost_total lost_unknown lost_over < <(awk '
    { n++ }
    $1 == "?" { u++; next }
    $2 == "unthrottled" { o += $1; next }
    { t += $1 }
    END { print n + 0, t + 0, u + 0, o + 0 }' /tmp/oldgold-lost.txt)
lost_line="Lost: $lost_total queries in the fixed-rate runs and glibc lookups"
((lost_unknown == 0)) || lost_line+=" ($lost_unknown runs printed no count)"
lost_line+="; $lost_over in the unthrottled runs (overload by design); $lost_runs runs in all"
table+=$'\n'"$lost_line."$'\n'
echo "$table"
