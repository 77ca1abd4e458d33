#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, like kind but with
# no Docker engine: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kube-proxy (iptables mode, or KUBE_PROXY_MODE) and kubelet run as ordinary
# processes, with containerd, runc and the CNI plugins from Debian.
#
#   scripts/cluster.sh up [--cluster-dns IP]
#                                    start (idempotent); waits for the node to
#                                    be Ready; last line: the kubeconfig path
#   scripts/cluster.sh kubectl ARGS  the cached kubectl against it
#   scripts/cluster.sh down          stop everything it started and remove all
#                                    state, mounts, links, rules and sysctls it
#                                    changed: the machine is as before `up`
#   scripts/cluster.sh status        what runs
#   scripts/cluster.sh snapshot FILE record the host state `down` must restore
#                                    (links, addresses, routes, rules of both
#                                    iptables backends, mounts, sysctls, paths)
#   scripts/cluster.sh env           shell assignments for the cluster's
#                                    addresses (for scripts/e2e.sh)
#
# The Kubernetes binaries are built from the k8s.io/kubernetes module at the
# pinned version by scripts/kube-bin.sh (cached by version under
# ${NODEDNS_CACHE:-/var/cache/nodedns}); the sandbox image is built locally
# (scripts/image.sh pause).
#
# Addresses: nothing here is 10.x, 172.16-31.x or 192.168.x. Dual stack with
# ULA IPv6 as the primary family (EndpointSlices reject link-local
# addresses, and the API server's advertise address must be of the primary
# service family) and link-local IPv4 second, so pods reach 169.254.20.10:
#   node        fdd5:6e6f:6465::1 (its InternalIP: kubelet refuses a
#               link-local node IP) and 169.254.63.1 on link ndc-node0
#   pods        fdd5:6e6f:6465:1::/64 and 169.254.64.0/24 on bridge ndc-cni0
#   services    fdd5:6e6f:6465:96::/112 and 169.254.128.0/20
# A FORWARD guard drops whatever would leave the pod bridge for another
# interface: pods reach the node and each other, nothing outside.
#
# CLUSTER_CNI=cilium runs Cilium instead of the bridge plugin and kube-proxy:
# cilium-agent with kube-proxy replacement and LocalRedirectPolicy, and its
# CNI plugin (scripts/cluster-cilium.sh, binaries from
# scripts/cilium-bin.sh). `down` undoes it whichever mode `up` ran in.
#
# Env: CLUSTER_DNS (kubelet --cluster-dns, default 169.254.20.10),
#      CLUSTER_CNI (bridge, the default, or cilium),
#      KUBE_PROXY_MODE (iptables, the default, or nftables), KUBE_VERSION,
#      NODEDNS_CACHE, NODEDNS_CLUSTER_STATE (default /var/lib/nodedns-cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

STATE="${NODEDNS_CLUSTER_STATE:-/var/lib/nodedns-cluster}"
RUN=/run/nodedns-cluster
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
CLUSTER_DNS="${CLUSTER_DNS:-169.254.20.10}"
# kube-proxy's mode: iptables (default) or nftables (this kernel has no IPVS).
KUBE_PROXY_MODE="${KUBE_PROXY_MODE:-iptables}"
# The pod network: bridge (Debian's CNI plugins and kube-proxy) or cilium.
CLUSTER_CNI="${CLUSTER_CNI:-bridge}"
case "$CLUSTER_CNI" in bridge | cilium) ;; *) echo "cluster.sh: CLUSTER_CNI must be bridge or cilium, got ${CLUSTER_CNI}" >&2; exit 2 ;; esac

NODE_NAME=nodedns-node
NODE_LINK=ndc-node0
NODE_IP6=fdd5:6e6f:6465::1
NODE_IP4=169.254.63.1
CNI_BRIDGE=ndc-cni0
POD_CIDR6=fdd5:6e6f:6465:1::/64
POD_GW6=fdd5:6e6f:6465:1::1
POD_CIDR4=169.254.64.0/24
POD_GW4=169.254.64.1
SVC_CIDR6=fdd5:6e6f:6465:96::/112
SVC_CIDR4=169.254.128.0/20
# Cilium's allocator holds at most 2^16 addresses per range: its IPv6 pod
# range is a /112 inside the pod /64.
CILIUM_POD_CIDR6=fdd5:6e6f:6465:1::/112
KUBERNETES_SVC6=fdd5:6e6f:6465:96::1
API_PORT=6443
ETCD_CLIENT=http://127.0.0.1:23790
ETCD_PEER=http://127.0.0.1:23800
# The DNS server kubelet's own resolv.conf for dnsPolicy Default pods names:
# a loopback address where scripts/e2e.sh runs its test upstream. Pods never
# see the machine's real resolvers.
NODE_RESOLVER=127.0.53.53

CONTAINERD_SOCK="${RUN}/containerd/containerd.sock"
KUBECONFIG_ADMIN="${STATE}/admin.kubeconfig"
GUARD_CHAIN=NODEDNS-CLUSTER-GUARD
# Paths kubelet, containerd and CNI use whatever their flags say; `down`
# removes those that did not exist before `up`.
FIXED_PATHS=(/var/lib/kubelet /usr/libexec/kubernetes /var/log/containers /var/log/pods
	/run/containerd /var/lib/cni /run/netns /etc/cni /opt/cni /run/cilium /var/lib/cilium)
# Sysctls kubelet, kube-proxy and the CNI bridge plugin set.
SYSCTLS=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding
	net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic
	kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes
	net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
	net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
	net.netfilter.nf_conntrack_tcp_timeout_close_wait net.ipv4.conf.all.rp_filter
	net.ipv6.conf.all.accept_ra net.ipv6.conf.all.disable_ipv6
	net.ipv4.conf.all.forwarding net.core.bpf_jit_enable net.ipv4.fib_multipath_use_neigh
	kernel.timer_migration net.core.fb_tunnels_only_for_init_net net.ipv4.ip_early_demux
	kernel.unprivileged_bpf_disabled)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy cilium-agent)

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
# shellcheck source=scripts/cluster-cilium.sh
source "${REPO}/scripts/cluster-cilium.sh"
die() { log "$*"; exit 1; }

bin() { echo "${KUBE_BIN}/$1"; }

kubectl_() { "$(bin kubectl)" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

need_pkgs() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c "install ok installed" >/dev/null || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

kube_bin() {
	KUBE_BIN=$(scripts/kube-bin.sh | tail -n 1)
}

pidfile() { echo "${RUN}/pids/$1.pid"; }

running() {
	local pf pid
	pf=$(pidfile "$1")
	[[ -f "$pf" ]] || return 1
	pid=$(<"$pf")
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

# start NAME CMD...: run a component in its own session, logging to
# $STATE/logs/NAME.log.
start() {
	local name=$1
	shift
	if running "$name"; then
		return 0
	fi
	mkdir -p "${STATE}/logs" "${RUN}/pids"
	log "starting ${name}"
	# The daemons outlive this script: they must not inherit its open
	# descriptors, above all the lock of a caller such as
	# `flock /tmp/nodedns-host.lock scripts/cluster.sh up`, which they would
	# otherwise hold for as long as the cluster runs.
	(
		for fd in /proc/"${BASHPID}"/fd/*; do
			fd=${fd##*/}
			if ((fd > 2)); then
				eval "exec ${fd}>&-"
			fi
		done
		exec setsid "$@" >>"${STATE}/logs/${name}.log" 2>&1 </dev/null
	) &
	echo $! >"$(pidfile "$name")"
}

# stop NAME...: SIGTERM to each, then SIGKILL to those still running after
# a grace period; the components stop in parallel.
stop() {
	local name pf pid pids=() i
	for name in "$@"; do
		pf=$(pidfile "$name")
		[[ -f "$pf" ]] || continue
		pid=$(<"$pf")
		if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
			log "stopping ${name}"
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
		rm -f "$pf"
	done
	for i in $(seq 1 100); do
		local alive=0
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive=1
		done
		((alive)) || return 0
		sleep 0.1
	done
	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	die "timed out after ${secs}s waiting for ${what} (logs: ${STATE}/logs)"
}

# ---------------------------------------------------------------- snapshot

# snapshot FILE: the host state `down` must leave as it found it.
snapshot() {
	local out=$1 t
	(
		# A listing, not a check: an empty section is not an error.
		set +e +o pipefail
		echo "## links"
		ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
		echo "## addresses"
		ip -o addr show | awk '{print $2, $3, $4}' | grep -v ' fe80::' | sort
		echo "## routes"
		ip route show table all | grep -v '^local fe80::\|^fe80::\|^multicast' | sort
		ip -6 route show table all | grep -v 'fe80::\|^multicast\|^ff00::' | sort
		echo "## ip rules"
		ip -4 rule show | sort
		ip -6 rule show | sort
		echo "## bpf"
		if mountpoint -q /sys/fs/bpf; then find /sys/fs/bpf | sort; fi
		if command -v bpftool >/dev/null 2>&1; then
			bpftool cgroup show /sys/fs/cgroup/unified 2>/dev/null
			bpftool net show 2>/dev/null | grep -v '^$'
		fi
		echo "## netns"
		ip netns list 2>/dev/null | sort
		for t in iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy; do
			echo "## ${t}"
			"${t}-save" 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' | sort
		done
		echo "## nft"
		nft list tables 2>/dev/null | sort
		echo "## mounts"
		awk '{print $2, $3}' /proc/self/mounts | sort
		echo "## sysctls"
		sysctl "${SYSCTLS[@]}" 2>/dev/null | sort
		echo "## paths"
		for t in "${FIXED_PATHS[@]}" "$STATE" "$RUN"; do
			if [[ -e "$t" ]]; then echo "$t"; fi
		done
		echo "## cgroups"
		find /sys/fs/cgroup -maxdepth 2 -type d -name 'kubepods*' 2>/dev/null | sort
		echo "## processes"
		ps -eo comm= | grep -E '^(etcd|kube-.*|kubelet|containerd.*|runc|nodedns|pause|cilium.*)$' | sort || true
	) >"$out"
}

# -------------------------------------------------------------------- up

record_baseline() {
	local b="${STATE}/baseline"
	[[ -d "$b" ]] && return 0
	mkdir -p "$b"
	sysctl "${SYSCTLS[@]}" 2>/dev/null | sed 's/ = /=/' >"${b}/sysctls" || true
	: >"${b}/paths"
	local p
	for p in "${FIXED_PATHS[@]}"; do
		if [[ -e "$p" ]]; then echo "$p" >>"${b}/paths"; fi
	done
	local t
	for t in iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy; do
		"${t}-save" 2>/dev/null | sed -n 's/^:\([^ ]*\) .*/\1/p' | sort -u >"${b}/chains-${t}" || true
	done
	nft list tables 2>/dev/null | sort >"${b}/nft-tables" || true
}

# remove_new_nft_tables: iptables-nft creates a table (filter, nat, mangle,
# raw, in ip and ip6) on first use and never deletes it; delete those that
# did not exist before `up` and hold no rule any more.
remove_new_nft_tables() {
	local base="${STATE}/baseline/nft-tables" t
	[[ -f "$base" ]] || return 0
	while IFS= read -r t; do
		[[ -z "$t" ]] && continue
		grep -qxF "$t" "$base" && continue
		# A rule is a line inside a chain other than its type/policy line.
		local rules
		rules=$(nft list $t 2>/dev/null | awk '/^\tchain /{c=1; next} c && /^\t}/{c=0; next} c && !/^\t\ttype / && NF {n++} END {print n+0}')
		if [[ "$rules" == 0 ]]; then
			nft delete $t 2>/dev/null || true
		fi
	done < <(nft list tables 2>/dev/null)
}

node_network() {
	if ! ip link show "$NODE_LINK" >/dev/null 2>&1; then
		# No dummy driver on every machine: a bridge without ports holds
		# the node's addresses just as well.
		ip link add "$NODE_LINK" type dummy 2>/dev/null || ip link add "$NODE_LINK" type bridge
		ip link set "$NODE_LINK" up
	fi
	ip -6 addr replace "${NODE_IP6}/128" dev "$NODE_LINK" nodad
	ip addr replace "${NODE_IP4}/32" dev "$NODE_LINK"
	# Pods must reach the node and each other, never the outside.
	local ipt
	for ipt in iptables ip6tables; do
		if ! "$ipt" -w -L "$GUARD_CHAIN" -n >/dev/null 2>&1; then
			"$ipt" -w -N "$GUARD_CHAIN"
			if [[ "$CLUSTER_CNI" == cilium ]]; then
				# Cilium: each pod has its own lxc* veth on the host.
				"$ipt" -w -A "$GUARD_CHAIN" -i 'lxc+' -o 'lxc+' -j RETURN
				"$ipt" -w -A "$GUARD_CHAIN" -i 'lxc+' -j DROP
				"$ipt" -w -A "$GUARD_CHAIN" -o 'lxc+' -j DROP
			else
				"$ipt" -w -A "$GUARD_CHAIN" -i "$CNI_BRIDGE" ! -o "$CNI_BRIDGE" -j DROP
				"$ipt" -w -A "$GUARD_CHAIN" -o "$CNI_BRIDGE" ! -i "$CNI_BRIDGE" -j DROP
			fi
		fi
		"$ipt" -w -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null || "$ipt" -w -I FORWARD 1 -j "$GUARD_CHAIN"
	done
}

certs() {
	local d="${STATE}/pki"
	[[ -f "${d}/done" ]] && return 0
	mkdir -p "$d"
	(
		cd "$d"
		umask 077
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
			-subj "/CN=nodedns-cluster-ca" -keyout ca.key -out ca.crt 2>/dev/null
		sign() { # sign NAME SUBJECT [SAN]
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$2" \
				-keyout "$1.key" -out "$1.csr" 2>/dev/null
			local ext="${1}.ext"
			{
				echo "basicConstraints=CA:FALSE"
				echo "keyUsage=digitalSignature,keyEncipherment"
				if [[ -n "${3:-}" ]]; then
					echo "extendedKeyUsage=serverAuth"
					echo "subjectAltName=$3"
				else
					echo "extendedKeyUsage=clientAuth"
				fi
			} >"$ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
				-extfile "$ext" -out "$1.crt" 2>/dev/null
			rm -f "$1.csr" "$ext"
		}
		sign apiserver "/CN=kube-apiserver" \
			"IP:${NODE_IP6},IP:${NODE_IP4},IP:${KUBERNETES_SVC6},IP:127.0.0.1,IP:::1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
		sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		: >tokens.csv
		local who
		for who in "admin,kubernetes-admin,system:masters" "kubelet,system:node:${NODE_NAME},system:nodes" \
			"controller-manager,system:kube-controller-manager," "scheduler,system:kube-scheduler," \
			"kube-proxy,system:kube-proxy,"; do
			IFS=, read -r file user group <<<"$who"
			local tok
			tok=$(openssl rand -hex 16)
			echo "${tok},${user},${user},\"${group}\"" >>tokens.csv
			cat >"../${file}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nodedns
  cluster:
    server: https://[${NODE_IP6}]:${API_PORT}
    certificate-authority: ${d}/ca.crt
users:
- name: ${file}
  user:
    token: ${tok}
contexts:
- name: nodedns
  context: {cluster: nodedns, user: ${file}}
current-context: nodedns
EOF
		done
		touch done
	)
}

start_etcd() {
	start etcd etcd --name=nodedns-cluster --data-dir="${STATE}/etcd" \
		--listen-client-urls="$ETCD_CLIENT" --advertise-client-urls="$ETCD_CLIENT" \
		--listen-peer-urls="$ETCD_PEER" --initial-advertise-peer-urls="$ETCD_PEER" \
		--initial-cluster="nodedns-cluster=${ETCD_PEER}" --log-level=warn
	wait_for etcd 30 curl -fsS "${ETCD_CLIENT}/health"
}

start_apiserver() {
	local p="${STATE}/pki"
	start kube-apiserver "$(bin kube-apiserver)" \
		--etcd-servers="$ETCD_CLIENT" \
		--bind-address="$NODE_IP6" --advertise-address="$NODE_IP6" --secure-port="$API_PORT" \
		--service-cluster-ip-range="${SVC_CIDR6},${SVC_CIDR4}" \
		--tls-cert-file="${p}/apiserver.crt" --tls-private-key-file="${p}/apiserver.key" \
		--client-ca-file="${p}/ca.crt" --token-auth-file="${p}/tokens.csv" \
		--kubelet-client-certificate="${p}/apiserver-kubelet-client.crt" \
		--kubelet-client-key="${p}/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="${p}/sa.pub" --service-account-signing-key-file="${p}/sa.key" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--allow-privileged=true --profiling=false --v=1
	wait_for kube-apiserver 90 kubectl_ get --raw /readyz
}

start_controllers() {
	local p="${STATE}/pki"
	start kube-controller-manager "$(bin kube-controller-manager)" \
		--kubeconfig="${STATE}/controller-manager.kubeconfig" \
		--authentication-kubeconfig="${STATE}/controller-manager.kubeconfig" \
		--authorization-kubeconfig="${STATE}/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--service-account-private-key-file="${p}/sa.key" --root-ca-file="${p}/ca.crt" \
		--use-service-account-credentials=true \
		--service-cluster-ip-range="${SVC_CIDR6},${SVC_CIDR4}" \
		--controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' \
		--profiling=false --v=1
	start kube-scheduler "$(bin kube-scheduler)" \
		--kubeconfig="${STATE}/scheduler.kubeconfig" \
		--authentication-kubeconfig="${STATE}/scheduler.kubeconfig" \
		--authorization-kubeconfig="${STATE}/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1
}

# cgroup_driver is the driver kubelet and runc must share: systemd when it
# is PID 1 (it owns the cgroup tree), else cgroupfs.
cgroup_driver() {
	if [[ $(cat /proc/1/comm 2>/dev/null) == systemd ]]; then echo systemd; else echo cgroupfs; fi
}

start_containerd() {
	local c="${STATE}/containerd.toml"
	mkdir -p "${STATE}/containerd" "${RUN}/containerd" "${STATE}/cni/net.d" "${STATE}/cni/networks"
	cat >"$c" <<EOF
version = 2
root = "${STATE}/containerd"
state = "${RUN}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "${CONTAINERD_SOCK}"
[ttrpc]
  address = "${RUN}/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/nodedns-pause:v1"
  # Root in these sandboxes lacks CAP_SYS_RESOURCE: without this every
  # sandbox fails to start (runc cannot lower its oom_score_adj).
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = $([[ $(cgroup_driver) == systemd ]] && echo true || echo false)
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$([[ "$CLUSTER_CNI" == cilium ]] && echo "$CILIUM_CNI_BIN" || echo /usr/lib/cni)"
    conf_dir = "${STATE}/cni/net.d"
    max_conf_num = 1
EOF
	# Cilium's agent writes its own configuration there once it is ready.
	[[ "$CLUSTER_CNI" == cilium ]] || cat >"${STATE}/cni/net.d/10-nodedns.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "nodedns-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${CNI_BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${STATE}/cni/networks",
        "ranges": [
          [{"subnet": "${POD_CIDR6}", "gateway": "${POD_GW6}"}],
          [{"subnet": "${POD_CIDR4}", "gateway": "${POD_GW4}"}]
        ],
        "routes": [{"dst": "::/0"}, {"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
	start containerd containerd --config "$c"
	wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
}

start_kubelet() {
	local k="${STATE}/kubelet.yaml"
	mkdir -p "${STATE}/kubelet"
	printf 'nameserver %s\n' "$NODE_RESOLVER" >"${STATE}/resolv.conf"
	local driver old=""
	driver=$(cgroup_driver)
	[[ -f "$k" ]] && old=$(<"$k")
	cat >"$k" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "${NODE_IP6}"
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "${STATE}/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: ${driver}
failCgroupV1: false
failSwapOn: false
clusterDNS: ["${CLUSTER_DNS}"]
clusterDomain: cluster.local
resolvConf: "${STATE}/resolv.conf"
containerRuntimeEndpoint: "unix://${CONTAINERD_SOCK}"
imageServiceEndpoint: "unix://${CONTAINERD_SOCK}"
# Images are imported, never pulled; disk and memory pressure on a shared
# test machine must not evict the test's pods.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
maxPods: 110
EOF
	if [[ -n "$old" && "$old" != "$(<"$k")" ]] && running kubelet; then
		log "kubelet configuration changed (cluster DNS ${CLUSTER_DNS}): restarting kubelet"
		stop kubelet
	fi
	start kubelet "$(bin kubelet)" --config="$k" --kubeconfig="${STATE}/kubelet.kubeconfig" \
		--root-dir="${STATE}/kubelet" --cert-dir="${STATE}/kubelet/pki" \
		--hostname-override="$NODE_NAME" --node-ip="${NODE_IP6}" --v=1
}

start_proxy() {
	local k="${STATE}/kube-proxy.yaml" old=""
	[[ -f "$k" ]] && old=$(<"$k")
	cat >"$k" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ${KUBE_PROXY_MODE}
clientConnection: {kubeconfig: "${STATE}/kube-proxy.kubeconfig"}
hostnameOverride: ${NODE_NAME}
clusterCIDR: "${POD_CIDR6},${POD_CIDR4}"
bindAddress: "${NODE_IP6}"
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: ["${NODE_IP6}/128", "${NODE_IP4}/32"]
iptables: {localhostNodePorts: false}
# Leave the machine's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	if [[ -n "$old" && "$old" != "$(<"$k")" ]] && running kube-proxy; then
		log "kube-proxy configuration changed (mode ${KUBE_PROXY_MODE}): restarting kube-proxy"
		stop kube-proxy
	fi
	start kube-proxy "$(bin kube-proxy)" --config="$k" --v=1
}

node_ready() {
	# Ready, and with the address the API server dials for exec and logs.
	[[ $(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}') == "$NODE_IP6" ]] &&
	[[ $(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

default_sa() {
	kubectl_ -n default get serviceaccount default && kubectl_ -n default get configmap kube-root-ca.crt
}

up() {
	[[ $(id -u) == 0 ]] || die "needs root"
	need_pkgs containerd runc containernetworking-plugins etcd-server iptables nftables conntrack openssl curl iproute2 socat
	for c in bridge host-local loopback portmap; do
		[[ -x "/usr/lib/cni/${c}" ]] || die "CNI plugin ${c} missing from /usr/lib/cni (containernetworking-plugins)"
	done
	kube_bin
	mkdir -p "$STATE" "$RUN"
	record_baseline
	if [[ -f "${STATE}/cni-mode" && $(<"${STATE}/cni-mode") != "$CLUSTER_CNI" ]]; then
		die "the cluster is up with CLUSTER_CNI=$(<"${STATE}/cni-mode"), not ${CLUSTER_CNI}: run down first"
	fi
	echo "$CLUSTER_CNI" >"${STATE}/cni-mode"
	node_network
	certs
	start_etcd
	start_apiserver
	start_controllers
	if [[ "$CLUSTER_CNI" == cilium ]]; then cilium_prepare; fi
	start_containerd
	scripts/image.sh pause >/dev/null
	start_kubelet
	if [[ "$CLUSTER_CNI" == cilium ]]; then cilium_up; else start_proxy; fi
	wait_for "node ${NODE_NAME} Ready" 120 node_ready
	wait_for "default ServiceAccount and kube-root-ca.crt" 60 default_sa
	log "cluster up: node ${NODE_NAME} Ready, cluster DNS ${CLUSTER_DNS}"
	echo "$KUBECONFIG_ADMIN"
}

# ------------------------------------------------------------------ down

# remove_chains IPT BASELINE: delete every jump into, and then every chain
# of, the chains kubelet, kube-proxy, CNI and this script made (KUBE-*,
# CNI-*, our guard) that were not there before `up`.
remove_chains() {
	local t=$1 base=$2 table chain line
	command -v "${t}-save" >/dev/null 2>&1 || return 0
	local dump
	dump=$("${t}-save" 2>/dev/null) || return 0
	local ours
	ours=$(sed -n 's/^:\(\(KUBE-\|CNI-\|CILIUM_\|'"$GUARD_CHAIN"'\)[^ ]*\) .*/\1/p' <<<"$dump" | sort -u)
	if [[ -f "$base" ]]; then
		ours=$(comm -23 <(echo "$ours") "$base")
	fi
	[[ -z "$ours" ]] && return 0
	local re
	re=$(paste -sd'|' <<<"$ours")
	# Rules that jump into our chains, in every table, deleted by spec.
	table=""
	while IFS= read -r line; do
		case "$line" in
		\**) table=${line#\*} ;;
		-A\ *)
			if [[ "$line" =~ -j\ ($re)( |$) ]] || [[ "$line" =~ -g\ ($re)( |$) ]]; then
				chain=$(awk '{print $2}' <<<"$line")
				if ! grep -qx "$chain" <<<"$ours"; then
					eval "$t -w -t $table -D ${line#-A }" 2>/dev/null || true
				fi
			fi
			;;
		esac
	done <<<"$dump"
	# Then flush and delete the chains themselves.
	dump=$("${t}-save" 2>/dev/null)
	table=""
	while IFS= read -r line; do
		case "$line" in
		\**) table=${line#\*} ;;
		:*)
			chain=${line#:}
			chain=${chain%% *}
			if grep -qx "$chain" <<<"$ours"; then
				"$t" -w -t "$table" -F "$chain" 2>/dev/null || true
			fi
			;;
		esac
	done <<<"$dump"
	table=""
	while IFS= read -r line; do
		case "$line" in
		\**) table=${line#\*} ;;
		:*)
			chain=${line#:}
			chain=${chain%% *}
			if grep -qx "$chain" <<<"$ours"; then
				"$t" -w -t "$table" -X "$chain" 2>/dev/null || true
			fi
			;;
		esac
	done <<<"$dump"
}

stop_pods() {
	# Ask kubelet to stop every pod (it runs CNI DEL and unmounts volumes),
	# with the controllers stopped so nothing is recreated.
	if running kubelet && running kube-apiserver; then
		log "deleting all pods"
		kubectl_ delete daemonsets,deployments,statefulsets,replicasets,jobs --all -A --wait=false >/dev/null 2>&1 || true
		kubectl_ delete pods --all -A --grace-period=10 --wait=false >/dev/null 2>&1 || true
		local i
		for i in $(seq 1 60); do
			if [[ -z "$(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null)" ]]; then
				break
			fi
			sleep 1
		done
	fi
	# Whatever is left: kill the tasks and delete the containers directly.
	if [[ -S "$CONTAINERD_SOCK" ]]; then
		local id
		for id in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		sleep 1
		for id in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io containers ls -q 2>/dev/null); do
			ctr --address "$CONTAINERD_SOCK" -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
		done
	fi
}

kill_leftovers() {
	# containerd's shims outlive it; so can the agent a DaemonSet ran if
	# kubelet was killed. Only processes whose command line names this
	# cluster's state are touched.
	local pid
	for pid in $(pgrep -f "containerd-shim.*${RUN}/containerd" 2>/dev/null; pgrep -f "${STATE}" 2>/dev/null); do
		[[ "$pid" == "$$" ]] && continue
		kill -KILL "$pid" 2>/dev/null || true
	done
}

unmount_all() {
	local m
	for _ in 1 2 3; do
		m=$(awk '{print $2}' /proc/self/mounts | grep -E "^(${STATE}|${RUN}|/run/netns/cni-|/run/containerd|/var/lib/kubelet)" | sort -r || true)
		[[ -z "$m" ]] && return 0
		while IFS= read -r p; do
			umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true
		done <<<"$m"
	done
}

remove_cgroups() {
	local d
	for d in /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods*; do
		[[ -d "$d" ]] || continue
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
}

restore_sysctls() {
	local f="${STATE}/baseline/sysctls" kv
	[[ -f "$f" ]] || return 0
	while IFS= read -r kv; do
		[[ -z "$kv" ]] && continue
		local cur
		cur=$(sysctl -n "${kv%%=*}" 2>/dev/null) || continue
		[[ "$cur" == "${kv#*=}" ]] || sysctl -q -w "$kv" >/dev/null 2>&1 || log "could not restore ${kv}"
	done <"$f"
}

down() {
	[[ $(id -u) == 0 ]] || die "needs root"
	if [[ ! -d "$STATE" && ! -d "$RUN" ]] && ! ip link show "$NODE_LINK" >/dev/null 2>&1; then
		log "not up"
		return 0
	fi
	KUBE_BIN="${CACHE}/kubernetes-${KUBE_VERSION:-v1.34.4}/bin"
	stop kube-controller-manager kube-scheduler
	stop_pods
	# After the pods: kubelet's CNI DEL goes through the agent.
	cilium_stop
	stop kubelet kube-proxy
	stop kube-apiserver
	stop etcd
	stop_pods
	stop containerd
	kill_leftovers
	cilium_cleanup
	unmount_all
	# /run/netns, made a shared mount for the Cilium agent by
	# cluster-cilium.sh when it was none, once the pods' namespaces are gone.
	if [[ -f "${STATE}/cilium/mounted-netns" ]] && mountpoint -q /run/netns; then
		umount /run/netns 2>/dev/null || umount -l /run/netns
	fi
	# kube-proxy removes its own rules in every mode it knows.
	if [[ -x "$(bin kube-proxy)" ]]; then
		"$(bin kube-proxy)" --cleanup --v=0 >/dev/null 2>&1 || true
	fi
	local t
	for t in iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy; do
		remove_chains "$t" "${STATE}/baseline/chains-${t}"
	done
	remove_new_nft_tables
	# An agent killed without its teardown leaves the link and rules behind.
	if [[ -x "$(command -v ip)" ]] && ip link show nodelocaldns >/dev/null 2>&1; then
		log "removing the nodedns link and rules left by a killed agent"
		local ips
		ips=$(ip -o addr show dev nodelocaldns | awk '{print $4}' | cut -d/ -f1 | paste -sd, -)
		(cd "$REPO" && go run ./cmd/nodedns cleanup --local-ip "${ips:-$CLUSTER_DNS}") >&2 || true
	fi
	local l
	for l in "$CNI_BRIDGE" "$NODE_LINK" $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^veth' || true); do
		# veths of pods vanish with their namespaces; a leftover one is
		# enslaved to our bridge.
		if [[ "$l" == veth* ]]; then
			ip -o link show "$l" 2>/dev/null | grep -c "master ${CNI_BRIDGE}" >/dev/null || continue
		fi
		ip link del "$l" 2>/dev/null || true
	done
	local ns
	for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do
		ip netns del "$ns" 2>/dev/null || true
	done
	remove_cgroups
	restore_sysctls
	conntrack -D -s "$POD_CIDR4" >/dev/null 2>&1 || true
	conntrack -D -f ipv6 -s "$POD_CIDR6" >/dev/null 2>&1 || true
	local p
	for p in "${FIXED_PATHS[@]}"; do
		if [[ -e "$p" ]] && ! grep -qx "$p" "${STATE}/baseline/paths" 2>/dev/null; then
			rm -rf "$p"
		fi
	done
	rm -rf "$STATE" "$RUN"
	log "cluster down"
}

status() {
	local c
	for c in "${COMPONENTS[@]}"; do
		if running "$c"; then echo "$c: running (pid $(<"$(pidfile "$c")"))"; else echo "$c: stopped"; fi
	done
}

case "${1:-}" in
up)
	shift
	while (($#)); do
		case "$1" in
		--cluster-dns=*) CLUSTER_DNS=${1#*=} ;;
		--cluster-dns) CLUSTER_DNS=${2:?--cluster-dns needs an IP}; shift ;;
		*) die "up: unknown argument $1 (want --cluster-dns IP)" ;;
		esac
		shift
	done
	up
	;;
down) down ;;
status) status ;;
kubectl)
	shift
	kube_bin >/dev/null 2>&1 || KUBE_BIN="${CACHE}/kubernetes-${KUBE_VERSION:-v1.34.4}/bin"
	exec "$(bin kubectl)" --kubeconfig "$KUBECONFIG_ADMIN" "$@"
	;;
snapshot)
	[[ -n "${2:-}" ]] || die "snapshot needs a file"
	snapshot "$2"
	;;
env)
	cat <<EOF
NODE_NAME=${NODE_NAME}
NODE_IP6=${NODE_IP6}
NODE_IP4=${NODE_IP4}
NODE_RESOLVER=${NODE_RESOLVER}
CLUSTER_DNS=${CLUSTER_DNS}
SVC_CIDR6=${SVC_CIDR6}
SVC_CIDR4=${SVC_CIDR4}
POD_CIDR6=${POD_CIDR6}
POD_CIDR4=${POD_CIDR4}
CONTAINERD_SOCK=${CONTAINERD_SOCK}
KUBECONFIG=${KUBECONFIG_ADMIN}
STATE=${STATE}
EOF
	;;
*)
	echo "usage: scripts/cluster.sh up|down|status|kubectl ARGS...|snapshot FILE|env" >&2
	exit 2
	;;
esac
