#!/usr/bin/env bash
# What nodedns promises, shown on a real single-node cluster
# (scripts/cluster.sh): the DaemonSet from deploy/daemonset.yaml, pods whose
# resolv.conf kubelet wrote, workloads made by the real controllers,
# kube-proxy's rules beside the agent's, rolling updates under load.
#
#   scripts/e2e.sh          bring the cluster up, build and import the images,
#                           run every step, take the cluster down and check
#                           the machine is as before
#   KEEP=1 scripts/e2e.sh   leave the cluster (and the test upstream) up
#   KUBE_PROXY_MODE=nftables scripts/e2e.sh
#                           the same with kube-proxy in nftables mode (its
#                           rules in its own nftables tables; the agent's
#                           still iptables rules, through iptables-nft)
#
# Steps:
#  1. deploy/daemonset.yaml, unchanged but for the image and one ConfigMap
#     value (upstream: the test upstream on 127.0.53.53, a loopback address
#     of the node); the DaemonSet becomes Ready; the link and each
#     NOTRACK/ACCEPT rule exist exactly once, beside kube-proxy's rules
#     (its iptables chains, or in nftables mode its nftables tables).
#  2. A Deployment behind a ClusterIP Service, a StatefulSet behind a
#     headless Service and an ExternalName Service in two namespaces; glibc
#     getent, dig and a static musl client in client pods resolve them, SRV,
#     PTR and an external name; one external lookup costs the agent 2
#     queries (A and AAAA, autopath).
#  3. A kube-dns Service's ClusterIP added to local-ip: pods using it are
#     answered by the agent although kube-proxy DNATs that IP, and conntrack
#     holds no entry for the DNS flows.
#  4. `kubectl rollout restart` and an image change under LOAD_QPS (600)
#     queries/s of cluster and external names: the rollout surges (maxSurge
#     1: at most 2 agent pods, and 2 at some point, counted from the API
#     server's watch events, which miss no pod), 0 queries lost, 0
#     SERVFAIL, rules still exactly once; the rate reached is reported.
#  5. `nodedns stats` (text and --json) through kubectl exec; probes pass;
#     metrics answer on the node.
#  6. `kubectl delete -f`: the link and every rule are gone.
#  7. `scripts/cluster.sh down`: the machine is as before.
#
# Needs root; installs what it needs. Exits non-zero on the first failed
# check, after cleaning up.
set -euo pipefail
cd "$(dirname "$0")/.."

KEEP=${KEEP:-0}
UPSTREAM_IP=127.0.53.53
EXT_DOMAIN=ext.e2e.example
EXT_V4=169.254.99.1
EXT_V6=fdd5:6e6f:6465:ee::1
KUBE_DNS_IP=fdd5:6e6f:6465:96::a
NS_A=e2e-a
NS_B=e2e-b
LOAD_QPS=${LOAD_QPS:-600}
KUBE_PROXY_MODE=${KUBE_PROXY_MODE:-iptables}
case $KUBE_PROXY_MODE in iptables | nftables) ;; *)
	echo "e2e: KUBE_PROXY_MODE=${KUBE_PROXY_MODE}: want iptables or nftables" >&2
	exit 2
	;;
esac
export KUBE_PROXY_MODE
START=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-e2e.XXXXXX")
upstream_pid=""
watch_pid=""
failed=1

log() { printf '[e2e %s %3ds] %s\n' "$KUBE_PROXY_MODE" "$(($(date +%s) - START))" "$*" >&2; }
step() { printf '\n[e2e %s %3ds] ===== %s\n' "$KUBE_PROXY_MODE" "$(($(date +%s) - START))" "$*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}
ok() { log "ok: $*"; }

k() { scripts/cluster.sh kubectl "$@"; }

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
	if [[ -n "$upstream_pid" ]]; then
		kill "$upstream_pid" 2>/dev/null || true
		wait "$upstream_pid" 2>/dev/null || true
	fi
	if [[ -n "$watch_pid" ]]; then
		kill "$watch_pid" 2>/dev/null || true
		wait "$watch_pid" 2>/dev/null || true
	fi
	if [[ "$KEEP" != 1 ]]; then
		if [[ $rc != 0 ]]; then
			log "collecting logs into ${work}/logs before taking the cluster down"
			mkdir -p "${work}/logs" || log "cleanup: could not make ${work}/logs"
			k -n kube-system logs -l app.kubernetes.io/name=nodedns --tail=200 --prefix >"${work}/logs/nodedns.log" 2>&1 || true
			k get events -A --sort-by=.lastTimestamp >"${work}/logs/events.txt" 2>&1 || true
			cp -r /var/lib/nodedns-cluster/logs "${work}/logs/cluster" 2>/dev/null || true
			tail -n 40 "${work}/logs/nodedns.log" >&2 || true
		fi
		scripts/cluster.sh down
		st=$?
		if ((st != 0)); then
			log "FAIL: cleanup: scripts/cluster.sh down failed (exit ${st}; its output above)"
			rc=1
		fi
		if [[ $rc == 0 && $failed == 0 ]]; then
			step "7. scripts/cluster.sh down leaves nothing behind"
			if ! scripts/cluster.sh snapshot "${work}/after.txt"; then
				log "FAIL: cleanup: scripts/cluster.sh snapshot failed: the machine was not compared with before 'up'"
				rc=1
			elif ! diff -u "${work}/before.txt" "${work}/after.txt" >&2; then
				log "FAIL: the machine differs from before 'up' (diff above)"
				rc=1
			else
				ok "links, addresses, routes, netns, iptables (nft and legacy), nft tables, mounts, sysctls, paths, cgroups and processes as before"
			fi
		fi
	fi
	if [[ $rc == 0 ]]; then
		rm -rf "$work" || log "cleanup: could not remove ${work} (left behind)"
		log "PASS in $(($(date +%s) - START))s (kube-proxy ${KUBE_PROXY_MODE} mode)"
	else
		log "logs kept in ${work}"
	fi
	exit "$rc"
}
trap cleanup EXIT

deps() {
	local missing=() p
	for p in dnsmasq-base dnsutils jq iptables nftables conntrack curl; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c "install ok installed" >/dev/null || missing+=("$p")
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	fi
}

# The external world of the test: a DNS server on a loopback address of the
# node that knows *.ext.e2e.example (link-local and ULA answers: data, no
# packet ever goes there) and refuses everything else.
start_upstream() {
	dnsmasq --keep-in-foreground --no-hosts --no-resolv --bind-interfaces \
		--listen-address="$UPSTREAM_IP" --listen-address="$NODE_IP4" --port=53 --local-ttl=60 \
		--address="/${EXT_DOMAIN}/${EXT_V4}" --address="/${EXT_DOMAIN}/${EXT_V6}" \
		--pid-file="${work}/dnsmasq.pid" --log-facility=- --log-queries=extra \
		>"${work}/upstream.log" 2>&1 &
	upstream_pid=$!
	local i
	for i in $(seq 1 50); do
		[[ $(dig +short +time=1 +tries=1 @"$UPSTREAM_IP" "up.${EXT_DOMAIN}" A 2>/dev/null) == "$EXT_V4" ]] && return 0
		sleep 0.1
	done
	fail "test upstream on ${UPSTREAM_IP} did not answer"
}

# agent_pod prints the name of the Running, Ready agent pod (there is one
# when no rollout is under way).
agent_pod() {
	k -n kube-system get pods -l app.kubernetes.io/name=nodedns \
		-o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name}{"\n"}{end}' | head -n 1
}

stats_json() {
	k -n kube-system exec "$(agent_pod)" -- /nodedns stats --socket /run/nodedns/admin.sock --json
}

# kube_proxy_rules: kube-proxy has programmed the node: its KUBE-SERVICES
# chain (iptables mode) or its services chain in its own nftables tables
# (nftables mode). (Listings are read whole, never piped to grep -q: with
# pipefail, the lister killed by SIGPIPE would fail a check that matched.)
kube_proxy_rules() {
	if [[ "$KUBE_PROXY_MODE" == nftables ]]; then
		nft list chain ip kube-proxy services >/dev/null 2>&1 && nft list chain ip6 kube-proxy services >/dev/null 2>&1
	else
		iptables-nft-save -t nat | grep -c '^:KUBE-SERVICES' >/dev/null
	fi
}

# kube_proxy_dnat IP: kube-proxy load-balances the Service IP (a rule that
# names it in its iptables nat table, or in its ip6 nftables table).
kube_proxy_dnat() {
	if [[ "$KUBE_PROXY_MODE" == nftables ]]; then
		nft list table ip6 kube-proxy 2>/dev/null | grep -cF "$1" >/dev/null
	else
		ip6tables-nft-save -t nat | grep -c -- "-d ${1}/128 .*KUBE-SVC" >/dev/null
	fi
}

# rules_once IP[=N]...: each of the agent's rules for each IP exists
# exactly once in the iptables backend the node uses (nft: kubelet's chains
# are there, in either kube-proxy mode), beside kube-proxy's own rules, and
# none in the other backend. A rule is the IP's when its comment names it.
# Per IP: NOTRACK in PREROUTING and OUTPUT (both ways), ACCEPT in INPUT and
# OUTPUT, each for udp and tcp: 10 rules; with the DNS fallback's NAT
# (=16, the default for 169.254.20.10), 6 more: the nat PREROUTING jump,
# the POSTROUTING masquerade and the FORWARD accept, and the family's
# NODEDNS-FALLBACK chain exists once. A local IP that is a Service
# ClusterIP (the kube-dns one) keeps 10: kube-proxy's DNAT is its fallback.
rules_once() {
	local arg ip save want got dups chains
	for arg in "$@"; do
		ip=${arg%%=*} want=10
		[[ "$arg" == *=* ]] && want=${arg#*=}
		if [[ "$ip" == *:* ]]; then save=ip6tables-nft-save; else save=iptables-nft-save; fi
		got=$("$save" | grep 'comment "nodedns:' | grep -cF -- " ${ip} " || true)
		[[ "$got" == "$want" ]] || fail "${save}: ${got} nodedns rules for ${ip}, want ${want}: $("$save" | grep 'comment "nodedns:' | grep -F -- " ${ip} ")"
		dups=$("$save" | grep 'comment "nodedns:' | sort | uniq -d)
		[[ -z "$dups" ]] || fail "${save}: duplicated rules: ${dups}"
		if [[ "$want" == 16 ]]; then
			chains=$("$save" | grep -c '^:NODEDNS-FALLBACK ' || true)
			[[ "$chains" == 1 ]] || fail "${save}: ${chains} NODEDNS-FALLBACK chains, want 1"
		fi
	done
	kube_proxy_rules || fail "kube-proxy's rules (${KUBE_PROXY_MODE} mode) are missing"
	local legacy
	legacy=$( (iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c 'nodedns:' || true)
	[[ "$legacy" == 0 ]] || fail "${legacy} nodedns rules in the legacy backend, which kube-proxy does not use"
	ip link show nodelocaldns >/dev/null 2>&1 || fail "link nodelocaldns missing"
	for arg in "$@"; do
		ip=${arg%%=*}
		ip addr show dev nodelocaldns | grep -cF " ${ip}/" >/dev/null || fail "${ip} not on nodelocaldns"
	done
}

rollout_done() {
	k -n kube-system rollout status daemonset/nodedns --timeout=120s >/dev/null
}

# ------------------------------------------------------------------ setup

[[ $(id -u) == 0 ]] || fail "needs root"
deps
# A cluster left up by an earlier run (KEEP=1, a killed run) would make the
# "before" snapshot describe a running cluster, and step 7 would then report
# the clean machine after 'down' as a difference. Start from a clean machine.
if [[ -e "$(scripts/cluster.sh env | sed -n 's/^STATE=//p')" || -e /run/nodedns-cluster ]]; then
	log "a cluster from an earlier run is present; taking it down first"
	scripts/cluster.sh down
fi
scripts/cluster.sh snapshot "${work}/before.txt"
step "cluster up"
KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
export KUBECONFIG
ok "node Ready (${KUBECONFIG})"
# The NetworkPolicy rules of docs/install.md (host mode: ipBlock peers for
# 169.254.20.10 and the kube-dns ClusterIP) need a policy engine; the
# bridge CNI plugin is none, and none runs here.
log "NetworkPolicy: not checked: this cluster's CNI (Debian's bridge plugin) enforces no NetworkPolicy and no policy engine runs on it; the policy check runs on Cilium (scripts/cilium-e2e.sh)"
IMAGE=$(scripts/image.sh nodedns | tail -n 1)
CLIENT=$(scripts/image.sh client | tail -n 1)
CENTRAL=$(scripts/image.sh coredns | tail -n 1)
ok "images ${IMAGE}, ${CLIENT} and ${CENTRAL} imported"
# The node's link-local address: the central DNS pods reach the test
# upstream there (its loopback address is the node's own).
NODE_IP4=$(scripts/cluster.sh env | sed -n 's/^NODE_IP4=//p')
start_upstream

# ------------------------------------------------------------------ step 1
step "1. deploy/daemonset.yaml"
sed -e "s|image: registry.example.com/nodedns:[^ ]*|image: ${IMAGE}|" \
	-e "s|^    # upstream: .*|    upstream: [\"${UPSTREAM_IP}\"]|" deploy/daemonset.yaml >"${work}/daemonset.yaml"
changed=$(diff deploy/daemonset.yaml "${work}/daemonset.yaml" | grep -c '^>' || true)
[[ "$changed" == 3 ]] || fail "expected to change 3 lines of deploy/daemonset.yaml (the agent's and the metrics-port init container's image, upstream), changed ${changed}"
k apply -f "${work}/daemonset.yaml" >/dev/null
rollout_done || fail "DaemonSet did not become Ready"
ok "DaemonSet Ready: $(k -n kube-system get ds nodedns -o jsonpath='{.status.numberReady}/{.status.desiredNumberScheduled}')"
rules_once 169.254.20.10=16
ok "link nodelocaldns holds 169.254.20.10; its 16 rules (10, and 6 of the DNS fallback) exist once each (iptables-nft), beside kube-proxy's (${KUBE_PROXY_MODE} mode)"

# ------------------------------------------------------------------ step 2
step "2. workloads through the real controllers, resolved from client pods"
cat >"${work}/workloads.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: ${NS_A}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ${NS_B}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ${NS_A}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: web, image: ${CLIENT}, imagePullPolicy: Never, ports: [{name: http, containerPort: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ${NS_A}}
spec:
  ipFamilyPolicy: RequireDualStack
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: ${NS_A}}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: ${NS_A}}
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: db, image: ${CLIENT}, imagePullPolicy: Never, ports: [{name: pg, containerPort: 5432}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: ${NS_B}}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: api, image: ${CLIENT}, imagePullPolicy: Never}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: ${NS_B}}
spec:
  ipFamilyPolicy: RequireDualStack
  selector: {app: api}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: ${NS_B}}
spec:
  type: ExternalName
  externalName: api.${EXT_DOMAIN}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: ${NS_A}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: ${CLIENT}, imagePullPolicy: Never}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: ${NS_B}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: ${CLIENT}, imagePullPolicy: Never}
EOF
k apply -f "${work}/workloads.yaml" >/dev/null
k -n "$NS_A" rollout status deployment/web --timeout=120s >/dev/null || fail "Deployment web not ready"
k -n "$NS_A" rollout status statefulset/db --timeout=120s >/dev/null || fail "StatefulSet db not ready"
k -n "$NS_B" rollout status deployment/api --timeout=120s >/dev/null || fail "Deployment api not ready"
k -n "$NS_A" wait --for=condition=Ready pod/client --timeout=120s >/dev/null
k -n "$NS_B" wait --for=condition=Ready pod/client --timeout=120s >/dev/null
ok "Deployments, StatefulSet and client pods Ready"

resolv=$(k -n "$NS_A" exec client -- cat /etc/resolv.conf)
grep -qx "nameserver 169.254.20.10" <<<"$resolv" || fail "kubelet did not write nameserver 169.254.20.10: ${resolv}"
grep -qx "search ${NS_A}.svc.cluster.local svc.cluster.local cluster.local" <<<"$resolv" || fail "unexpected search list: ${resolv}"
grep -qx "options ndots:5" <<<"$resolv" || fail "no ndots:5: ${resolv}"
ok "kubelet wrote the client's resolv.conf: nameserver 169.254.20.10, the namespace's search list, ndots:5"

web_ips=$(k -n "$NS_A" get svc web -o jsonpath='{.spec.clusterIPs[*]}')
api_ips=$(k -n "$NS_B" get svc api -o jsonpath='{.spec.clusterIPs[*]}')
db0_ip=$(k -n "$NS_A" get pod db-0 -o jsonpath='{.status.podIPs[0].ip}')
web_v4=$(tr ' ' '\n' <<<"$web_ips" | grep -v : | head -n 1)

# ahosts NS NAME WANT...: glibc's getaddrinfo (getent ahosts) in a client
# pod of NS returns exactly the addresses WANT.
ahosts() {
	local ns=$1 name=$2 got want
	shift 2
	got=$(k -n "$ns" exec client -- getent ahosts "$name" | awk '{print $1}' | sort -u | tr '\n' ' ')
	want=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')
	[[ "$got" == "$want" ]] || fail "getent ahosts ${name} in ${ns}: got '${got}', want '${want}'"
	ok "getent ahosts ${name} (${ns}) -> ${got}"
}
musl() {
	local ns=$1 name=$2 got want
	shift 2
	got=$(k -n "$ns" exec client -- musl-resolve "$name" | awk '{print $2}' | sort -u | tr '\n' ' ')
	want=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')
	[[ "$got" == "$want" ]] || fail "musl getaddrinfo ${name} in ${ns}: got '${got}', want '${want}'"
	ok "musl getaddrinfo ${name} (${ns}) -> ${got}"
}
# digs NS WANT ARGS...: dig +short in a client pod prints exactly WANT.
digs() {
	local ns=$1 want=$2 got
	shift 2
	got=$(k -n "$ns" exec client -- dig +short +search "$@" | sort | tr '\n' ' ' | sed 's/ $//')
	[[ "$got" == "$want" ]] || fail "dig $* in ${ns}: got '${got}', want '${want}'"
	ok "dig $* (${ns}) -> ${got}"
}

# shellcheck disable=SC2086 # lists of addresses
ahosts "$NS_A" web $web_ips
# shellcheck disable=SC2086
ahosts "$NS_A" "api.${NS_B}" $api_ips
# shellcheck disable=SC2086
ahosts "$NS_B" "web.${NS_A}.svc" $web_ips
ahosts "$NS_A" "db-0.db.${NS_A}.svc.cluster.local" "$db0_ip"
ahosts "$NS_A" "ext.${NS_B}" "$EXT_V4" "$EXT_V6"
ahosts "$NS_A" "api.${EXT_DOMAIN}" "$EXT_V4" "$EXT_V6"
# shellcheck disable=SC2086
musl "$NS_A" web $web_ips
musl "$NS_A" "api.${EXT_DOMAIN}" "$EXT_V4" "$EXT_V6"
# Weight 50: CoreDNS counts one SRV record per ClusterIP and port before
# removing duplicates, and web is dual-stack.
digs "$NS_A" "0 50 80 web.${NS_A}.svc.cluster.local." SRV "_http._tcp.web.${NS_A}.svc.cluster.local"
digs "$NS_A" "0 50 5432 db-0.db.${NS_A}.svc.cluster.local. 0 50 5432 db-1.db.${NS_A}.svc.cluster.local." SRV "_pg._tcp.db.${NS_A}.svc.cluster.local"
digs "$NS_A" "web.${NS_A}.svc.cluster.local." -x "$web_v4"
digs "$NS_A" "${EXT_V4} api.${EXT_DOMAIN}." "ext.${NS_B}.svc.cluster.local."

# One external lookup through glibc: A and AAAA of the first search-path
# expansion, answered with the CNAME to the name itself (autopath) — two
# queries where a client walking the list itself needs eight.
before=$(stats_json | jq '.total')
ahosts "$NS_A" "fresh-1.${EXT_DOMAIN}" "$EXT_V4" "$EXT_V6"
after=$(stats_json | jq '.total')
[[ $((after - before)) == 2 ]] || fail "one external lookup (glibc) cost the agent $((after - before)) queries, want 2 (autopath)"
ok "one external lookup (glibc getaddrinfo) = 2 queries to the agent"
before=$after
musl "$NS_A" "fresh-2.${EXT_DOMAIN}" "$EXT_V4" "$EXT_V6"
after=$(stats_json | jq '.total')
[[ $((after - before)) == 2 ]] || fail "one external lookup (musl) cost the agent $((after - before)) queries, want 2 (autopath)"
ok "one external lookup (musl getaddrinfo) = 2 queries to the agent"

# ------------------------------------------------------------------ step 3
step "3. the kube-dns ClusterIP intercepted beside kube-proxy's DNAT"
cat >"${work}/kube-dns.yaml" <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: central-dns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-central-dns}
rules:
- {apiGroups: [""], resources: [services, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-central-dns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-central-dns}
subjects: [{kind: ServiceAccount, name: central-dns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: central-dns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            fallthrough in-addr.arpa ip6.arpa
        }
        forward . ${NODE_IP4}
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: central-dns, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: central-dns
      terminationGracePeriodSeconds: 1
      dnsPolicy: Default
      containers:
      - name: dns
        image: ${CENTRAL}
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports: [{name: dns, containerPort: 53, protocol: UDP}, {name: dns-tcp, containerPort: 53, protocol: TCP}]
        volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: central-dns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: ${KUBE_DNS_IP}
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: dns}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: v1
kind: Pod
metadata: {name: legacy-client, namespace: ${NS_A}}
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: None
  dnsConfig:
    nameservers: ["${KUBE_DNS_IP}"]
    searches: ["${NS_A}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    options: [{name: ndots, value: "5"}]
  containers:
  - {name: client, image: ${CLIENT}, imagePullPolicy: Never}
EOF
k apply -f "${work}/kube-dns.yaml" >/dev/null
k -n kube-system rollout status deployment/central-dns --timeout=120s >/dev/null || fail "central-dns not ready"
k -n "$NS_A" wait --for=condition=Ready pod/legacy-client --timeout=120s >/dev/null
for i in $(seq 1 50); do
	kube_proxy_dnat "$KUBE_DNS_IP" && break
	sleep 0.2
done
if ! kube_proxy_dnat "$KUBE_DNS_IP"; then
	if [[ "$KUBE_PROXY_MODE" == nftables ]]; then nft list table ip6 kube-proxy >&2 || true; else ip6tables-nft-save -t nat >&2 || true; fi
	fail "kube-proxy (${KUBE_PROXY_MODE} mode) has no DNAT rule for ${KUBE_DNS_IP} (its rules above)"
fi
ok "kube-proxy (${KUBE_PROXY_MODE} mode) DNATs ${KUBE_DNS_IP} to the kube-dns endpoints"
k -n kube-system get configmap nodedns -o json |
	jq --arg ip "$KUBE_DNS_IP" '.data["config.yaml"] |= sub("local-ip: \\[\"169.254.20.10\"\\]"; "local-ip: [\"169.254.20.10\", \"" + $ip + "\"]")' |
	k apply -f - >/dev/null
k -n kube-system get configmap nodedns -o jsonpath='{.data.config\.yaml}' | grep -cF "\"${KUBE_DNS_IP}\"" >/dev/null || fail "local-ip not updated"
# local-ip takes a restart: a rolling one, as an operator would do it.
k -n kube-system rollout restart daemonset/nodedns >/dev/null
rollout_done || fail "rollout after the local-ip change did not complete"
rules_once 169.254.20.10=16 "${KUBE_DNS_IP}=10"
ok "link holds ${KUBE_DNS_IP} too; its rules exist once each (ip6tables, nft)"
conntrack -D -f ipv6 -d "$KUBE_DNS_IP" >/dev/null 2>&1 || true
conntrack -D -d 169.254.20.10 >/dev/null 2>&1 || true
lc_resolv=$(k -n "$NS_A" exec legacy-client -- cat /etc/resolv.conf)
grep -qx "nameserver ${KUBE_DNS_IP}" <<<"$lc_resolv" || fail "legacy client's resolv.conf: ${lc_resolv}"
got=$(k -n "$NS_A" exec legacy-client -- getent ahosts web | awk '{print $1}' | sort -u | tr '\n' ' ')
want=$(tr ' ' '\n' <<<"$web_ips" | sort -u | tr '\n' ' ')
[[ "$got" == "$want" ]] || fail "through ${KUBE_DNS_IP}: getent ahosts web got '${got}', want '${want}'"
got=$(k -n "$NS_A" exec legacy-client -- dig +short +tcp @"$KUBE_DNS_IP" "api.${EXT_DOMAIN}" A)
[[ "$got" == "$EXT_V4" ]] || fail "through ${KUBE_DNS_IP} over TCP: got '${got}'"
server=$(k -n "$NS_A" exec legacy-client -- dig @"$KUBE_DNS_IP" "web.${NS_A}.svc.cluster.local" AAAA | sed -n 's/^;; SERVER: //p')
ok "pod with nameserver ${KUBE_DNS_IP} answered by the agent (UDP and TCP; ${server})"
tracked=$(conntrack -L -f ipv6 -d "$KUBE_DNS_IP" 2>/dev/null | grep -c 'dport=53' || true)
tracked4=$(conntrack -L -d 169.254.20.10 2>/dev/null | grep -c 'dport=53' || true)
[[ "$tracked" == 0 && "$tracked4" == 0 ]] || fail "conntrack holds DNS flows: ${tracked} to ${KUBE_DNS_IP}, ${tracked4} to 169.254.20.10"
ok "conntrack holds no entry for DNS flows to ${KUBE_DNS_IP} or 169.254.20.10"
# No conntrack entry: every answer above came from the agent, none from
# the central DNS (CoreDNS) behind kube-proxy's DNAT.

# ------------------------------------------------------------------ step 4
step "4. rolling updates under load"
names="${work}/load-names.txt"
{
	for i in $(seq 1 50); do
		echo "web.${NS_A}.svc.cluster.local A"
		echo "web.${NS_A}.svc.cluster.local AAAA"
		echo "api.${NS_B}.svc.cluster.local A"
		echo "db-0.db.${NS_A}.svc.cluster.local AAAA"
		echo "host${i}.${EXT_DOMAIN} A"
		echo "host${i}.${EXT_DOMAIN} AAAA"
	done
} >"$names"
k -n "$NS_A" exec -i client -- sh -c 'cat > /tmp/names' <"$names"

# load SECONDS: dnsperf from the client pod at LOAD_QPS (run in the
# background by the caller).
load() {
	k -n "$NS_A" exec client -- dnsperf -s 169.254.20.10 -d /tmp/names -l "$1" -Q "$LOAD_QPS" -c 4 -t 3
}
# check_load OUT: no query lost, no SERVFAIL; the rate reached is reported,
# and must be at least half of LOAD_QPS (a 2x margin for a busy machine:
# below that the rollout was hardly under load and "0 lost" would say
# little).
check_load() {
	local out=$1 sent lost servfail qps
	sent=$(sed -n 's/^ *Queries sent: *\([0-9]*\).*/\1/p' "$out")
	lost=$(sed -n 's/^ *Queries lost: *\([0-9]*\).*/\1/p' "$out")
	servfail=$(sed -n 's/^ *Response codes:.*SERVFAIL \([0-9]*\).*/\1/p' "$out")
	qps=$(sed -n 's/^ *Queries per second: *\([0-9]*\).*/\1/p' "$out")
	[[ -n "$sent" && -n "$lost" ]] || fail "dnsperf printed no statistics: $(cat "$out")"
	log "dnsperf: sent ${sent}, lost ${lost}, SERVFAIL ${servfail:-0}, ${qps} queries/s; $(grep 'Response codes' "$out" | sed 's/^ *//')"
	[[ "$lost" == 0 ]] || fail "${lost} queries lost during the rollout"
	[[ "${servfail:-0}" == 0 ]] || fail "${servfail} SERVFAIL during the rollout"
	((qps >= LOAD_QPS / 2)) || fail "load was ${qps} queries/s, want at least $((LOAD_QPS / 2)) (half of LOAD_QPS=${LOAD_QPS})"
}
# watch_pods OUT: records the API server's watch events of the agent pods
# into OUT until stopped (watch_pid). kubectl lists first (each pod an
# ADDED event), then watches from that list's resourceVersion: every pod
# that ever exists in between is seen, however briefly, which sampling
# with `kubectl get` every so often could miss.
watch_pods() {
	(exec scripts/cluster.sh kubectl -n kube-system get pods -l app.kubernetes.io/name=nodedns \
		--watch --output-watch-events -o json >"$1" 2>"$1.err") &
	watch_pid=$!
}
stop_watch() {
	[[ -n "$watch_pid" ]] || return 0
	kill "$watch_pid" 2>/dev/null || true
	wait "$watch_pid" 2>/dev/null || true
	watch_pid=""
}
# pod_counts OUT: "MAX NOW": the most agent pods that existed at once, and
# how many exist now, by the events in OUT (a pod exists from its ADDED to
# its DELETED event, terminating included).
pod_counts() {
	jq -r '"\(.type) \(.object.metadata.name)"' "$1" 2>/dev/null | awk '
		$1 == "ADDED" && !($2 in p) { p[$2] = 1; n++ }
		$1 == "DELETED" && ($2 in p) { delete p[$2]; n-- }
		{ if (n > m) m = n }
		END { print m + 0, n + 0 }'
}
# rollout WHAT CMD...: CMD under load; the rollout surges and loses nothing.
rollout() {
	local what=$1 out="${work}/load-$1.txt" pods="${work}/pods-$1.json" lp t0 t1 maxpods nowpods i
	shift
	watch_pods "$pods"
	for i in $(seq 1 100); do
		read -r maxpods nowpods <<<"$(pod_counts "$pods")"
		((nowpods >= 1)) && break
		sleep 0.2
	done
	[[ "$nowpods" == 1 ]] || fail "${what}: the watch of the agent pods lists ${nowpods} pods before the rollout, want 1 ($(cat "${pods}.err"))"
	load 45 >"$out" 2>&1 &
	lp=$!
	sleep 5
	t0=$(date +%s)
	"$@" >/dev/null
	rollout_done || fail "${what}: rollout did not complete"
	t1=$(date +%s)
	wait "$lp" || fail "${what}: dnsperf failed: $(cat "$out")"
	# The old pod may still be terminating when the rollout is complete:
	# its DELETED event ends the count.
	for i in $(seq 1 300); do
		read -r maxpods nowpods <<<"$(pod_counts "$pods")"
		((nowpods == 1 && maxpods >= 2)) && break
		sleep 0.2
	done
	stop_watch
	# The load runs 45 s from 5 s before the rollout: a rollout that took
	# longer was partly not under load.
	((t1 - t0 < 40)) || fail "${what}: the rollout took $((t1 - t0))s, longer than the load ran"
	[[ "$maxpods" == 2 && "$nowpods" == 1 ]] ||
		fail "${what}: by the API server's watch events, at most ${maxpods} agent pods at once and ${nowpods} at the end, want 2 and 1 (maxSurge 1; events in ${pods})"
	log "${what}: rollout done in $((t1 - t0))s; two agent pods overlapped, never more (maxSurge 1, counted from watch events)"
	check_load "$out"
	rules_once 169.254.20.10=16 "${KUBE_DNS_IP}=10"
	ok "${what}: 0 lost, 0 SERVFAIL, rules still once each"
}
rollout restart k -n kube-system rollout restart daemonset/nodedns
IMAGE2=$(VERSION="$(k -n kube-system exec "$(agent_pod)" -- /nodedns version | awk '{print $2}')-e2e2" scripts/image.sh nodedns | tail -n 1)
rollout image-change k -n kube-system set image daemonset/nodedns "nodedns=${IMAGE2}"
running=$(k -n kube-system get pod "$(agent_pod)" -o jsonpath='{.spec.containers[0].image}')
[[ "$running" == "$IMAGE2" ]] || fail "after the image change the agent runs ${running}, want ${IMAGE2}"
ok "agent now runs ${IMAGE2}"

# ------------------------------------------------------------------ step 5
step "5. nodedns stats, probes, metrics"
pod=$(agent_pod)
text=$(k -n kube-system exec "$pod" -- /nodedns stats --socket /run/nodedns/admin.sock)
grep -q '^Queries' <<<"$text" && grep -q '^Interception' <<<"$text" || fail "nodedns stats printed: ${text}"
log "$(head -n 3 <<<"$text" | tail -n 1)"
json=$(stats_json)
[[ $(jq -r '.informers.synced' <<<"$json") == true && $(jq -r '.intercept.rules_present == .intercept.rules_wanted' <<<"$json") == true ]] ||
	fail "stats --json: informers or rules not as expected: ${json}"
ok "nodedns stats (text) and --json through kubectl exec"
restarts=$(k -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')
ready=$(k -n kube-system get pod "$pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
[[ "$restarts" == 0 && "$ready" == True ]] || fail "agent pod ready=${ready} restarts=${restarts}"
# Failed probes after the agent's first 10 s (before, a readiness probe
# that finds the agent still starting is readiness at work: the
# supervisor's serving process starts a moment after the container).
started_at=$(k -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].state.running.startedAt}')
unhealthy=$(k -n kube-system get events --field-selector "involvedObject.name=${pod},reason=Unhealthy" -o json |
	jq --arg t "$started_at" '[.items[] | select(((.lastTimestamp // .eventTime) | sub("\\.[0-9]+";"") | fromdateiso8601) > ($t | fromdateiso8601) + 10)] | length')
[[ "$unhealthy" == 0 ]] || fail "${unhealthy} failed probes on ${pod} after its first 10 s (started ${started_at}): $(k -n kube-system get events --field-selector "involvedObject.name=${pod},reason=Unhealthy")"
ok "liveness and readiness probes pass (Ready, 0 restarts, no Unhealthy event after the start)"
# Metrics listen on the node's address at the pod's named `metrics` port
# (deploy/daemonset.yaml), where Prometheus finds them.
host_ip=$(k -n kube-system get pod "$pod" -o jsonpath='{.status.hostIP}')
metrics_port=$(k -n kube-system get pod "$pod" -o jsonpath='{.spec.initContainers[*].ports[?(@.name=="metrics")].containerPort}')
[[ -n "$host_ip" && -n "$metrics_port" ]] || fail "agent pod has no host IP (${host_ip}) or no port named metrics (${metrics_port})"
[[ "$host_ip" == *:* ]] && host_ip="[${host_ip}]"
metrics_addr="${host_ip}:${metrics_port}"
metrics=$(curl -fsS "http://${metrics_addr}/metrics") || fail "no metrics on ${metrics_addr}"
grep -q '^nodedns_' <<<"$metrics" || fail "metrics on ${metrics_addr} hold no nodedns_ series"
ok "metrics answer on the node at ${metrics_addr} ($(grep -c '^nodedns_' <<<"$metrics") nodedns_ samples)"

# ------------------------------------------------------------------ step 5b
step "5b. the agent's death under load: kill -9, OOM kill, SIGSTOP, crash loop"
# shellcheck source=scripts/e2e/death.sh
source scripts/e2e/death.sh
printf '| mechanism | scenario | kube-proxy | direct: failed / sent | longest without an answer | glibc: failed / lookups | longest without an answer |\n|---|---|---|---|---|---|---|\n' >"${work}/death.md"
k -n kube-system get configmap nodedns -o json | jq 'del(.metadata.resourceVersion, .metadata.uid, .metadata.creationTimestamp, .metadata.managedFields)' >"${work}/cm-before-death.json"
set_config "test-hooks=true"
death_scenarios "supervisor + fallback (default)" 1
ok "the agent's death under load: the targets hold (the table below)"
if [[ ${E2E_DEATH_COMPARE:-0} == 1 ]]; then
	# Today's behaviour for comparison: one process, pods' queries to
	# 169.254.20.10 refused while none serves. Figures only.
	set_config "test-hooks=true" "supervise=false" "fallback-dns=[]"
	death_scenarios "none (one process, no fallback)" 0
	k apply -f "${work}/cm-before-death.json" >/dev/null
	set_config "test-hooks=false"
fi
cat "${work}/death.md" >&2

# ------------------------------------------------------------------ step 6
step "6. kubectl delete -f deploy/daemonset.yaml"
k delete -f "${work}/daemonset.yaml" --wait=true --timeout=120s >/dev/null
for i in $(seq 1 100); do
	[[ -z "$(k -n kube-system get pods -l app.kubernetes.io/name=nodedns --no-headers 2>/dev/null)" ]] && break
	sleep 0.2
done
ip link show nodelocaldns >/dev/null 2>&1 && fail "link nodelocaldns still there after delete"
left=$( (iptables-nft-save; ip6tables-nft-save; iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c 'nodedns:' || true)
[[ "$left" == 0 ]] || fail "${left} nodedns rules left after delete"
ok "the link and every rule are gone"
failed=0
