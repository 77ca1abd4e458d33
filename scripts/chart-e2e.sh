#!/usr/bin/env bash
# The Helm chart on a real single-node cluster (scripts/cluster.sh): what
# `helm install`, `helm upgrade` and `helm uninstall` do to a node.
#
#   scripts/chart-e2e.sh          bring the cluster up, build and import the
#                                 images, run every step, take the cluster
#                                 down and check the machine is as before
#   KEEP=1 scripts/chart-e2e.sh   leave the cluster up
#   KUBE_PROXY_MODE=nftables scripts/chart-e2e.sh
#                                 the same with kube-proxy in nftables mode
#
# Steps:
#  1. helm install with the kube-dns ClusterIP intercepted and metrics on
#     the node's IP: the DaemonSet Ready; the link holds both addresses; the
#     agent's --cluster-dns is the kube-dns-upstream Service's ClusterIP
#     (kubelet expanded $(KUBE_DNS_UPSTREAM_SERVICE_HOST)); cluster names
#     answered on 169.254.20.10 and on the kube-dns ClusterIP (which
#     kube-proxy load-balances to pods that run no DNS server), from the node
#     and from a pod, with no conntrack entry; /metrics on the node's IP at
#     port 9253.
#  2. helm upgrade of a config value only: the same pod, no restart, the
#     change applied live (configuration reloaded).
#  3. helm upgrade with --teardown=false: a surge rollout; the new agents
#     will leave their link and rules behind when they stop, as an agent
#     killed with SIGKILL would.
#  4. helm uninstall: the pre-delete hooks stop the agents, run
#     `nodedns cleanup` on the node, and succeed; no link, no rule in either
#     iptables backend, no pod, no hook object left.
#  5. scripts/cluster.sh down: the machine is as before.
#
# Needs root; installs what it needs. Exits non-zero on the first failed
# check, after cleaning up.
set -euo pipefail
cd "$(dirname "$0")/.."

KEEP=${KEEP:-0}
KUBE_DNS_IP=fdd5:6e6f:6465:96::a
KUBE_PROXY_MODE=${KUBE_PROXY_MODE:-iptables}
export KUBE_PROXY_MODE
START=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-chart-e2e.XXXXXX")
failed=1

log() { printf '[chart-e2e %3ds] %s\n' "$(($(date +%s) - START))" "$*" >&2; }
step() { printf '\n[chart-e2e %3ds] ===== %s\n' "$(($(date +%s) - START))" "$*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}
ok() { log "ok: $*"; }

k() { scripts/cluster.sh kubectl "$@"; }
h() { "$HELM" --kubeconfig "$KUBECONFIG" "$@"; }

# A command that fails outside a check (and so ends the run under set -e)
# is named: file, line, command, status, and the functions it ran in. A
# subshell's failure is named where this shell sees it.
set -E
on_err() {
	local i
	[[ $BASHPID == "$$" ]] || return 0
	log "FAIL: ${BASH_SOURCE[1]}:$2: $3 exited $1"
	for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
		log "  in ${FUNCNAME[i]}, called from ${BASH_SOURCE[i + 1]}:${BASH_LINENO[i]}"
	done
}
trap 'on_err $? "$LINENO" "$BASH_COMMAND"' ERR

# cleanup, on exit whatever ended the run: every step runs whatever the
# ones before it did (errexit off: under set -e one failed command would
# end the trap, leaving the cluster up, and the script with that command's
# status, in silence); a step that fails where it matters (the cluster not
# taken down, the machine not as before or not compared) is named and
# fails the run; the logs directory or the work directory not written or
# not removed is only reported.
cleanup() {
	local rc=$? st
	set +e
	trap - ERR
	if [[ "$KEEP" != 1 ]]; then
		if [[ $rc != 0 ]]; then
			mkdir -p "${work}/logs" || log "cleanup: could not make ${work}/logs"
			k -n kube-system logs -l app.kubernetes.io/instance=nodedns --all-containers --tail=200 --prefix >"${work}/logs/pods.log" 2>&1 || true
			k get events -A --sort-by=.lastTimestamp >"${work}/logs/events.txt" 2>&1 || true
			tail -n 40 "${work}/logs/pods.log" >&2 || true
		fi
		scripts/cluster.sh down
		st=$?
		if ((st != 0)); then
			log "FAIL: cleanup: scripts/cluster.sh down failed (exit ${st}; its output above)"
			rc=1
		fi
		if [[ $rc == 0 && $failed == 0 ]]; then
			step "5. scripts/cluster.sh down leaves nothing behind"
			if ! scripts/cluster.sh snapshot "${work}/after.txt"; then
				log "FAIL: cleanup: scripts/cluster.sh snapshot failed: the machine was not compared with before 'up'"
				rc=1
			elif ! diff -u "${work}/before.txt" "${work}/after.txt" >&2; then
				log "FAIL: the machine differs from before 'up' (diff above)"
				rc=1
			else
				ok "the machine is as before"
			fi
		fi
	fi
	if [[ $rc == 0 ]]; then
		rm -rf "$work" || log "cleanup: could not remove ${work} (left behind)"
		log "PASS in $(($(date +%s) - START))s"
	else
		log "logs kept in ${work}"
	fi
	exit "$rc"
}
trap cleanup EXIT

deps() {
	local missing=() p
	for p in dnsutils jq iptables curl conntrack nftables; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c "install ok installed" >/dev/null || missing+=("$p")
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	fi
}

# ours_left prints how many nodedns rules exist in all four tables.
ours_left() {
	(iptables-nft-save; ip6tables-nft-save; iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c 'nodedns:' || true
}

# rules_ok: the agent's rules for each local IP exist once each: 16 for
# 169.254.20.10 (NOTRACK and ACCEPT for udp and tcp, and the DNS fallback's
# NAT jump, masquerade and FORWARD accept: scripts/e2e.sh, rules_once), 10
# for the kube-dns ClusterIP (kube-proxy's DNAT is its fallback); no rule
# twice, the IPv4 NODEDNS-FALLBACK chain once. Prints what is wrong.
rules_ok() {
	local ip want save got dups
	for ip in 169.254.20.10=16 "${KUBE_DNS_IP}=10"; do
		want=${ip#*=} ip=${ip%=*}
		if [[ "$ip" == *:* ]]; then save=ip6tables-nft-save; else save=iptables-nft-save; fi
		got=$("$save" | grep 'comment "nodedns:' | grep -cF -- " ${ip} " || true)
		[[ "$got" == "$want" ]] || { echo "${save}: ${got} nodedns rules for ${ip}, want ${want}"; return 1; }
		dups=$("$save" | grep 'comment "nodedns:' | sort | uniq -d)
		[[ -z "$dups" ]] || { echo "${save}: duplicated rules: ${dups}"; return 1; }
	done
	got=$(iptables-nft-save | grep -c '^:NODEDNS-FALLBACK ' || true)
	[[ "$got" == 1 ]] || { echo "iptables-nft-save: ${got} NODEDNS-FALLBACK chains, want 1"; return 1; }
}

agent_pod() {
	k -n kube-system get pods -l app.kubernetes.io/name=nodedns,app.kubernetes.io/instance=nodedns \
		-o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}' | head -n 1
}

# ------------------------------------------------------------------ setup

[[ $(id -u) == 0 ]] || fail "needs root"
deps
HELM=${NODEDNS_HELM:-$(scripts/helm.sh | tail -n 1)}
scripts/cluster.sh snapshot "${work}/before.txt"
step "cluster up"
KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
export KUBECONFIG
eval "$(scripts/cluster.sh env | grep -E '^(NODE_IP6|NODE_NAME)=')"
IMAGE=$(scripts/image.sh nodedns | tail -n 1)
CLIENT=$(scripts/image.sh client | tail -n 1)
ok "node ${NODE_NAME} Ready; images ${IMAGE}, ${CLIENT}"

# The central DNS the agent's kube-dns-upstream Service selects: pods
# labelled k8s-app=kube-dns that run no DNS server, so that every answer
# below can only come from the agent.
cat >"${work}/kube-dns.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: central-dns, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: dns, image: ${CLIENT}, imagePullPolicy: Never}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: ${KUBE_DNS_IP}
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata: {name: chart-e2e-client, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: None
  dnsConfig:
    nameservers: ["${KUBE_DNS_IP}"]
    searches: ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]
  containers:
  - {name: client, image: ${CLIENT}, imagePullPolicy: Never}
EOF
k apply -f "${work}/kube-dns.yaml" >/dev/null
k -n kube-system rollout status deployment/central-dns --timeout=120s >/dev/null || fail "central-dns not ready"
k wait --for=condition=Ready pod/chart-e2e-client --timeout=120s >/dev/null || fail "client pod not ready"
for i in $(seq 1 50); do
	if [[ "$KUBE_PROXY_MODE" == nftables ]]; then
		# grep -c, not -q: with pipefail, the lister killed by SIGPIPE
		# would fail a check that matched.
		nft list table ip6 kube-proxy 2>/dev/null | grep -cF "$KUBE_DNS_IP" >/dev/null && break
	else
		ip6tables-nft-save -t nat | grep -c -- "-d ${KUBE_DNS_IP}/128 .*KUBE-SVC" >/dev/null && break
	fi
	sleep 0.2
done
((i < 50)) || fail "kube-proxy (${KUBE_PROXY_MODE} mode) has no rule for ${KUBE_DNS_IP}"
ok "kube-proxy (${KUBE_PROXY_MODE} mode) load-balances ${KUBE_DNS_IP} to central-dns, which runs no DNS server"

# ------------------------------------------------------------------ step 1
step "1. helm install (kube-dns ClusterIP intercepted, metrics on the node's IP)"
values=(--set "image.repository=${IMAGE%:*}" --set "image.tag=${IMAGE##*:}" --set image.pullPolicy=Never
	--set kubeDNS.intercept=true --set "kubeDNS.clusterIP=${KUBE_DNS_IP}" --set metrics.enabled=true
	--set cleanup.timeout=2m)
h install nodedns deploy/helm/nodedns --namespace kube-system "${values[@]}" --wait --timeout 3m >"${work}/install.txt" ||
	fail "helm install: $(cat "${work}/install.txt")"
grep -q "nodedns .* is rolling out" "${work}/install.txt" || fail "helm install printed no NOTES: $(cat "${work}/install.txt")"
k -n kube-system rollout status ds/nodedns --timeout=120s >/dev/null || fail "DaemonSet not Ready"
ok "helm install --wait: DaemonSet Ready"
pod=$(agent_pod)
upstream_ip=$(k -n kube-system get svc kube-dns-upstream -o jsonpath='{.spec.clusterIP}')
[[ -n "$upstream_ip" ]] || fail "no kube-dns-upstream Service"
cmdline=$(k -n kube-system exec "$pod" -c nodedns -- cat /proc/1/cmdline | tr '\0' ' ')
[[ "$cmdline" == *"--cluster-dns=${upstream_ip} "* ]] || fail "agent command line '${cmdline}' lacks --cluster-dns=${upstream_ip}"
ok "agent runs with --cluster-dns=${upstream_ip}, the kube-dns-upstream Service (from its environment)"
for ip in 169.254.20.10 "$KUBE_DNS_IP"; do
	ip addr show dev nodelocaldns | grep -qF " ${ip}/" || fail "${ip} not on nodelocaldns"
done
why=$(rules_ok) || fail "rules after the install: ${why}"
ok "link nodelocaldns holds 169.254.20.10 and ${KUBE_DNS_IP}; their rules once each (16 and 10)"
# Flows that began before the rules existed (pods started before the agent
# query 169.254.20.10 too) stay tracked until they time out: forget them, so
# that what is counted below is the queries sent now.
conntrack -D -d 169.254.20.10 >/dev/null 2>&1 || true
conntrack -D -f ipv6 -d "$KUBE_DNS_IP" >/dev/null 2>&1 || true
for server in 169.254.20.10 "$KUBE_DNS_IP"; do
	got=$(dig +short +time=2 +tries=2 @"$server" kubernetes.default.svc.cluster.local AAAA)
	[[ "$got" == fdd5:6e6f:6465:96::1 ]] || fail "dig @${server} kubernetes.default AAAA: '${got}'"
done
got=$(k exec chart-e2e-client -- dig +short +search kubernetes AAAA)
[[ "$got" == fdd5:6e6f:6465:96::1 ]] || fail "pod with nameserver ${KUBE_DNS_IP}: dig kubernetes AAAA: '${got}'"
tracked=$(conntrack -L -f ipv6 -d "$KUBE_DNS_IP" 2>/dev/null | grep -c 'dport=53' || true)
tracked4=$(conntrack -L -d 169.254.20.10 2>/dev/null | grep -c 'dport=53' || true)
[[ "$tracked" == 0 && "$tracked4" == 0 ]] || fail "conntrack holds DNS flows: ${tracked} to ${KUBE_DNS_IP}, ${tracked4} to 169.254.20.10"
ok "cluster names answered on 169.254.20.10 and on ${KUBE_DNS_IP}, from the node and from a pod; no conntrack entry"
metrics=$(curl -fsS "http://[${NODE_IP6}]:9253/metrics") || fail "no metrics on [${NODE_IP6}]:9253"
grep -q '^nodedns_' <<<"$metrics" || fail "no nodedns_ series on the node's IP"
ok "metrics on the node's IP [${NODE_IP6}]:9253 ($(grep -c '^nodedns_' <<<"$metrics") nodedns_ samples)"

# ------------------------------------------------------------------ step 2
step "2. helm upgrade of a config value: applied live, no restart"
h upgrade nodedns deploy/helm/nodedns --namespace kube-system --reuse-values --set config.log-level=debug --wait --timeout 3m >/dev/null ||
	fail "helm upgrade (log-level)"
k -n kube-system get configmap nodedns -o jsonpath='{.data.config\.yaml}' | grep -c '^log-level: debug$' >/dev/null || fail "ConfigMap not updated"
reloaded=0
for i in $(seq 1 90); do
	if k -n kube-system logs "$pod" -c nodedns | grep -c 'configuration reloaded' >/dev/null; then
		reloaded=1
		break
	fi
	sleep 2
done
[[ $reloaded == 1 ]] || fail "no 'configuration reloaded' within 180s"
[[ $(agent_pod) == "$pod" && $(k -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}') == 0 ]] ||
	fail "the agent pod was replaced or restarted"
ok "config change applied by the running agent ${pod} (not restarted)"

# ------------------------------------------------------------------ step 3
step "3. helm upgrade --set extraArgs={--teardown=false}: a surge rollout"
h upgrade nodedns deploy/helm/nodedns --namespace kube-system --reuse-values --set 'extraArgs={--teardown=false}' --wait --timeout 3m >/dev/null ||
	fail "helm upgrade (teardown)"
k -n kube-system rollout status ds/nodedns --timeout=120s >/dev/null || fail "rollout after the upgrade"
new=$(agent_pod)
[[ "$new" != "$pod" ]] || fail "the upgrade did not replace the pod"
why=$(rules_ok) || fail "rules after the rollout: ${why}"
ok "new agent ${new}; rules exist once each"

# ------------------------------------------------------------------ step 4
step "4. helm uninstall: the hooks stop the agent and clean the node"
t0=$(date +%s)
h uninstall nodedns --namespace kube-system --wait --timeout 5m >"${work}/uninstall.txt" 2>&1 ||
	fail "helm uninstall: $(cat "${work}/uninstall.txt")"
ok "helm uninstall succeeded in $(($(date +%s) - t0))s"
ip link show nodelocaldns >/dev/null 2>&1 && fail "link nodelocaldns still there after uninstall"
left=$(ours_left)
[[ "$left" == 0 ]] || fail "${left} nodedns rules left after uninstall"
ok "no link, no rule in either backend (the agents ran with --teardown=false: the cleanup hook removed them)"
# Helm waits for the hook DaemonSet's deletion, not for its pods, which
# the garbage collector deletes right after (gracefully).
for i in $(seq 1 60); do
	objs=$(k -n kube-system get ds,job,pod,svc,cm,sa,role,rolebinding -l app.kubernetes.io/instance=nodedns --no-headers 2>/dev/null | wc -l)
	cluster_objs=$(k get clusterrole,clusterrolebinding -l app.kubernetes.io/instance=nodedns --no-headers 2>/dev/null | wc -l)
	[[ "$objs" == 0 && "$cluster_objs" == 0 ]] && break
	sleep 1
done
[[ "$objs" == 0 && "$cluster_objs" == 0 ]] || fail "objects left 60s after the uninstall: $(k -n kube-system get ds,job,pod,svc,cm,sa -l app.kubernetes.io/instance=nodedns --no-headers 2>&1)"
ok "no object of the release or its hooks left"
failed=0
