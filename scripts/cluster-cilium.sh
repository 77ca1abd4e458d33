# shellcheck shell=bash
# Cilium as the cluster's network, for `CLUSTER_CNI=cilium scripts/cluster.sh
# up`: sourced by scripts/cluster.sh, which calls cilium_prepare before
# containerd starts, cilium_up once kubelet runs, cilium_stop once the pods
# are gone and cilium_cleanup in `down`.
#
# cilium-agent runs as an ordinary process, built by scripts/cilium-bin.sh
# from the github.com/cilium/cilium module; it compiles its BPF programs with
# Debian's clang at start. No kube-proxy: the agent replaces it
# (kube-proxy-replacement, socket load-balancing on the cgroup v2 root), and
# LocalRedirectPolicy is on. Native routing on one node, no tunnel, no
# masquerading; the agent attaches only to the node link (ndc-node0), never
# to the machine's own interfaces. No operator (it cannot be built here, see
# scripts/cilium-bin.sh): the CRDs are applied from the module, and the
# node's pod ranges, inside the bridge mode's, are set on the Node object for
# the agent's --ipam=kubernetes.
#
# Host state it changes and cilium_cleanup undoes: bpffs at /sys/fs/bpf
# (mounted if it was not) and the maps, programs and links pinned there;
# cgroup2 at /run/cilium/cgroupv2 and the socket-LB programs attached to its
# root; links cilium_host/cilium_net and lxc*; CILIUM_* iptables chains
# (removed by cluster.sh with the KUBE-* ones); /run/cilium and
# /var/lib/cilium; the sysctls cluster.sh records. The agent runs in a
# mount namespace of its own where kernel.unprivileged_bpf_disabled is a
# plain file: it writes 1 there, which the kernel would never let anyone
# undo until a reboot.

CILIUM_CGROUP=/run/cilium/cgroupv2
CILIUM_BPFFS=/sys/fs/bpf
CILIUM_STATE="${STATE}/cilium"
CILIUM_CNI_BIN="${STATE}/cni/bin"

# cilium_bin: build or find the Cilium binaries (sets CILIUM_DIR).
cilium_bin() {
	CILIUM_DIR=$(scripts/cilium-bin.sh | tail -n 1)
}

# cilium_prepare: the CNI plugin directory containerd uses (Debian's plugins
# and cilium-cni) and the mounts the agent expects, made in the host's mount
# namespace so that they outlive the agent and cleanup sees them.
cilium_prepare() {
	cilium_bin
	mkdir -p "$CILIUM_STATE" "$CILIUM_CNI_BIN"
	local p
	for p in /usr/lib/cni/*; do
		ln -sfn "$p" "${CILIUM_CNI_BIN}/${p##*/}"
	done
	ln -sfn "${CILIUM_DIR}/bin/cilium-cni" "${CILIUM_CNI_BIN}/cilium-cni"
	# The configuration the agent's --write-cni-conf-when-ready writes, there
	# before containerd starts: containerd 1.6 never loaded the one the agent
	# (or this script, renaming a file in) dropped in a few seconds after it
	# started (the node stayed NotReady, "cni plugin not initialized"). `up`
	# returns only once the agent is healthy, so no pod reaches the plugin
	# before it.
	# The pods' network namespaces, for the agent: it destroys the sockets
	# connected to a load-balancing backend that goes away (an LRP's agent
	# pod in a rollout: bpf-lb-sock-terminate-pod-connections, on by
	# default) in each namespace under /var/run/cilium/netns, which its
	# Helm chart mounts from the host's /run/netns; without them a client's
	# connected UDP socket stays pinned to a gone pod. The agent's own mount
	# namespace (below) binds /run/netns there; for the namespaces made
	# after it starts to reach it, /run/netns must be a shared mount before
	# (as `ip netns add` leaves it; down undoes it when made here).
	if ! mountpoint -q /run/netns; then
		mkdir -p /run/netns
		mount --bind /run/netns /run/netns
		mount --make-shared /run/netns
		touch "${CILIUM_STATE}/mounted-netns"
	elif [[ $(findmnt -no PROPAGATION /run/netns) != shared* ]]; then
		die "/run/netns is a mount but not a shared one ($(findmnt -no PROPAGATION /run/netns)): the agent would not see the pods' network namespaces; make it shared (mount --make-shared /run/netns) or unmount it"
	fi
	mkdir -p "${STATE}/cni/net.d"
	printf '%s\n' '{' '  "cniVersion": "1.0.0",' '  "name": "cilium",' '  "plugins": [' \
		'    {"type": "cilium-cni", "enable-debug": false, "log-file": "/var/run/cilium/cilium-cni.log"}' \
		'  ]' '}' >"${STATE}/cni/net.d/05-cilium.conflist"
	if ! mountpoint -q "$CILIUM_BPFFS"; then
		mount -t bpf bpf "$CILIUM_BPFFS"
		touch "${CILIUM_STATE}/mounted-bpffs"
	fi
	if ! mountpoint -q "$CILIUM_CGROUP"; then
		mkdir -p "$CILIUM_CGROUP"
		mount -t cgroup2 none "$CILIUM_CGROUP"
		touch "${CILIUM_STATE}/mounted-cgroup2"
	fi
}

cilium_agent_healthy() {
	"${CILIUM_DIR}/bin/cilium-dbg" status --brief >/dev/null 2>&1
}

node_registered() { kubectl_ get node "$NODE_NAME"; }

# cilium_up: the CRDs, the node's pod ranges and the agent; returns once the
# agent reports healthy.
cilium_up() {
	cilium_bin
	kubectl_ apply --server-side -f "${CILIUM_DIR}/crds" >/dev/null
	wait_for "node ${NODE_NAME} registered" 120 node_registered
	if [[ -z "$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.spec.podCIDRs}')" ]]; then
		kubectl_ patch node "$NODE_NAME" --type merge \
			-p "{\"spec\":{\"podCIDR\":\"${CILIUM_POD_CIDR6}\",\"podCIDRs\":[\"${CILIUM_POD_CIDR6}\",\"${POD_CIDR4}\"]}}" >/dev/null
	fi
	# A file standing in for kernel.unprivileged_bpf_disabled in the agent's
	# own mount namespace (see above).
	sysctl -n kernel.unprivileged_bpf_disabled >"${CILIUM_STATE}/unprivileged_bpf_disabled"
	local agent=(
		"${CILIUM_DIR}/bin/cilium-agent"
		--k8s-kubeconfig-path="$KUBECONFIG_ADMIN"
		--cluster-name=nodedns --cluster-id=0 --identity-allocation-mode=crd --k8s-namespace=kube-system
		--lib-dir="${CILIUM_DIR}/lib" --bpf-root="$CILIUM_BPFFS" --cgroup-root="$CILIUM_CGROUP"
		--enable-ipv4=true --enable-ipv6=true --ipam=kubernetes
		--routing-mode=native --ipv4-native-routing-cidr="$POD_CIDR4" --ipv6-native-routing-cidr="$POD_CIDR6"
		--auto-direct-node-routes=false
		--enable-ipv4-masquerade=false --enable-ipv6-masquerade=false
		--devices="$NODE_LINK" --direct-routing-device="$NODE_LINK"
		--kube-proxy-replacement=true --bpf-lb-sock=true
		--enable-auto-protect-node-port-range=false
		--enable-local-redirect-policy=true
		--enable-policy=default
		--enable-l7-proxy=false --enable-hubble=false
		--enable-health-checking=false --enable-endpoint-health-checking=false
		--agent-health-port=9879 --prometheus-serve-addr=
		--cni-exclusive=false
	)
	# shellcheck disable=SC2016 # expanded by the inner shell
	# --propagation slave: the pods' namespaces mounted on the host's
	# /run/netns later reach the agent's copy (and its mounts stay its own).
	start cilium-agent unshare --mount --propagation slave sh -c \
		'mount --bind "$1" /proc/sys/kernel/unprivileged_bpf_disabled && mkdir -p /run/cilium/netns && mount --rbind /run/netns /run/cilium/netns && shift && exec "$@"' \
		sh "${CILIUM_STATE}/unprivileged_bpf_disabled" \
		env "PATH=${CILIUM_DIR}/bin:${PATH}" "K8S_NODE_NAME=${NODE_NAME}" "${agent[@]}"
	wait_for "cilium-agent healthy" 300 cilium_agent_healthy
}

cilium_stop() {
	stop cilium-agent
}

# cilium_cleanup: undo what the agent did to the host (it keeps its state on
# purpose when it stops). Safe to run when Cilium never ran.
cilium_cleanup() {
	# The links first: the tc/tcx programs attached to them go with them.
	local l
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^(cilium_|lxc)' || true); do
		ip link del "$l" 2>/dev/null || true
	done
	# Routes and rules the agent adds to its own tables (2004/2005).
	local fam t
	for fam in -4 -6; do
		for t in 2004 2005; do
			while ip "$fam" rule del table "$t" 2>/dev/null; do :; done
			ip "$fam" route flush table "$t" 2>/dev/null || true
		done
	done
	# Socket LB: programs attached to the cgroup v2 root. Unpinning a
	# bpf_link detaches it; programs attached without a link are detached
	# by id.
	if mountpoint -q "$CILIUM_BPFFS"; then
		rm -rf "${CILIUM_BPFFS}/cilium"
		rm -f "${CILIUM_BPFFS}"/tc/globals/cilium_* 2>/dev/null || true
		rmdir "${CILIUM_BPFFS}/tc/globals" "${CILIUM_BPFFS}/tc" 2>/dev/null || true
	fi
	if mountpoint -q "$CILIUM_CGROUP" && command -v bpftool >/dev/null 2>&1; then
		local id type
		bpftool cgroup show "$CILIUM_CGROUP" 2>/dev/null | awk '$3 ~ /^cil_/ {print $1, $2}' |
			while read -r id type; do
				bpftool cgroup detach "$CILIUM_CGROUP" "$type" id "$id" 2>/dev/null || true
			done
	fi
	# Nothing but Cilium uses /run/cilium.
	if mountpoint -q "$CILIUM_CGROUP"; then umount "$CILIUM_CGROUP" 2>/dev/null || umount -l "$CILIUM_CGROUP"; fi
	if [[ -f "${CILIUM_STATE}/mounted-bpffs" ]]; then
		if mountpoint -q "$CILIUM_BPFFS"; then umount "$CILIUM_BPFFS" 2>/dev/null || umount -l "$CILIUM_BPFFS"; fi
	fi
	rm -rf /run/cilium /var/lib/cilium
}
