#!/usr/bin/env bash
# Side-by-side DNS benchmark on loopback: nodedns against unbound and dnsmasq
# (Debian's packages) and optionally CoreDNS, each a caching forwarder to the
# project's own test upstream, under dnsperf; and, from a pod's network
# namespace, nodedns's search-path shortcuts against CoreDNS's autopath and
# the NodeLocal DNSCache arrangement. Rerunnable; every process it starts is
# stopped on exit, and every dnsperf run is bounded by -l. The run lives in a
# network namespace of its own (removed at the end): its loopback is not the
# host's, and it adds no link, rule or port to the host's namespace.
#
#   scripts/bench.sh [-l SECONDS] [-r ROUNDS] [-Q QPS] [-o FILE] [-s SERVERS]
#                    [-w WORKLOADS] [-n SERVICES] [-c] [-z] [-D] [-T THREADS]
#                    [-G 'GOMAXPROCS...'] [-C CPUS] [-S RATE] [-B BINARY]
#
#   -r  rounds (default 3): every figure is measured once per round, the
#       servers taking turns (A B A B), and printed as the mean with its
#       spread, "mean (min–max)"
#   -s  servers, any of: nodedns unbound dnsmasq nodedns-poller nodedns-1r
#       coredns node-cache (default "nodedns unbound dnsmasq"). nodedns-1r
#       is nodedns with one UDP reader (--udp-sockets 1, checked on its
#       /metrics): on the hit workload its max QPS is the figure "QPS per
#       reader", printed below the tables
#   -B  A/B against another build of nodedns (e.g. the last release's:
#       `git worktree add /tmp/old REV && go build -o /tmp/nodedns-old
#       ./cmd/nodedns` there): the server nodedns-b runs BINARY as nodedns
#       runs this tree's, on every workload nodedns is on (pod workloads
#       included), taking its turn in every round; add it to -s.
#       NODEDNS_B_ARGS adds flags to nodedns-b only (e.g. -B of this tree's
#       own build with NODEDNS_B_ARGS=--metrics-namespaces=0: a feature's
#       cost, paired)
#   -D  run on a dirty tree. Without it the run refuses to start when the
#       tree has changes to tracked files or untracked files outside the
#       ignored paths (git status; the -o FILE itself aside, which a
#       session's runs append to in turn): a figure belongs to a commit.
#       With it, the header written by -o says "dirty" after the commit
#   -w  workloads, any of: hit nx cluster pod pod-shortcut pod-hit
#       (default "hit nx cluster pod")
#   -n  Services created for the cluster and pod workloads (default 1000)
#   -c  add CoreDNS and, for the pod workloads, the node-cache arrangement
#       (scripts/coredns.sh: `go install` at a pinned version into
#       ${NODEDNS_CACHE:-/var/cache/nodedns}, built once). Like every
#       server asked for, they must build and answer: a failed build or a
#       server that does not answer ends the run with an error, never a
#       table without them
#   -z  no loss: the run fails when a fixed-rate dnsperf run (-Q) lost a
#       query or a glibc lookup failed. Lost queries are counted and
#       printed always, the unthrottled runs' too; those do not fail -z:
#       they overload the server by design (dnsperf keeps 500 queries
#       outstanding), and a server whose socket buffer holds fewer drops
#       the rest of the first burst (CoreDNS, node-cache: ~300 per run,
#       whatever the workload; nodedns: none)
#   -T  client threads of the glibc lookup loop (pod workload; default 4)
#   -G  pod workloads: also run nodedns with each of these --gomaxprocs
#       values (servers nodedns-gN), for the GOMAXPROCS comparison: a
#       table of its own (run, Ps, max QPS, CPU µs/query, p99, glibc
#       lookups/s and CPU µs/lookup), the run named after -S and -C
#   -C  pod workloads: run every pod server in a CPU cgroup of its own
#       limited to CPUS cores (cgroup v1 cpu.cfs_quota_us or v2 cpu.max),
#       as a container CPU limit does
#   -S  pod workloads: an informer event storm during the measurements:
#       RATE Services created (and as many deleted) per second in the API
#       server (internal/tools/churn)
#
# Workloads:
#   hit      1000 external names x A/AAAA, answered from the cache.
#   nx       2000 NXDOMAIN names, answered from the negative cache.
#   cluster  names of Services held by a real kube-apiserver: the script
#            starts etcd (Debian etcd-server) and kube-apiserver
#            (scripts/kube-apiserver.sh, cached) on 127.0.0.1 with free ports
#            in its temporary directory, creates -n Services across 5
#            namespaces through the REST API (every 50th headless, with an
#            EndpointSlice of 3 ready endpoints), and queries A for every
#            Service, SRV for every 10th and every headless one, and PTR
#            for the ClusterIP of every 10th. ClusterIPs and endpoint
#            addresses are data only: nothing sends a packet to them.
#            nodedns (and nodedns-poller) answer from their own informer
#            index. unbound and dnsmasq forward cluster.local and
#            96.10.in-addr.arpa to a separate nodedns instance standing in
#            for the central cluster DNS (as node-cache forwards cluster
#            names to the central CoreDNS) and answer from their caches
#            (the cluster TTL is 5 s, so each name is refreshed from it
#            every 5 s). CoreDNS serves them with its kubernetes plugin
#            (+ cache) against the same API server.
#   pod      what a pod sends: dnsperf runs inside a network namespace whose
#            address is a registered Pod of namespace bench-0 on this node
#            (a veth pair, 169.254.125.0/27, and a ULA on the pod side), with
#            the names a glibc resolver sends for ndots:5 and the Kubernetes
#            search list (bench-0.svc.cluster.local svc.cluster.local
#            cluster.local; the node's own search domains, if any, after):
#            for each of 1000 external names, every Service of bench-0 by
#            its short name and every other Service as <svc>.<ns>, A and
#            AAAA. Servers that walk the search list themselves (nodedns
#            with autopath, CoreDNS with `autopath @kubernetes`) get the
#            first expansion of each name only (host7.example.test.bench-0.
#            svc.cluster.local, svc-3.bench-0.svc.cluster.local,
#            svc-600.bench-3.bench-0.svc.cluster.local): it is the answer.
#            Servers that do not (nodedns-noautopath; node-cache, the
#            NodeLocal DNSCache arrangement: a CoreDNS caching forwarder
#            that sends the cluster zones to a central CoreDNS over TCP)
#            get every query the client sends until one answers, so the
#            table reports queries per lookup and lookups per second.
#            Servers here are instances of their own listening on port 53
#            of the pod link: nodedns (autopath on; a second listen address
#            stands in for the kube-dns ClusterIP, so it has 2 UDP readers
#            as on a node), nodedns-noautopath, coredns (kubernetes with
#            pods verified + autopath @kubernetes + cache, as CoreDNS's
#            autopath needs), node-cache (with -c). The pod workload also
#            measures lookups per second through the real glibc resolver:
#            scripts/gai.c loop (built here) calls getaddrinfo (AF_UNSPEC)
#            in a loop from -T threads inside the pod namespace, over the
#            same names as the pod would write them (host7.example.test,
#            svc-3, svc-600.bench-3), with an iptables counter on the wire
#            for the queries each lookup took. The dnsperf rows' queries
#            per lookup are counted on the wire too, with the same
#            counters: the queries the pod sent to the server while dnsperf
#            went twice through its file (the warm-up), over the lookups.
#   pod-shortcut  the external names' first expansions only, from the pod:
#            every answer a search-path shortcut (node-cache and
#            nodedns-noautopath get the client's whole walk for them).
#   pod-hit  the same external names as asked directly, from the pod: plain
#            cache hits, the reference for pod-shortcut.
#
# For each workload and each server, in rounds A B A B: maximum QPS (dnsperf
# unthrottled), then a fixed-rate run at -Q qps (default 20000) for p50/p99
# latency and the server's CPU per query (utime+stime from /proc over the
# queries answered), and its RSS. Prints one table per workload, every
# figure the mean of the rounds with its spread (min–max), and, with -o,
# appends them to FILE with the machine's description, versions, the
# commit and whether the tree was dirty (-D).
#
# This script starts and stops what is measured (the servers, the control
# plane, the network namespaces) and cleans up; the workloads, the runs,
# the figures, the tables, the -z check and the -o section are
# internal/tools/benchdrive's, which it calls once the servers answer.
set -euo pipefail
cd "$(dirname "$0")/.."

# A command that fails outside a test (and so ends the run under set -e) is
# named on stderr: file, line, the command, its status and the functions it
# ran in. A subshell's failure is named where the shell that ran it sees it.
set -E
bench_err() {
  local rc=$1 line=$2 cmd=$3 i src
  [[ $BASHPID == "$$" ]] || return 0
  echo "bench: ${BASH_SOURCE[1]}:$line: $cmd exited $rc" >&2
  # The line itself: when a function failed, the command above is the last
  # one it ran.
  src=$(sed -n "${line}{s/^[[:space:]]*//;p;q}" "${BASH_SOURCE[1]}" 2>/dev/null)
  [[ -z $src || $src == "$cmd" ]] || echo "bench:   line $line: $src" >&2
  for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
    echo "bench:   in ${FUNCNAME[i]}, called from ${BASH_SOURCE[i + 1]}:${BASH_LINENO[i]}" >&2
  done
}
trap 'bench_err $? "$LINENO" "$BASH_COMMAND"' ERR

secs=10 rounds=3 qps=20000 out="" servers="nodedns unbound dnsmasq" workloads="hit nx cluster pod" nsvc=1000 with_coredns=0 zero_loss=0
gai_threads=4 gmp_variants="" cpu_limit="" churn_rate="" allow_dirty=0
usage() {
  echo "usage: $0 [-l secs] [-r rounds] [-Q qps] [-o file] [-s 'nodedns unbound dnsmasq nodedns-poller nodedns-1r coredns node-cache']" \
    "[-w 'hit nx cluster pod pod-shortcut pod-hit'] [-n services] [-c] [-z] [-D] [-T threads] [-G 'gomaxprocs...'] [-C cpus] [-S rate]" >&2
  exit 2
}
nodedns_b=""
while getopts "l:r:Q:o:s:w:n:czDT:G:C:S:B:" opt; do
  case $opt in
    l) secs=$OPTARG ;; r) rounds=$OPTARG ;; Q) qps=$OPTARG ;; o) out=$OPTARG ;; s) servers=$OPTARG ;;
    w) workloads=$OPTARG ;; n) nsvc=$OPTARG ;; c) with_coredns=1 ;; z) zero_loss=1 ;; D) allow_dirty=1 ;;
    T) gai_threads=$OPTARG ;; G) gmp_variants=$OPTARG ;; C) cpu_limit=$OPTARG ;; S) churn_rate=$OPTARG ;;
    B) nodedns_b=$OPTARG ;;
    *) usage ;;
  esac
done
[[ $secs =~ ^[0-9]+$ && $rounds =~ ^[0-9]+$ && $qps =~ ^[0-9]+$ && $nsvc =~ ^[0-9]+$ && $gai_threads =~ ^[0-9]+$ ]] || usage
((secs > 0 && rounds > 0 && nsvc > 0 && nsvc <= 60000 && gai_threads > 0 && gai_threads <= 64)) || usage
for g in $gmp_variants; do [[ $g =~ ^[0-9]+$ ]] && ((g > 0 && g <= 64)) || { echo "bench: -G $g: want 1-64" >&2; usage; }; done
(($(wc -w <<<"$gmp_variants") <= 8)) || { echo "bench: -G: at most 8 values" >&2; usage; }
[[ -z $cpu_limit || $cpu_limit =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "bench: -C $cpu_limit: want a number of cores" >&2; usage; }
[[ -z $churn_rate || $churn_rate =~ ^[0-9]+$ ]] || { echo "bench: -S $churn_rate: want Services per second" >&2; usage; }
for s in $servers; do
  case $s in nodedns | unbound | dnsmasq | nodedns-poller | nodedns-1r | coredns | node-cache) ;;
    nodedns-b) [[ -x $nodedns_b ]] || { echo "bench: nodedns-b needs -B BINARY (an executable nodedns)" >&2; usage; } ;;
    *) echo "bench: unknown server $s" >&2; usage ;; esac
done
[[ -z $nodedns_b ]] || nodedns_b=$(realpath "$nodedns_b")
export NODEDNS_B=$nodedns_b NODEDNS_B_ARGS=${NODEDNS_B_ARGS:-}
for w in $workloads; do
  case $w in hit | nx | cluster | pod | pod-shortcut | pod-hit) ;; *) echo "bench: unknown workload $w" >&2; usage ;; esac
done
has() { [[ " $1 " == *" $2 "* ]]; }
without() { local r="" x; for x in $1; do [[ $x == "$2" ]] || r+="${r:+ }$x"; done; echo "$r"; }
if ((with_coredns)) && ! has "$servers" coredns; then servers+=" coredns"; fi
cluster=0 podwl=0
has "$workloads" cluster && cluster=1
for w in $workloads; do [[ $w == pod* ]] && podwl=1 && cluster=1; done
if ((with_coredns && podwl)) && ! has "$servers" node-cache; then servers+=" node-cache"; fi
# The servers of the loopback workloads and of the pod workloads.
lservers=$(without "$servers" node-cache)
pservers=""
for s in nodedns nodedns-b coredns node-cache; do has "$servers" $s && pservers+="${pservers:+ }$s"; done
if has "$servers" nodedns; then
  pservers+=" nodedns-noautopath"
  for g in $gmp_variants; do pservers+=" nodedns-g$g"; done
fi
lwork="" pwork=""
for w in $workloads; do if [[ $w == pod* ]]; then pwork+="${pwork:+ }$w"; else lwork+="${lwork:+ }$w"; fi; done
if ((podwl)) && [[ -z $pservers ]]; then echo "bench: the pod workloads need nodedns, coredns or node-cache" >&2; usage; fi
if [[ -z $lwork ]]; then lservers=""; fi
lcluster=0
has "$lwork" cluster && lcluster=1

# The tree the figures belong to: a commit, clean unless -D. Judged once,
# before the run re-enters itself in its network namespace, and handed on.
if [[ -z ${NODEDNS_BENCH_NETNS:-} ]]; then
  commit=$(git -c safe.directory="$PWD" rev-parse --short HEAD 2>&1) || { echo "bench: no commit to name the figures by (git rev-parse: $commit)" >&2; exit 1; }
  # safe.directory: run as root on a checkout owned by someone else.
  status=$(git -c safe.directory="$PWD" status --porcelain 2>&1) || { echo "bench: git status failed: $status" >&2; exit 1; }
  # The file -o appends to does not count: the runs of one session append
  # to bench/RESULTS.md one after the other.
  if [[ -n $out ]]; then
    out_rel=$(realpath -m --relative-to=. "$out")
    status=$(awk -v f="$out_rel" 'substr($0, 4) != f' <<<"$status")
  fi
  tree=clean
  if [[ -n $status ]]; then
    if ((!allow_dirty)); then
      echo "bench: the tree has uncommitted changes or untracked files, so the figures would belong to no commit; commit them, or run with -D (the header then says dirty):" >&2
      head -n 20 <<<"$status" | sed 's/^/  /' >&2
      exit 1
    fi
    tree=dirty
    echo "bench: -D: running on a dirty tree ($(wc -l <<<"$status") paths changed); the header says dirty" >&2
  fi
  export NODEDNS_BENCH_COMMIT=$commit NODEDNS_BENCH_TREE=$tree
fi

scripts/deps.sh

# Everything below runs in a network namespace of the run's own, "the
# node": the servers, etcd and kube-apiserver, dnsperf, and the pod's link
# (the pod workloads' namespace hangs off it). Nothing binds the host's
# addresses or ports or adds links or rules to its namespace, so a run
# neither disturbs nor depends on anything else on the machine. What may
# need the network (the Go module proxy, for a first build) is done first,
# outside.
if [[ -z ${NODEDNS_BENCH_NETNS:-} ]]; then
  go mod download
  if ((cluster)); then scripts/kube-apiserver.sh >/dev/null; fi
  if has "$servers" coredns || has "$servers" node-cache; then
    scripts/coredns.sh >/dev/null || { echo "bench: building CoreDNS (scripts/coredns.sh) failed" >&2; exit 1; }
  fi
  node_ns=nd-bench-$$
  ip netns add "$node_ns"
  # The node's namespace goes whatever the run inside did. Its removal runs
  # with errexit off (a failed command in an EXIT trap under set -e would
  # end the script with that command's status, in silence), and what
  # matters is checked: a namespace still there is named and fails the
  # run; one already gone is not a failure.
  # shellcheck disable=SC2317 # run by the EXIT trap
  node_cleanup() {
    local rc=$? err
    set +e
    trap - ERR
    if [[ -e /run/netns/$node_ns ]]; then
      err=$(ip netns del "$node_ns" 2>&1)
      if [[ -e /run/netns/$node_ns ]]; then
        echo "bench: cleanup: left behind: the network namespace $node_ns (ip netns del: ${err:-no message}); remove it with: ip netns del $node_ns" >&2
        ((rc)) || rc=1
      fi
    fi
    exit "$rc"
  }
  trap node_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  nsenter --net="/run/netns/$node_ns" ip link set lo up
  # nsenter, not ip netns exec: that remounts /sys, which would hide the
  # cgroup mounts (-C, and the Go runtime's CPU limit).
  rc=0
  nsenter --net="/run/netns/$node_ns" env NODEDNS_BENCH_NETNS="$node_ns" bash scripts/bench.sh "$@" || rc=$?
  exit "$rc"
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d /tmp/nodedns-bench.XXXXXX)
pids=()     # everything started, in start order; stopped in reverse
etcd_pid="" # stopped last, after the API server
# alive PID: PID is a child of this shell that has not exited. A pid
# whose process ended and was reaped is no longer ours: it may name
# another process by now (on a machine that forks as busily as a test run
# does), which must not be signalled.
alive() {
  local st state parent
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  # Past the command name, which may hold spaces and parentheses.
  read -r state parent _ <<<"${st##*) }"
  [[ $state != [ZX] && $parent == "$$" ]]
}
# stop_all SECONDS PID...: SIGTERM each, wait up to SECONDS for all, SIGKILL
# what is left and wait up to 5 s more. A process that exits before its
# signal reaches it is stopped, as wanted: a failed kill is not a failure
# (under load a server slow to die may end between the check and the
# kill). Returns 1, naming them, when processes outlive their SIGKILL.
stop_all() {
  local secs=$1 p i left=() still=()
  shift
  (($#)) || return 0
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  left=("$@")
  for ((i = 0; i < secs * 10 + 50 && ${#left[@]}; i++)); do
    if ((i == secs * 10)); then
      for p in "${left[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    fi
    sleep 0.1
    still=()
    for p in "${left[@]}"; do if alive "$p"; then still+=("$p"); fi; done
    left=("${still[@]}")
  done
  ((${#left[@]})) || return 0
  for p in "${left[@]}"; do
    echo "bench: process $p still runs 5 s after SIGKILL: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c 1-160)" >&2
  done
  return 1
}
pod_ns="" pod_if="" netns_dir="" netns_top=0 cgroups=()
# cleanup, on exit whatever ended the run: every step runs whatever the
# ones before it did. Errexit is off here: under set -e one failed command
# in an EXIT trap ends the trap, leaving the rest behind, and the script,
# with that command's status: a run that passed ended "exit 1" that way,
# with nothing said and its pod's namespace left behind. What each step
# was to remove is checked after it instead: a process still running, the
# pod's link, its network namespace, its resolv.conf directory or a CPU
# cgroup still there is named on stderr and fails a run that passed (the
# run promises to leave nothing behind). A command that failed with nothing
# left (a kill of a process that had exited, rmdir of an /etc/netns that
# other namespaces use too) is not a failure.
cleanup() {
  local rc=$? rev=() i err left=()
  set +e
  trap - ERR
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do rev+=("${pids[i]}"); done
  stop_all 20 "${rev[@]}" || left+=("the processes named above")
  if [[ -n $etcd_pid ]]; then stop_all 10 "$etcd_pid" || left+=("etcd (named above)"); fi
  # Reap what stopped; not when something outlived SIGKILL (it would block).
  ((${#left[@]})) || wait 2>/dev/null
  # The pod link and namespace (its iptables counters go with it), its
  # resolv.conf, and the CPU cgroups (empty once their servers stopped).
  if [[ -n $pod_if ]] && ip link show "$pod_if" >/dev/null 2>&1; then
    err=$(ip link del "$pod_if" 2>&1)
    if ip link show "$pod_if" >/dev/null 2>&1; then left+=("the pod's link $pod_if (ip link del: ${err:-no message})"); fi
  fi
  if [[ -n $pod_ns && -e /run/netns/$pod_ns ]]; then
    err=$(ip netns del "$pod_ns" 2>&1)
    if [[ -e /run/netns/$pod_ns ]]; then left+=("the pod's network namespace $pod_ns (ip netns del: ${err:-no message})"); fi
  fi
  if [[ -n $netns_dir && -e $netns_dir ]]; then
    err=$(rm -rf "$netns_dir" 2>&1)
    if [[ -e $netns_dir ]]; then left+=("$netns_dir (rm: ${err:-no message})"); fi
  fi
  # Not empty: other namespaces' files are there; it stays, as it should.
  if ((netns_top)); then rmdir /etc/netns 2>/dev/null; fi
  for i in "${cgroups[@]}"; do
    [[ -d $i ]] || continue
    err=$(rmdir "$i" 2>&1)
    if [[ -d $i ]]; then left+=("the cgroup $i (rmdir: ${err:-no message})"); fi
  done
  # The temporary directory: reported, not a failure.
  if [[ -n ${work:-} && -e $work ]]; then
    err=$(rm -rf "$work" 2>&1)
    if [[ -e $work ]]; then echo "bench: cleanup: could not remove $work (rm: ${err:-no message})" >&2; fi
  fi
  if ((${#left[@]})); then
    echo "bench: cleanup: left behind:" >&2
    printf 'bench:   %s\n' "${left[@]}" >&2
    if ((rc == 0)); then
      echo "bench: cleanup: the run passed, but left the above behind: exit 1" >&2
      rc=1
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# poll SECONDS CMD...: run CMD every 0.2 s until it succeeds or SECONDS pass.
poll() {
  local secs=$1 i
  shift
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

go build -o "$work/nodedns" ./cmd/nodedns
go build -o "$work/testupstream" ./internal/dnstest/testupstream
go build -o "$work/benchdrive" ./internal/tools/benchdrive

coredns_bin=""
if has "$servers" coredns || has "$servers" node-cache; then
  if coredns_bin=$(scripts/coredns.sh 2>"$work/coredns-build.log" | tail -n 1) && [[ -x $coredns_bin ]]; then
    :
  else
    echo "bench: no CoreDNS binary (scripts/coredns.sh); last lines of its build:" >&2
    tail -n 20 "$work/coredns-build.log" >&2 || true
    exit 1
  fi
fi

UP=127.0.0.1:5300
# central: the nodedns instance unbound and dnsmasq forward cluster names to.
declare -A addr=([nodedns]=127.0.0.2 [unbound]=127.0.0.3 [dnsmasq]=127.0.0.4 [nodedns-poller]=127.0.0.5
  [coredns]=127.0.0.6 [nodedns-1r]=127.0.0.7 [nodedns-b]=127.0.0.8 [central]=127.0.0.9)
declare -A pid
PORT=5353

"$work/testupstream" -listen $UP -ttl 3600 -for 2h >"$work/upstream.log" 2>&1 &
pids+=($!)

# --- Control plane for the cluster workload -------------------------------

kas_bin="" kc="" kas_url="" token="" cacert=""
NS_COUNT=5
# free_ports N: N distinct TCP ports on 127.0.0.1 nobody listens on now.
free_ports() {
  local want=$1 got=() p i used
  used=$(ss -Htan | awk '{n = split($4, a, ":"); print a[n]}' | sort -u)
  for ((i = 0; i < 1000 && ${#got[@]} < want; i++)); do
    p=$((20000 + RANDOM % 30000))
    grep -qx "$p" <<<"$used" && continue
    has "${got[*]:-}" "$p" && continue
    got+=("$p")
  done
  ((${#got[@]} == want)) || { echo "bench: no free ports" >&2; return 1; }
  echo "${got[*]}"
}
etcd_healthy() { curl -fsS --max-time 2 "$1/health" | grep -q '"health":"true"'; }
kas_get() { curl -fsS --max-time 5 --cacert "$cacert" -H "Authorization: Bearer $token" "$kas_url$1"; }
kas_ready() { [[ $(kas_get /readyz) == ok ]]; }
cp_fail() {
  echo "bench: $1" >&2
  for f in "$work"/cp/etcd.log "$work"/cp/kube-apiserver.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

start_controlplane() {
  kas_bin=$(scripts/kube-apiserver.sh 2>"$work/kube-apiserver-build.log" | tail -n 1) || true
  if [[ ! -x $kas_bin ]]; then
    tail -n 30 "$work/kube-apiserver-build.log" >&2
    echo "bench: no kube-apiserver (run with -w 'hit nx' to skip the cluster workload)" >&2
    exit 1
  fi
  command -v etcd >/dev/null || { echo "bench: no etcd (Debian package etcd-server)" >&2; exit 1; }
  local dir=$work/cp p_etcd p_peer p_kas
  mkdir -p "$dir"
  read -r p_etcd p_peer p_kas <<<"$(free_ports 3)"
  local etcd_url=http://127.0.0.1:$p_etcd peer_url=http://127.0.0.1:$p_peer
  etcd --name=bench --data-dir="$dir/etcd" --listen-client-urls="$etcd_url" --advertise-client-urls="$etcd_url" \
    --listen-peer-urls="$peer_url" --initial-advertise-peer-urls="$peer_url" --initial-cluster="bench=$peer_url" \
    --log-level=warn >"$dir/etcd.log" 2>&1 &
  etcd_pid=$!
  poll 30 etcd_healthy "$etcd_url" || cp_fail "etcd not healthy at $etcd_url within 30 s"

  # Credentials: an admin bearer token (system:masters) and a
  # service-account key pair; the API server signs its own serving cert.
  token=$(openssl rand -hex 16)
  echo "$token,bench-admin,bench-admin,\"system:masters\"" >"$dir/tokens.csv"
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/sa.key" 2>/dev/null
  openssl ec -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  chmod 600 "$dir/tokens.csv" "$dir/sa.key"
  kas_url=https://127.0.0.1:$p_kas cacert=$dir/certs/apiserver.crt
  # The same flags as integration/controlplane_test.go, single-stack:
  # no controller creates ServiceAccounts, and the "kubernetes" endpoints
  # reconciler refuses a loopback advertise address.
  "$kas_bin" --etcd-servers="$etcd_url" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --secure-port="$p_kas" --cert-dir="$dir/certs" --token-auth-file="$dir/tokens.csv" \
    --authorization-mode=Node,RBAC --service-account-key-file="$dir/sa.pub" \
    --service-account-signing-key-file="$dir/sa.key" --service-account-issuer=https://kubernetes.default.svc \
    --service-cluster-ip-range=10.96.0.0/16 --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none --profiling=false --v=1 >"$dir/kube-apiserver.log" 2>&1 &
  pids+=($!)
  poll 120 test -s "$cacert" || cp_fail "kube-apiserver wrote no serving certificate within 120 s"
  poll 180 kas_ready || cp_fail "kube-apiserver not ready at $kas_url within 180 s"

  kc=$dir/kubeconfig
  cat >"$kc" <<KC
apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: $kas_url
    certificate-authority: $cacert
users:
- name: admin
  user:
    token: $token
contexts:
- name: bench
  context: {cluster: bench, user: admin}
current-context: bench
KC
  chmod 600 "$kc"
}

# post_all FILE: POSTs every "PATH JSON" line of FILE, 16 at a time over
# one HTTP/2 connection per curl, 250 objects per curl; every answer must
# be 201 Created.
post_all() {
  local list=$1 cfg=$work/cp/post.cfg codes=$work/cp/post.codes resp=$work/cp/resp path json sep
  local -i n=0 i=0 total
  total=$(wc -l <"$list")
  : >"$codes"
  rm -rf "$resp" && mkdir -p "$resp"
  while ((n < total)); do
    : >"$cfg"
    sep=""
    while read -r path json; do
      json=${json//\\/\\\\}
      i+=1
      # "next" separates transfers; a trailing one would fail them all.
      printf '%surl = "%s%s"\nheader = "Authorization: Bearer %s"\nheader = "Content-Type: application/json"\ncacert = "%s"\ndata = "%s"\noutput = "%s/%d"\nsilent\nshow-error\nwrite-out = "%%{http_code} %%{filename_effective}\\n"\nmax-time = 30\n' \
        "$sep" "$kas_url" "$path" "$token" "$cacert" "${json//\"/\\\"}" "$resp" "$i" >>"$cfg"
      sep=$'next\n'
    done < <(sed -n "$((n + 1)),$((n + 250))p" "$list")
    curl --parallel --parallel-max 16 --no-progress-meter -K "$cfg" >>"$codes" || true
    n+=250
  done
  if [[ $(grep -c '^201 ' "$codes") != "$total" ]]; then
    echo "bench: creating objects: $(grep -vc '^201 ' "$codes") of $total failed; the first:" >&2
    read -r path json < <(grep -v '^201 ' "$codes")
    echo "$path: $(head -c 600 "$json" 2>/dev/null)" >&2
    exit 1
  fi
  rm -rf "$resp"
}

# svc_ns I: Service I's namespace, as benchdrive objects puts it
# (consecutive blocks of nsvc/NS_COUNT).
svc_ns() { echo "bench-$(($1 * NS_COUNT / nsvc))"; }

# create_services: the namespaces, the Services and the headless ones'
# EndpointSlices, as benchdrive objects lists them (what they are: its
# workload.go).
create_services() {
  local kind list=$work/cp/objects
  for kind in namespaces services endpointslices; do
    "$work/benchdrive" objects -n "$nsvc" -kind "$kind" >"$list"
    [[ ! -s $list ]] || post_all "$list"
  done
}

if ((cluster)); then
  echo "bench: starting etcd and kube-apiserver, creating $nsvc Services" >&2
  start_controlplane
  create_services
fi

# --- Servers ---------------------------------------------------------------

# With the cluster workload every nodedns watches the API server.
kube_args=()
((lcluster)) && kube_args=(--kubeconfig "$kc" --autopath=false)

start_nodedns() {
  "$work/nodedns" serve --listen "${addr[nodedns]}:$PORT" --upstream $UP --admin 127.0.0.1:9299 \
    --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn "${kube_args[@]}" >"$work/nodedns.log" 2>&1 &
  pid[nodedns]=$!; pids+=($!)
}
# nodedns-b: another build of nodedns (-B), for old-against-new figures.
start_nodedns-b() {
  # shellcheck disable=SC2086 # NODEDNS_B_ARGS: words on purpose
  "$NODEDNS_B" serve --listen "${addr[nodedns-b]}:$PORT" --upstream $UP --admin 127.0.0.1:9297 \
    --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn "${kube_args[@]}" ${NODEDNS_B_ARGS:-} >"$work/nodedns-b.log" 2>&1 &
  pid[nodedns-b]=$!; pids+=($!)
}
# nodedns-poller: the same agent reading UDP through the Go netpoller
# instead of its thread readers, for A/B figures.
start_nodedns-poller() {
  "$work/nodedns" serve --listen "${addr[nodedns-poller]}:$PORT" --upstream $UP --admin "" --udp-readers poller \
    --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn "${kube_args[@]}" >"$work/nodedns-poller.log" 2>&1 &
  pid[nodedns-poller]=$!; pids+=($!)
}
# nodedns-1r: the same agent with one UDP reader, named explicitly (the
# default may change), for the figure "QPS per reader".
start_nodedns-1r() {
  "$work/nodedns" serve --listen "${addr[nodedns-1r]}:$PORT" --upstream $UP --admin 127.0.0.1:9298 --udp-sockets 1 \
    --cache-size 100000 --loop-check=false --lameduck 0s --log-level warn "${kube_args[@]}" >"$work/nodedns-1r.log" 2>&1 &
  pid[nodedns-1r]=$!; pids+=($!)
}
# central: stands in for the cluster's central DNS that unbound and dnsmasq
# forward cluster names to; not measured.
start_central() {
  "$work/nodedns" serve --listen "${addr[central]}:$PORT" --upstream $UP --admin "" \
    --loop-check=false --lameduck 0s --log-level warn "${kube_args[@]}" >"$work/central.log" 2>&1 &
  pid[central]=$!; pids+=($!)
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
  # unbound answers "test." (RFC 6761) itself with NXDOMAIN by default;
  # the workloads' external names are under example.test.
  local-zone: "test." nodefault
forward-zone:
  name: "."
  forward-addr: ${UP/:/@}
CONF
  if ((lcluster)); then
    cat >>"$work/unbound.conf" <<CONF
server:
  local-zone: "10.in-addr.arpa." nodefault
forward-zone:
  name: "cluster.local"
  forward-addr: ${addr[central]}@$PORT
forward-zone:
  name: "96.10.in-addr.arpa"
  forward-addr: ${addr[central]}@$PORT
CONF
  fi
  unbound -d -c "$work/unbound.conf" >"$work/unbound.log" 2>&1 &
  pid[unbound]=$!; pids+=($!)
}
start_dnsmasq() {
  local fwd=()
  ((lcluster)) && fwd=(--server="/cluster.local/${addr[central]}#$PORT" --server="/96.10.in-addr.arpa/${addr[central]}#$PORT" --cache-rr=SRV)
  dnsmasq -k --no-resolv --no-hosts --server="${UP/:/#}" --listen-address="${addr[dnsmasq]}" --bind-interfaces \
    --port=$PORT --cache-size=10000 --dns-forward-max=1000 -u root --pid-file="$work/dnsmasq.pid" \
    --log-facility="$work/dnsmasq.log" "${fwd[@]}" >"$work/dnsmasq.out" 2>&1 &
  pid[dnsmasq]=$!; pids+=($!)
}
# CoreDNS: cache + forward for external names; for the cluster zone the
# kubernetes plugin (+ cache, as in kubeadm's Corefile) against the same
# API server.
start_coredns() {
  {
    if ((lcluster)); then
      cat <<CONF
cluster.local:$PORT 96.10.in-addr.arpa:$PORT {
  bind ${addr[coredns]}
  kubernetes {
    kubeconfig $kc bench
    pods insecure
    ttl 5
  }
  cache 30
}
CONF
    fi
    cat <<CONF
.:$PORT {
  bind ${addr[coredns]}
  cache
  forward . $UP
}
CONF
  } >"$work/Corefile"
  "$coredns_bin" -conf "$work/Corefile" -quiet >"$work/coredns.log" 2>&1 &
  pid[coredns]=$!; pids+=($!)
}

# answers SERVER NAME TYPE: the server gives at least one record.
answers() { [[ -n $(dig +time=1 +tries=1 @"${addr[$1]}" -p $PORT "$2" "$3" +short 2>/dev/null) ]]; }
last_svc="svc-$((nsvc - 1)).$(svc_ns $((nsvc - 1))).svc.cluster.local"
# A non-headless Service; headless ones only answer once their slice is in.
probe_svc="svc-0.bench-0.svc.cluster.local"
# not_ready SERVER WHAT: a server asked for that does not answer is the
# end of the run (a table that quietly lacks a server compares nothing).
not_ready() {
  local s=$1
  echo "bench: $s does not answer $2" >&2
  tail -n 20 "$work/$s".* >&2 2>/dev/null || true
  exit 1
}
declare -A ppid

if ((lcluster)); then
  start_central
  poll 60 answers central "$last_svc" A || not_ready central "$last_svc (informers not synced within 60 s)"
fi
for s in $lservers; do "start_$s"; done
sleep 1
for s in $lservers; do
  poll 10 answers "$s" warm.example.test A || not_ready "$s" warm.example.test
done
if ((lcluster)); then
  for s in $lservers; do
    if ! poll 60 answers "$s" "$last_svc" A || ! poll 10 answers "$s" "$probe_svc" A; then
      not_ready "$s" "cluster names within 60 s"
    fi
  done
fi

# The measurements, the figures, the tables and the lost-query check are
# benchdrive's (internal/tools/benchdrive): the servers measured, in table
# order, as NAME@ADDR:PORT/PID[/ADMIN].
bd=("$work/benchdrive")
bd_run=(-work "$work" -l "$secs" -r "$rounds" -Q "$qps" -n "$nsvc")
declare -A ladmin=([nodedns]=127.0.0.1:9299 [nodedns-b]=127.0.0.1:9297 [nodedns-1r]=127.0.0.1:9298)
if [[ -n $lwork ]]; then
  lspec=()
  for s in $lservers; do lspec+=(-server "$s@${addr[$s]}:$PORT/${pid[$s]}${ladmin[$s]:+/${ladmin[$s]}}"); done
  "${bd[@]}" loopback "${bd_run[@]}" -w "$lwork" "${lspec[@]}"
fi

# --- Pod workloads -----------------------------------------------------------

if ((podwl)); then
  source scripts/bench-pod.sh
fi

# The tables with the lost-query line; -z fails here (benchdrive exits 1
# naming the losses); -o appends the section.
report=(-work "$work" -l "$secs" -r "$rounds" -Q "$qps" -n "$nsvc" -T "$gai_threads" -servers "$servers" -workloads "$workloads"
  -commit "${NODEDNS_BENCH_COMMIT:-}" -tree "${NODEDNS_BENCH_TREE:-}" -load "$load_before" -coredns "$coredns_bin" -kube-apiserver "$kas_bin")
[[ -z $gmp_variants ]] || report+=(-G "$gmp_variants")
[[ -z $cpu_limit ]] || report+=(-C "$cpu_limit")
[[ -z $churn_rate ]] || report+=(-S "$churn_rate")
((!allow_dirty)) || report+=(-D)
((!zero_loss)) || report+=(-z)
[[ -z $out ]] || report+=(-o "$out")
"${bd[@]}" report "${report[@]}"
