#!/usr/bin/env bash
# Proves the local cluster's Cilium (CLUSTER_CNI=cilium scripts/cluster.sh up)
# does what nodedns's pod-network mode relies on, with CoreDNS standing in
# for both DNS servers:
#   1. pods get their addresses from Cilium (its endpoints, in the pod ranges)
#      and no kube-proxy runs: no KUBE-SERVICES rules anywhere;
#   2. the kube-dns ClusterIP is reached from a pod, UDP and TCP, through
#      Cilium's socket load-balancer (the service is in its load-balancing
#      table). IPv6 only: EndpointSlices reject link-local addresses, so the
#      IPv4 (169.254) ClusterIP has no backends, with Cilium as with
#      kube-proxy (/work/shared/local-cluster.md);
#   3. a CiliumLocalRedirectPolicy with a serviceMatcher for kube-dns sends
#      the pod's queries to the DNS pod on its node (the answer says which
#      server replied), and removing it sends them back to kube-dns; an
#      addressMatcher policy for 169.254.20.10 does the same for that address.
# Each server answers TXT who.nodedns.test with its own name.
#
# Usage: flock /tmp/nodedns-host.lock scripts/cilium-smoke.sh
#        (brings the cluster up in Cilium mode if it is not, and takes it
#        down at the end unless KEEP=1)
set -euo pipefail
cd "$(dirname "$0")/.."

NS=cilium-smoke
KUBE_DNS_IP6=fdd5:6e6f:6465:96::a
KUBE_DNS_IP4=169.254.128.10
LOCAL_IP=169.254.20.10

log() { printf 'cilium-smoke.sh: %s\n' "$*" >&2; }
ok() { log "ok: $*"; }
fail() {
	log "FAIL: $*"
	exit 1
}
k() { scripts/cluster.sh kubectl "$@"; }

cleanup() {
	local rc=$?
	if [[ "${KEEP:-0}" != 1 ]]; then
		CLUSTER_CNI=cilium scripts/cluster.sh down || rc=1
	fi
	exit "$rc"
}
trap cleanup EXIT

CLUSTER_CNI=cilium scripts/cluster.sh up >/dev/null
CILIUM_DIR=$(scripts/cilium-bin.sh 2>/dev/null | tail -n 1)
dbg() { "${CILIUM_DIR}/bin/cilium-dbg" "$@"; }
CLIENT=$(scripts/image.sh client | tail -n 1)
CENTRAL=$(scripts/image.sh coredns | tail -n 1)
eval "$(scripts/cluster.sh env)"

corefile() { # corefile NAME: answers who.nodedns.test TXT with NAME
	cat <<EOF
    .:53 {
        template IN TXT nodedns.test {
            answer "{{ .Name }} 5 IN TXT \"$1\""
        }
        health :8080
    }
EOF
}

k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: ${NS}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: smoke-dns, namespace: kube-system}
data:
  central: |
$(corefile central)
  local: |
$(corefile local)
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: smoke-central-dns, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      terminationGracePeriodSeconds: 1
      dnsPolicy: Default
      containers:
      - name: dns
        image: ${CENTRAL}
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/central"]
        ports: [{name: dns, containerPort: 53, protocol: UDP}, {name: dns-tcp, containerPort: 53, protocol: TCP}]
        volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: smoke-dns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv6, IPv4]
  clusterIP: ${KUBE_DNS_IP6}
  clusterIPs: ["${KUBE_DNS_IP6}", "${KUBE_DNS_IP4}"]
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: smoke-local-dns, namespace: kube-system}
spec:
  selector: {matchLabels: {k8s-app: smoke-local-dns}}
  template:
    metadata: {labels: {k8s-app: smoke-local-dns}}
    spec:
      terminationGracePeriodSeconds: 1
      dnsPolicy: Default
      containers:
      - name: dns
        image: ${CENTRAL}
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/local"]
        ports: [{name: dns, containerPort: 53, protocol: UDP}, {name: dns-tcp, containerPort: 53, protocol: TCP}]
        volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: smoke-dns}}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: ${NS}}
spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: None
  dnsConfig: {nameservers: ["${KUBE_DNS_IP6}"]}
  containers:
  - {name: client, image: ${CLIENT}, imagePullPolicy: Never}
EOF
k -n kube-system rollout status deployment/smoke-central-dns --timeout=180s >/dev/null || fail "central DNS not ready"
k -n kube-system rollout status daemonset/smoke-local-dns --timeout=180s >/dev/null || fail "local DNS not ready"
k -n "$NS" wait --for=condition=Ready pod/client --timeout=180s >/dev/null || fail "client pod not ready"

# 1. addresses from Cilium, no kube-proxy.
ips=$(k -n "$NS" get pod client -o jsonpath='{.status.podIPs[*].ip}')
log "client pod addresses: ${ips}"
for ip in $ips; do
	case "$ip" in
	fdd5:6e6f:6465:1:*) ;;
	169.254.64.*) ;;
	*) fail "client address ${ip} outside the pod ranges ${POD_CIDR6} ${POD_CIDR4}" ;;
	esac
	dbg endpoint list -o json | grep -q "\"${ip}\"" || fail "no Cilium endpoint holds ${ip}"
done
[[ $(wc -w <<<"$ips") == 2 ]] || fail "client pod has not one address per family: ${ips}"
ok "the client pod's addresses (${ips}) are Cilium endpoints'"
if iptables-save 2>/dev/null | grep -q KUBE-SERVICES || ip6tables-save 2>/dev/null | grep -q KUBE-SERVICES; then
	fail "KUBE-SERVICES rules exist: kube-proxy ran"
fi
ok "no kube-proxy rules"

who() { # who SERVER [+tcp]: the TXT who.nodedns.test answer the client gets
	k -n "$NS" exec client -- dig +short +time=2 +tries=1 ${2:+"$2"} "@$1" who.nodedns.test TXT 2>/dev/null | tr -d '"'
}
expect() { # expect SERVER WANT WHAT
	local got _
	for _ in $(seq 1 50); do
		got=$(who "$1") || true
		[[ "$got" == "$2" ]] && break
		sleep 0.2
	done
	[[ "$got" == "$2" ]] || fail "$3: UDP query to $1 answered by '${got}', want '$2'"
	got=$(who "$1" +tcp) || true
	[[ "$got" == "$2" ]] || fail "$3: TCP query to $1 answered by '${got}', want '$2'"
	ok "$3: UDP and TCP queries to $1 answered by $2"
}

# 2. ClusterIP through the socket LB.
dbg service list | grep -q -- "\[${KUBE_DNS_IP6}\]:53/UDP.*active" || fail "kube-dns ${KUBE_DNS_IP6} has no active backend in Cilium's service table"
dbg status --verbose | grep -E '^KubeProxyReplacement|Socket LB:' >&2 || true
expect "$KUBE_DNS_IP6" central "ClusterIP (socket LB)"

# 3. LocalRedirectPolicy.
k apply -f - >/dev/null <<EOF
apiVersion: cilium.io/v2
kind: CiliumLocalRedirectPolicy
metadata: {name: smoke-kube-dns, namespace: kube-system}
spec:
  redirectFrontend:
    serviceMatcher: {serviceName: kube-dns, namespace: kube-system}
  redirectBackend:
    localEndpointSelector: {matchLabels: {k8s-app: smoke-local-dns}}
    toPorts:
    - {port: "53", name: dns, protocol: UDP}
    - {port: "53", name: dns-tcp, protocol: TCP}
  skipRedirectFromBackend: true
---
apiVersion: cilium.io/v2
kind: CiliumLocalRedirectPolicy
metadata: {name: smoke-local-ip, namespace: kube-system}
spec:
  redirectFrontend:
    addressMatcher:
      ip: "${LOCAL_IP}"
      toPorts:
      - {port: "53", name: dns, protocol: UDP}
      - {port: "53", name: dns-tcp, protocol: TCP}
  redirectBackend:
    localEndpointSelector: {matchLabels: {k8s-app: smoke-local-dns}}
    toPorts:
    - {port: "53", name: dns, protocol: UDP}
    - {port: "53", name: dns-tcp, protocol: TCP}
  skipRedirectFromBackend: true
EOF
expect "$KUBE_DNS_IP6" local "LRP serviceMatcher (IPv6)"
expect "$KUBE_DNS_IP4" local "LRP serviceMatcher (IPv4)"
expect "$LOCAL_IP" local "LRP addressMatcher ${LOCAL_IP}"
dbg lrp list >&2 || true
k -n kube-system delete ciliumlocalredirectpolicy smoke-kube-dns >/dev/null
expect "$KUBE_DNS_IP6" central "LRP removed"
log "all checks passed"
