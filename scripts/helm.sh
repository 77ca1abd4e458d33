#!/usr/bin/env bash
# Builds helm at a pinned version and prints its path: the chart's lint,
# its rendering into deploy/daemonset.yaml (scripts/render-manifest.sh) and
# the integration test that applies the rendering all use this binary.
#
# `go install helm.sh/helm/v3/cmd/helm@VERSION` into a cache directory
# outside the repository; a second run prints the cached binary without
# building. Only the Go module proxy is needed.
#
# Usage: scripts/helm.sh            (last line of stdout: binary path)
# Env:   HELM_VERSION (default v3.19.5), NODEDNS_CACHE
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.5}"
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
DIR="${CACHE}/helm-${HELM_VERSION}"
BIN="${DIR}/helm"

log() { printf 'helm.sh: %s\n' "$*" >&2; }

build() {
	local tmp
	tmp="$(mktemp -d "${DIR}/.build.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	# Left behind, it is named by rm and fails nothing (under set -e a
	# failed command in the trap would end the script with its status).
	trap "rm -rf '${tmp}' || true" RETURN
	log "building helm.sh/helm/v3/cmd/helm@${HELM_VERSION} (a few minutes on 2 cores)"
	# GOBIN is a fresh directory so that a failed build leaves no binary.
	# Versions are stamped the way helm's Makefile does: its own (helm
	# version), and the Kubernetes version that `helm template` and `helm
	# lint` assume without a cluster (its client-go's minor, 1.34 for
	# v3.19), which the chart's kubeVersion constraint is checked against.
	local k8s_minor ld
	k8s_minor="${HELM_K8S_MINOR:-34}"
	ld="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
	ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${k8s_minor}"
	ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${k8s_minor}"
	(
		cd "$tmp"
		export GOBIN="$tmp" GOFLAGS="-trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
		go install -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
	)
	mv -f "${tmp}/helm" "$BIN"
	log "built ${BIN}"
}

main() {
	mkdir -p "$DIR"
	if [[ ! -x "$BIN" ]]; then
		exec 9>"${DIR}/.lock"
		flock 9
		if [[ ! -x "$BIN" ]]; then
			build
		fi
		flock -u 9
	fi
	"$BIN" version --short >&2
	echo "$BIN"
}

main "$@"
