#!/usr/bin/env bash
# Runs every test of nodedns on a fresh Debian machine with Go, as root:
# installs the Debian packages it needs, builds (and caches) kube-apiserver
# and CoreDNS, then runs go vet, staticcheck, the unit tests with -race,
# promtool on the alert rules (scripts/check-rules.sh), the integration suite (real kube-apiserver + etcd on loopback, network
# namespaces, iptables nft and legacy, real resolvers, CoreDNS as the
# reference for the cluster zone; the Helm chart rendered by a pinned helm and
# applied to the API server) and the end-to-end test on a real
# single-node cluster (scripts/e2e.sh: the DaemonSet, kubelet, kube-proxy,
# containerd, rolling updates under load).
#
#   scripts/test.sh            everything
#   scripts/test.sh unit       vet, staticcheck and unit tests only
#   scripts/test.sh integration
#   scripts/test.sh e2e
#
# The exit status is non-zero when any step fails (each step's own status,
# not a search of its log). On a machine shared by several engineers,
# NODEDNS_HOST_LOCK=/tmp/nodedns-host.lock runs the steps that change the
# host (integration, e2e) under that flock(1) lock, and only those.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
export NODEDNS_CACHE=${NODEDNS_CACHE:-/var/cache/nodedns}
export PATH="$(go env GOPATH)/bin:$PATH"
STATICCHECK_VERSION=v0.8.2

# step TITLE: a phase header with the time since the start, so a CI log
# says where the time went.
T0=$(date +%s)
step() { echo "== [+$(($(date +%s) - T0))s] $*"; }

# locked CMD...: CMD under the host lock when NODEDNS_HOST_LOCK names one.
locked() {
  if [[ -n ${NODEDNS_HOST_LOCK:-} ]]; then
    flock "$NODEDNS_HOST_LOCK" "$@"
  else
    "$@"
  fi
}

scripts/deps.sh

# helm at a pinned version (built with go install, cached): the chart's lint,
# its rendering into deploy/daemonset.yaml and the chart tests (unit: deploy/;
# integration: the rendering applied to a real API server).
echo "== helm (cached in $NODEDNS_CACHE)"
NODEDNS_HELM=$(scripts/helm.sh | tail -n 1)
export NODEDNS_HELM

if [[ $what == all || $what == unit ]]; then
  step "go vet"
  go vet ./...
  go vet -tags integration ./integration/
  step "staticcheck $STATICCHECK_VERSION"
  if ! staticcheck -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
    go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
  fi
  staticcheck ./...
  step "deploy/daemonset.yaml is the chart's default rendering"
  scripts/render-manifest.sh --check
  step "unit tests (-race)"
  go test -race -count=1 ./...
  step "alert rules (promtool check rules, promtool test rules)"
  scripts/check-rules.sh
fi

if [[ $what == all || $what == integration ]]; then
  step "kube-apiserver (cached in $NODEDNS_CACHE)"
  NODEDNS_KUBE_APISERVER=$(scripts/kube-apiserver.sh | tail -n 1)
  export NODEDNS_KUBE_APISERVER
  step "CoreDNS (cached in $NODEDNS_CACHE), the reference of the differential tests"
  NODEDNS_COREDNS=$(scripts/coredns.sh | tail -n 1)
  export NODEDNS_COREDNS
  step "Prometheus Operator CRDs (Go module cache), for the chart's monitoring objects"
  NODEDNS_PROMETHEUS_CRDS=$(scripts/prometheus-crds.sh | tail -n 1)
  export NODEDNS_PROMETHEUS_CRDS
  step "integration tests"
  log=/tmp/nodedns-integration.log
  set +e
  locked go test -tags integration -count=1 -timeout 40m -v ./integration/ 2>&1 | tee "$log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go:[0-9]+'
  rc=${PIPESTATUS[0]}
  set -e
  if ((rc != 0)); then
    echo "integration tests failed: go test exited $rc (full log: $log)"
    tail -n 60 "$log"
    exit "$rc"
  fi
fi

if [[ $what == all || $what == integration ]]; then
  # A short run of the pod workloads: the benchmark builds its pod (a
  # registered Pod's network namespace), every server answers what the pod
  # sends, and the script cleans up; the figures of so short a run mean
  # nothing and are not kept.
  step "scripts/bench.sh pod workloads, one short round"
  locked scripts/bench.sh -c -w 'pod pod-shortcut pod-hit' -l 1 -r 1 -n 100 -Q 2000 -T 2 >/dev/null
fi

if [[ $what == all || $what == e2e ]]; then
  step "end-to-end on a real single-node cluster (scripts/e2e.sh)"
  locked scripts/e2e.sh
fi
step "all passed"
