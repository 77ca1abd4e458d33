# shellcheck shell=bash
# The pod workloads of scripts/bench.sh (pod, pod-shortcut, pod-hit), sourced
# by it once the control plane runs and the loopback workloads are done: it
# uses bench.sh's variables and helpers (work, kc, kas_url, token, cacert,
# pids, poll, stop_all, maxqps, fixed, outcome, run_in, not_ready, table...)
# and appends its tables to $table. See bench.sh's header for what it
# measures. Everything it creates (network namespace, veth, resolv.conf,
# cgroups, processes) is removed by bench.sh's cleanup.

POD_NET=169.254.125 # a /27 on the pod link: .2 is the pod, servers on the node side
POD_IP=$POD_NET.2 POD_IP6=fd00:125::2 POD_NODE=bench-node POD_NS_K8S=bench-0
pod_ns=nd-bench-pod-$$ pod_if=ndbp$$
netns_dir=/etc/netns/$pod_ns
# Each server's address on the pod link (port 53, as a pod's resolver
# needs); nodedns instances also listen on .+16, standing in for the
# kube-dns ClusterIP a node agent binds too.
declare -A paddr=([nodedns]=$POD_NET.1 [coredns]=$POD_NET.3 [node-cache]=$POD_NET.4 [nodedns-noautopath]=$POD_NET.5 [nodedns-b]=$POD_NET.6)
k=7
for g in $gmp_variants; do paddr[nodedns-g$g]=$POD_NET.$k; k=$((k + 1)); done
# Servers that walk the search list themselves get the first expansions.
walks() { [[ $1 == nodedns || $1 == nodedns-b || $1 == nodedns-g* || $1 == coredns ]]; }
is_nodedns() { [[ $1 == nodedns* ]]; }

# The node's own search domains follow the cluster's in a pod's
# resolv.conf; nodedns (--search default) and CoreDNS's autopath read them
# from /etc/resolv.conf too.
node_search=$(awk '$1 == "search" { for (i = 2; i <= NF; i++) printf "%s ", $i }' /etc/resolv.conf)
pod_search="$POD_NS_K8S.svc.cluster.local svc.cluster.local cluster.local${node_search:+ ${node_search% }}"

# --- The pod: network namespace, link, resolv.conf, counters, Pod object --

echo "bench: pod namespace $pod_ns ($POD_IP, Pod $POD_NS_K8S/bench-client on node $POD_NODE)" >&2
ip netns add "$pod_ns"
ip link add "$pod_if" type veth peer name eth0 netns "$pod_ns"
for s in $pservers; do
  ip addr add "${paddr[$s]}/27" dev "$pod_if"
  is_nodedns "$s" && ip addr add "$POD_NET.$((${paddr[$s]##*.} + 16))/27" dev "$pod_if"
done
ip link set "$pod_if" up
ip netns exec "$pod_ns" ip link set lo up
ip netns exec "$pod_ns" ip addr add "$POD_IP/27" dev eth0
# A ULA too, so that glibc's AI_ADDRCONFIG asks AAAA as a dual-stack pod does.
ip netns exec "$pod_ns" ip addr add "$POD_IP6/64" dev eth0 nodad
ip netns exec "$pod_ns" ip link set eth0 up
[[ -d /etc/netns ]] || netns_top=1
mkdir -p "$netns_dir"
# pod_resolv SERVER: the pod's resolv.conf, as kubelet writes it, naming
# SERVER (ip netns exec binds it over /etc/resolv.conf).
pod_resolv() { printf 'nameserver %s\nsearch %s\noptions ndots:5\n' "${paddr[$1]}" "$pod_search" >"$netns_dir/resolv.conf"; }
pod_resolv "$(awk '{print $1}' <<<"$pservers")"
# Counters: every UDP query and TCP connection the pod sends to a server.
for s in $pservers; do
  ip netns exec "$pod_ns" iptables -w -A OUTPUT -d "${paddr[$s]}" -p udp --dport 53 -j ACCEPT
  ip netns exec "$pod_ns" iptables -w -A OUTPUT -d "${paddr[$s]}" -p tcp --dport 53 --syn -j ACCEPT
done
# pod_counts SERVER -> "UDP TCP" packets/connections since the last zeroing.
pod_counts() {
  ip netns exec "$pod_ns" iptables -w -L OUTPUT -v -x -n | awk -v d="${paddr[$1]}" '
    $9 == d && / udp dpt:53/ { u = $1 }
    $9 == d && / tcp dpt:53/ { t = $1 }
    END { print u + 0, t + 0 }'
}

kas_send() { # METHOD PATH TYPE JSON
  curl -fsS --max-time 10 --cacert "$cacert" -H "Authorization: Bearer $token" -H "Content-Type: $3" -X "$1" \
    -d "$4" "$kas_url$2" >/dev/null
}
kas_send POST "/api/v1/namespaces/$POD_NS_K8S/pods" application/json \
  "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"bench-client\"},\"spec\":{\"nodeName\":\"$POD_NODE\",\"containers\":[{\"name\":\"c\",\"image\":\"registry.invalid/none:0\"}]}}"
kas_send PATCH "/api/v1/namespaces/$POD_NS_K8S/pods/bench-client/status" application/merge-patch+json \
  "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$POD_IP\",\"podIPs\":[{\"ip\":\"$POD_IP\"},{\"ip\":\"$POD_IP6\"}]}}"

# --- CPU limits (-C) ------------------------------------------------------

# cg_wrap NAME: sets wrap to the command prefix that starts a server in a
# CPU cgroup of its own limited to $cpu_limit cores (empty without -C).
# The server joins the cgroup before it starts: the Go runtime reads its
# limit at start.
wrap=()
cg_wrap() {
  wrap=()
  [[ -n $cpu_limit ]] || return 0
  local quota dir
  quota=$(awk -v c="$cpu_limit" 'BEGIN { printf "%d", c * 100000 }')
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    dir=/sys/fs/cgroup/nodedns-bench-$$-$1
    mkdir "$dir" && cgroups+=("$dir")
    echo "$quota 100000" >"$dir/cpu.max"
  else
    dir=/sys/fs/cgroup/cpu/nodedns-bench-$$-$1
    mkdir "$dir" && cgroups+=("$dir")
    echo 100000 >"$dir/cpu.cfs_period_us"
    echo "$quota" >"$dir/cpu.cfs_quota_us"
  fi
  # shellcheck disable=SC2016 # expanded by the inner shell
  wrap=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$dir")
}

# --- Servers ----------------------------------------------------------------

read -r -a admin_ports <<<"$(free_ports "$(wc -w <<<"$pservers")")"
declare -A padmin
# start_pod_nodedns NAME ARGS...: a nodedns on the pod link, watching the
# API server for this node's pods.
start_pod_nodedns() {
  local s=$1 a=${paddr[$1]} bin=$work/nodedns
  shift
  [[ $s == nodedns-b ]] && bin=$NODEDNS_B
  padmin[$s]=127.0.0.1:${admin_ports[0]}
  admin_ports=("${admin_ports[@]:1}")
  cg_wrap "$s"
  "${wrap[@]}" "$bin" serve --listen "$a:53,$POD_NET.$((${a##*.} + 16)):53" --upstream $UP \
    --admin "${padmin[$s]}" --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn \
    --kubeconfig "$kc" --node-name $POD_NODE "$@" >"$work/$s.log" 2>&1 &
  ppid[$s]=$!
  pids+=($!)
}
start_pod_coredns() {
  cat >"$work/Corefile.pod" <<CONF
.:53 {
  bind ${paddr[coredns]}
  autopath @kubernetes
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $kc bench
    pods verified
    fallthrough in-addr.arpa ip6.arpa
    ttl 5
  }
  cache 30
  forward . $UP
}
CONF
  cg_wrap coredns
  "${wrap[@]}" "$coredns_bin" -conf "$work/Corefile.pod" -quiet >"$work/coredns.log" 2>&1 &
  ppid[coredns]=$!
  pids+=($!)
}
# node-cache: NodeLocal DNSCache's Corefile (cluster zones cached and sent
# to the central DNS over TCP; everything else cached and sent upstream),
# with the central CoreDNS (kubernetes + cache, kubeadm's defaults but TTL
# 5 s as the other servers here) on loopback: not measured, a hop away on a
# real node.
start_pod_node-cache() {
  cat >"$work/Corefile.central" <<CONF
.:5353 {
  bind 127.0.0.10
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $kc bench
    pods insecure
    fallthrough in-addr.arpa ip6.arpa
    ttl 5
  }
  cache 30
  forward . $UP
}
CONF
  "$coredns_bin" -conf "$work/Corefile.central" -quiet >"$work/central-coredns.log" 2>&1 &
  pids+=($!)
  cat >"$work/Corefile.node-cache" <<CONF
cluster.local:53 {
  bind ${paddr[node-cache]}
  cache {
    success 9984 30
    denial 9984 5
  }
  forward . 127.0.0.10:5353 {
    force_tcp
  }
}
in-addr.arpa:53 ip6.arpa:53 {
  bind ${paddr[node-cache]}
  cache 30
  forward . 127.0.0.10:5353 {
    force_tcp
  }
}
.:53 {
  bind ${paddr[node-cache]}
  cache 30
  forward . $UP
}
CONF
  cg_wrap node-cache
  "${wrap[@]}" "$coredns_bin" -conf "$work/Corefile.node-cache" -quiet >"$work/node-cache.log" 2>&1 &
  ppid[node-cache]=$!
  pids+=($!)
}

for s in $pservers; do
  # shellcheck disable=SC2086 # NODEDNS_B_ARGS: words on purpose
  case $s in
    nodedns) start_pod_nodedns nodedns ;;
    nodedns-b) start_pod_nodedns nodedns-b ${NODEDNS_B_ARGS:-} ;;
    nodedns-noautopath) start_pod_nodedns nodedns-noautopath --autopath=false ;;
    nodedns-g*) start_pod_nodedns "$s" --gomaxprocs "${s#nodedns-g}" ;;
    coredns) start_pod_coredns ;;
    node-cache) start_pod_node-cache ;;
  esac
done

# --- Names ------------------------------------------------------------------

# The pod's lookups, as an application writes them: 1000 external names,
# the Services of its own namespace by short name, the others as
# <svc>.<ns>. For each, the first expansion (what an autopath server
# answers) and the whole walk of the client (every name it asks until one
# exists), from the search list above.
ext_lookups=() svc_lookups=()
for i in $(seq 1 1000); do ext_lookups+=("host$i.example.test"); done
for ((i = 0; i < nsvc; i++)); do
  ns=$(svc_ns "$i")
  if [[ $ns == "$POD_NS_K8S" ]]; then svc_lookups+=("svc-$i"); else svc_lookups+=("svc-$i.$ns"); fi
done
# walk NAME: the names the client asks, in order, until one exists.
walk() {
  local n=$1 d
  if [[ $n == host* ]]; then
    for d in $pod_search; do echo "$n.$d"; done
    echo "$n"
  elif [[ $n == *.* ]]; then
    echo "$n.$POD_NS_K8S.svc.cluster.local"
    echo "$n.svc.cluster.local"
  else
    echo "$n.$POD_NS_K8S.svc.cluster.local"
  fi
}
both() { awk '{ print $1, "A"; print $1, "AAAA" }'; }
# The first expansion, whatever the name (no `walk | head`: SIGPIPE).
first() { echo "$1.$POD_NS_K8S.svc.cluster.local"; }
{
  for n in "${ext_lookups[@]}" "${svc_lookups[@]}"; do first "$n"; done | both >"$work/pod.txt"
  for n in "${ext_lookups[@]}" "${svc_lookups[@]}"; do walk "$n"; done | both >"$work/pod-walk.txt"
  for n in "${ext_lookups[@]}"; do first "$n"; done | both >"$work/pod-shortcut.txt"
  for n in "${ext_lookups[@]}"; do walk "$n"; done | both >"$work/pod-shortcut-walk.txt"
  printf '%s\n' "${ext_lookups[@]}" | both >"$work/pod-hit.txt"
  cp "$work/pod-hit.txt" "$work/pod-hit-walk.txt"
  printf '%s\n' "${ext_lookups[@]}" "${svc_lookups[@]}" >"$work/glibc.txt"
}
declare -A lookups=([pod]=$((${#ext_lookups[@]} + ${#svc_lookups[@]})) [pod-shortcut]=${#ext_lookups[@]} [pod-hit]=${#ext_lookups[@]})
# podfile WORKLOAD SERVER: the query file SERVER gets.
podfile() { if walks "$2"; then echo "$work/$1.txt"; else echo "$work/$1-walk.txt"; fi; }

# --- Ready ------------------------------------------------------------------

run_in=(ip netns exec "$pod_ns")
pod_answers() { [[ $(outcome "$1" 53 "$2" A) == "NOERROR +" ]]; }
other_svc=$(printf '%s\n' "${svc_lookups[@]}" | awk '/\./ && !f { print; f = 1 }')
for s in $pservers; do
  # Synced, and (for the walkers) knowing the pod: the first expansion of
  # an external name and of another namespace's Service answer.
  if walks "$s"; then
    probes="host1.example.test.$POD_NS_K8S.svc.cluster.local $other_svc.$POD_NS_K8S.svc.cluster.local svc-0.$POD_NS_K8S.svc.cluster.local"
  else
    probes="host1.example.test $other_svc.svc.cluster.local svc-0.$POD_NS_K8S.svc.cluster.local"
  fi
  for n in $probes; do
    if ! poll 90 pod_answers "${paddr[$s]}" "$n"; then
      not_ready "$s" "$n A from the pod within 90 s (got: $(outcome "${paddr[$s]}" 53 "$n" A))"
      break
    fi
  done
done

# The GOMAXPROCS each nodedns runs with, from its /metrics.
declare -A gmp
for s in $pservers; do
  is_nodedns "$s" || continue
  gmp[$s]=$(curl -fsS --max-time 5 "http://${padmin[$s]}/metrics" 2>/dev/null | awk '/^go_sched_gomaxprocs_threads /{print $2}')
done

# --- Informer event storm (-S) ----------------------------------------------

churn_pid=""
if [[ -n $churn_rate ]]; then
  go build -o "$work/churn" ./internal/tools/churn
  "$work/churn" -kubeconfig "$kc" -rate "$churn_rate" -keep 100 -for 2h >"$work/churn.log" 2>&1 &
  churn_pid=$!
  pids+=($!)
  sleep 3
fi

# --- dnsperf ----------------------------------------------------------------

pcaption() {
  case $1 in
    pod) echo "what a pod of $POD_NS_K8S sends for ${lookups[pod]} lookups (1000 external names, ${#svc_lookups[@]} Services by short name or <svc>.<ns>), A and AAAA" ;;
    pod-shortcut) echo "the first search-path expansion of 1000 external names from the pod, A and AAAA: search-path shortcuts" ;;
    pod-hit) echo "the same 1000 external names asked directly from the pod, A and AAAA: plain cache hits" ;;
  esac
}
declare -A pqpl fmt_q fmt_cpu fmt_p99
for wl in $pwork; do
  # Warm: twice through the file (a walker builds its shortcut on the
  # second query of a name), with the pod's counters zeroed: the queries
  # per lookup are counted on the wire, as the glibc rows' are, over the
  # 2 x lookups of the two passes.
  for s in $pservers; do
    ip netns exec "$pod_ns" iptables -w -Z OUTPUT
    "${run_in[@]}" dnsperf -s "${paddr[$s]}" -p 53 -d "$(podfile "$wl" "$s")" -n 2 -q 100 >/dev/null 2>&1
    read -r udp _ <<<"$(pod_counts "$s")"
    ((udp > 0)) || { echo "bench: no query from the pod to $s counted on the wire (iptables OUTPUT counters)" >&2; exit 1; }
    pqpl[$s]=$(awk -v q="$udp" -v l="${lookups[$wl]}" 'BEGIN { printf "%.2f", q / (2 * l) }')
    echo "  $wl $s: $udp queries on the wire for 2 x ${lookups[$wl]} lookups: ${pqpl[$s]} per lookup" >&2
  done
  for s in $pservers; do
    for k in qps lps p50 p99 cpu cpul rss; do acc[$s.$k]=""; done
    acc[$s.lost]=0
  done
  for r in $(seq 1 "$rounds"); do
    for s in $pservers; do
      q=$(maxqps "${paddr[$s]}" 53 "$(podfile "$wl" "$s")")
      read -r p50 p99 cpu lost <<<"$(fixed "${ppid[$s]}" "${paddr[$s]}" 53 "$(podfile "$wl" "$s")")"
      acc[$s.qps]+=" ${q:-0}" acc[$s.p50]+=" $p50" acc[$s.p99]+=" $p99" acc[$s.cpu]+=" $cpu"
      acc[$s.lps]+=" $(awk -v q="${q:-0}" -v p="${pqpl[$s]}" 'BEGIN { printf "%d", q / p }')"
      acc[$s.cpul]+=" $(awk -v c="$cpu" -v p="${pqpl[$s]}" 'BEGIN { printf "%.1f", c * p }')"
      acc[$s.rss]+=" $(mib "$(rss_kb "${ppid[$s]}")")" acc[$s.lost]=$((acc[$s.lost] + ${lost:-0}))
      echo "  $wl round $r $s: $q qps; at $qps QPS: p50 $p50 µs, p99 $p99 µs, $cpu CPU µs/query" >&2
    done
  done
  best=0
  for s in $pservers; do m=$(mean "${acc[$s.lps]}"); ((m > best)) && best=$m; done
  table+=$'\n'"workload: $wl (from the pod's network namespace: $(pcaption "$wl"); cache warm; $rounds_note; queries/lookup: what the client sent this server per lookup, A and AAAA, counted on the wire over two passes of the file${cpu_limit:+; every server limited to $cpu_limit CPU}${churn_rate:+; $churn_rate Services/s created and deleted meanwhile})"$'\n'
  table+="| server | queries/lookup | max QPS | lookups/s | vs best | p50 µs | p99 µs | CPU µs/query | CPU µs/lookup | lost | RSS MiB | GOMAXPROCS |"$'\n'
  table+="|---|---|---|---|---|---|---|---|---|---|---|---|"$'\n'
  for s in $pservers; do
    fmt_q[$wl.$s]=$(spread %d "${acc[$s.qps]}") fmt_cpu[$wl.$s]=$(spread %.1f "${acc[$s.cpu]}") fmt_p99[$wl.$s]=$(spread %d "${acc[$s.p99]}")
    table+=$(printf "| %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s |" "$s" "${pqpl[$s]}" "${fmt_q[$wl.$s]}" \
      "$(spread %d "${acc[$s.lps]}")" "$(awk -v a="$(mean "${acc[$s.lps]}")" -v b="$best" 'BEGIN{print (b ? a / b : 0)}')" \
      "$(spread %d "${acc[$s.p50]}")" "${fmt_p99[$wl.$s]}" "${fmt_cpu[$wl.$s]}" "$(spread %.1f "${acc[$s.cpul]}")" \
      "${acc[$s.lost]}" "$(spread %.1f "${acc[$s.rss]}")" "${gmp[$s]:--}")$'\n'
  done
done

# The targets of the search-path shortcut: its max QPS against a plain
# cache hit's, and its CPU per query at -Q against a hit's. Single runs on
# a shared 2-core machine swing by 20 % between identical servers, so for
# these ratios each walking server (not the -G variants) gets its own
# paired runs: max(rounds, 3) pairs of shortcut then hit, back to back on
# the same warm server, and the ratio of the means.
if has "$pwork" pod-shortcut && has "$pwork" pod-hit; then
  pairs=$((rounds > 3 ? rounds : 3))
  table+=$'\n'"Search-path shortcut (pod-shortcut) against a plain cache hit (pod-hit) on the same server: $pairs pairs of runs back to back (shortcut, hit; ${secs}s each, unthrottled for max QPS, at $qps QPS for CPU), means:"$'\n'
  table+="| server | max QPS shortcut / hit | ratio | CPU µs/query shortcut / hit | ratio | per pair (QPS ratio, CPU ratio) |"$'\n'"|---|---|---|---|---|---|"$'\n'
  for s in $pservers; do
    walks "$s" && [[ $s != nodedns-g* ]] || continue
    qs=0 qh=0 cs=0 ch=0 each=""
    for r in $(seq 1 "$pairs"); do
      a=$(maxqps "${paddr[$s]}" 53 "$work/pod-shortcut.txt") b=$(maxqps "${paddr[$s]}" 53 "$work/pod-hit.txt")
      read -r _ _ ca _ <<<"$(fixed "${ppid[$s]}" "${paddr[$s]}" 53 "$work/pod-shortcut.txt")"
      read -r _ _ cb _ <<<"$(fixed "${ppid[$s]}" "${paddr[$s]}" 53 "$work/pod-hit.txt")"
      echo "  pair $r $s: shortcut $a qps $ca µs/query, hit $b qps $cb µs/query" >&2
      qs=$((qs + ${a:-0})) qh=$((qh + ${b:-0}))
      cs=$(awk -v x="$cs" -v y="$ca" 'BEGIN { print x + y }') ch=$(awk -v x="$ch" -v y="$cb" 'BEGIN { print x + y }')
      each+=$(awk -v a="$a" -v b="$b" -v c="$ca" -v d="$cb" 'BEGIN { printf "%s%.2f, %.2f", "", (b ? a / b : 0), (d ? c / d : 0) }')"; "
    done
    table+=$(awk -v s="$s" -v n="$pairs" -v qs="$qs" -v qh="$qh" -v cs="$cs" -v ch="$ch" -v e="${each%; }" \
      'BEGIN { printf "| %s | %d / %d | %.2f | %.1f / %.1f | %.2f | %s |", s, qs / n, qh / n, (qh ? qs / qh : 0), cs / n, ch / n, (ch ? cs / ch : 0), e }')$'\n'
  done
fi

# --- glibc ------------------------------------------------------------------

# gfmt_*: the glibc figures as printed, for the GOMAXPROCS table.
declare -A gacc gfmt_lps gfmt_cpu

if has "$pwork" pod; then
  if ! command -v cc >/dev/null; then
    echo "bench: installing a C compiler for the glibc lookup loop" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
  fi
  cc -O2 -pthread -o "$work/gailoop" scripts/gai.c
  gtable="| server | lookups/s | vs best | p50 µs/lookup | p99 µs/lookup | queries/lookup | round trips/lookup | TCP conns | failed | server CPU µs/lookup |"$'\n'
  gtable+="|---|---|---|---|---|---|---|---|---|---|"$'\n'
  # Warm each server (a walker's shortcuts) once, then the rounds, the
  # servers taking turns, each measured with the counters zeroed.
  for s in $pservers; do
    pod_resolv "$s"
    "${run_in[@]}" "$work/gailoop" loop "$gai_threads" 3 "$work/glibc.txt" >/dev/null
    for k in lps p50 p99 qpl rt cpu; do gacc[$s.$k]=""; done
    gacc[$s.tcp]=0 gacc[$s.failed]=0
  done
  for r in $(seq 1 "$rounds"); do
    for s in $pservers; do
      pod_resolv "$s"
      ip netns exec "$pod_ns" iptables -w -Z OUTPUT
      before=$(cpu_ticks "${ppid[$s]}")
      line=$("${run_in[@]}" "$work/gailoop" loop "$gai_threads" "$secs" "$work/glibc.txt")
      after=$(cpu_ticks "${ppid[$s]}")
      read -r udp tcp <<<"$(pod_counts "$s")"
      echo "  glibc round $r $s: $line; $udp UDP queries, $tcp TCP connections" >&2
      read -r lps p50 p99 qpl tcp failed cpu <<<"$(awk -v u="$udp" -v t="$tcp" -v cpu=$((after - before)) -v tck="$tck" '{
        for (i = 1; i < NF; i += 2) v[$i] = $(i + 1)
        n = v["lookups"]
        printf "%d %d %d %.2f %d %d %.1f", v["lookups_per_s"], v["p50_us"], v["p99_us"], (n ? u / n : 0), t, v["failed"], (n ? cpu / tck * 1e6 / n : 0)
      }' <<<"$line")"
      note_lost "glibc lookups (failed) $s round $r" "$failed"
      # glibc sends A and AAAA of a step together: a round trip is two queries.
      gacc[$s.lps]+=" $lps" gacc[$s.p50]+=" $p50" gacc[$s.p99]+=" $p99" gacc[$s.qpl]+=" $qpl" gacc[$s.cpu]+=" $cpu"
      gacc[$s.rt]+=" $(awk -v q="$qpl" 'BEGIN { printf "%.2f", q / 2 }')"
      gacc[$s.tcp]=$((gacc[$s.tcp] + tcp)) gacc[$s.failed]=$((gacc[$s.failed] + failed))
    done
  done
  gbest=0
  for s in $pservers; do m=$(mean "${gacc[$s.lps]}"); ((m > gbest)) && gbest=$m; done
  for s in $pservers; do
    gfmt_lps[$s]=$(spread %d "${gacc[$s.lps]}") gfmt_cpu[$s]=$(spread %.1f "${gacc[$s.cpu]}")
    gtable+=$(printf "| %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s |" "$s" "${gfmt_lps[$s]}" \
      "$(awk -v a="$(mean "${gacc[$s.lps]}")" -v b="$gbest" 'BEGIN{print (b ? a / b : 0)}')" \
      "$(spread %d "${gacc[$s.p50]}")" "$(spread %d "${gacc[$s.p99]}")" "$(spread %.2f "${gacc[$s.qpl]}")" \
      "$(spread %.2f "${gacc[$s.rt]}")" "${gacc[$s.tcp]}" "${gacc[$s.failed]}" "${gfmt_cpu[$s]}")$'\n'
  done
  table+=$'\n'"glibc: getaddrinfo (AF_UNSPEC, AI_ADDRCONFIG: A and AAAA) in a loop from $gai_threads threads inside the pod's namespace for ${secs}s over the ${lookups[pod]} names as the pod writes them (resolv.conf: search $pod_search; ndots:5), warmed 3 s; mean of $rounds rounds (min–max), the servers taking turns; queries/lookup counted on the wire; glibc sends a step's A and AAAA together, so round trips/lookup are half of them; TCP connections and failed lookups summed over the rounds; CPU of the server process only"$'\n'"$gtable"
fi

# --- GOMAXPROCS (-G) ----------------------------------------------------------

# nodedns with its default Ps and with each -G value, side by side: the
# pod workload's dnsperf figures (another pod workload's when pod was not
# asked for) and the glibc figures. One table per run; the run is named
# after the conditions (-S, -C), so that the tables of several runs read
# as one.
if [[ -n $gmp_variants ]]; then
  gwl=pod
  has "$pwork" pod || gwl=${pwork%% *}
  run=plain
  [[ -n $churn_rate ]] && run="storm (-S $churn_rate)"
  [[ -n $cpu_limit ]] && run="${churn_rate:+$run, }$cpu_limit-CPU limit (-C $cpu_limit)"
  table+=$'\n'"GOMAXPROCS: nodedns with its default Ps and with --gomaxprocs $gmp_variants; max QPS, CPU µs/query and p99 from dnsperf on the $gwl workload (unthrottled; at $qps QPS), glibc from $gai_threads threads of getaddrinfo$(has "$pwork" pod || echo " (not run: the glibc loop runs with the pod workload)"); mean of $rounds rounds (min–max); Ps as each agent's go_sched_gomaxprocs_threads reports them"$'\n'
  table+="| run | Ps | max QPS | CPU µs/query | p99 µs | glibc lookups/s | glibc CPU µs/lookup |"$'\n'"|---|---|---|---|---|---|---|"$'\n'
  for s in nodedns $(for g in $gmp_variants; do echo "nodedns-g$g"; done); do
    has "$pservers" "$s" || continue
    ps=${gmp[$s]:--}
    [[ $s == nodedns ]] && ps+=" (default)"
    table+=$(printf "| %s | %s | %s | %s | %s | %s | %s |" "$run" "$ps" "${fmt_q[$gwl.$s]:--}" "${fmt_cpu[$gwl.$s]:--}" \
      "${fmt_p99[$gwl.$s]:--}" "${gfmt_lps[$s]:--}" "${gfmt_cpu[$s]:--}")$'\n'
  done
fi

if [[ -n $churn_pid ]]; then
  stop_all 40 "$churn_pid"
  table+=$'\n'"Informer event storm meanwhile: $(head -n 1 "$work/churn.log")"$'\n'
fi
