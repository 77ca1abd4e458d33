# shellcheck shell=bash
# The pod workloads of scripts/bench.sh (pod, pod-shortcut, pod-hit), sourced
# by it once the control plane runs and the loopback workloads are done: it
# builds the pod (network namespace, link, counters, the Pod object) and
# starts the servers on its link, using bench.sh's variables (work, kc,
# kas_url, token, cacert, pids, cgroups...); benchdrive pod
# (internal/tools/benchdrive) then waits for them to answer and measures.
# See bench.sh's header for what it measures. Everything it creates
# (network namespace, veth, resolv.conf, cgroups, processes) is removed by
# bench.sh's cleanup.

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
# The pod's resolv.conf, as kubelet writes it (ip netns exec binds it over
# /etc/resolv.conf), is benchdrive's: it names the server measured.

# Counters: every UDP query and TCP connection the pod sends to a server.
for s in $pservers; do
  ip netns exec "$pod_ns" iptables -w -A OUTPUT -d "${paddr[$s]}" -p udp --dport 53 -j ACCEPT
  ip netns exec "$pod_ns" iptables -w -A OUTPUT -d "${paddr[$s]}" -p tcp --dport 53 --syn -j ACCEPT
done
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

# --- Measurements ---------------------------------------------------------

# The glibc loop (scripts/gai.c loop) for the pod workload; churn for -S.
gai_bin=""
if has "$pwork" pod; then
  if ! command -v cc >/dev/null; then
    echo "bench: installing a C compiler for the glibc lookup loop" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
  fi
  cc -O2 -pthread -o "$work/gai" scripts/gai.c
  gai_bin=$work/gai
fi
pod_args=(-w "$pwork" -netns "$pod_ns" -resolv "$netns_dir/resolv.conf" -search "$pod_search" -T "$gai_threads" -gai "$gai_bin")
[[ -z $cpu_limit ]] || pod_args+=(-C "$cpu_limit")
[[ -z $gmp_variants ]] || pod_args+=(-G "$gmp_variants")
if [[ -n $churn_rate ]]; then
  go build -o "$work/churn" ./internal/tools/churn
  pod_args+=(-S "$churn_rate" -churn "$work/churn" -kubeconfig "$kc")
fi
for s in $pservers; do pod_args+=(-server "$s@${paddr[$s]}:53/${ppid[$s]}${padmin[$s]:+/${padmin[$s]}}"); done
"${bd[@]}" pod "${bd_run[@]}" "${pod_args[@]}"
