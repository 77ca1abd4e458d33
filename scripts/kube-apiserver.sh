#!/usr/bin/env bash
# Builds a real kube-apiserver for the integration tests and prints its path.
#
# kube-apiserver is built from the k8s.io/kubernetes Go module in a throwaway
# build module outside nodedns's own go.mod: k8s.io/kubernetes cannot be
# required directly because its go.mod pins every staging module (k8s.io/api,
# k8s.io/apiserver, ...) at v0.0.0 and replaces it with a ./staging path that
# does not exist in the published module. The build module replaces each of
# them with its published v0.Y.Z instead. The list of staging modules is read
# from the downloaded k8s.io/kubernetes go.mod so it cannot go stale.
#
# Only the Go module proxy is needed. The binary is cached by version under
# ${NODEDNS_CACHE:-/var/cache/nodedns}; a second run prints the cached path.
# It also makes sure etcd (Debian package etcd-server) is installed, because
# every caller of this script also needs etcd.
#
# Usage: scripts/kube-apiserver.sh            (last line of stdout: binary path)
# Env:   KUBE_VERSION (default v1.34.4), NODEDNS_CACHE, SKIP_ETCD=1
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
BIN="${CACHE}/kube-apiserver-${KUBE_VERSION}"

log() { printf 'kube-apiserver.sh: %s\n' "$*" >&2; }

ensure_etcd() {
	if [[ "${SKIP_ETCD:-}" == 1 ]] || command -v etcd >/dev/null 2>&1; then
		return 0
	fi
	log "etcd not found; installing Debian package etcd-server"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y etcd-server >&2 || { apt-get update >&2 && apt-get install -y etcd-server >&2; }
	# The package starts a system etcd on the default ports; the tests run
	# their own on random ports, so the system one is not wanted.
	if command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now etcd >/dev/null 2>&1 || true
	fi
}

build() {
	local tmp staging_version gomod staging
	case "$KUBE_VERSION" in
	v1.*) staging_version="v0.${KUBE_VERSION#v1.}" ;;
	*) log "KUBE_VERSION must look like v1.Y.Z, got ${KUBE_VERSION}"; return 1 ;;
	esac

	tmp="$(mktemp -d "${TMPDIR:-/tmp}/kas-build.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '${tmp}'" RETURN

	log "downloading k8s.io/kubernetes@${KUBE_VERSION} metadata"
	gomod="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
	if [[ -z "$gomod" || ! -f "$gomod" ]]; then
		log "could not locate go.mod of k8s.io/kubernetes@${KUBE_VERSION}"
		return 1
	fi

	# Every module that k8s.io/kubernetes replaces with a ./staging/ path.
	staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod" | sort -u)"
	if [[ -z "$staging" ]]; then
		log "no staging replaces found in ${gomod}"
		return 1
	fi
	log "replacing $(wc -w <<<"$staging") staging modules with ${staging_version}"

	{
		echo "module nodedns.local/kube-apiserver-build"
		echo
		echo "go 1.24"
		echo
		echo "require k8s.io/kubernetes ${KUBE_VERSION}"
		echo
		echo "replace ("
		for m in $staging; do
			printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"
		done
		echo ")"
	} >"${tmp}/go.mod"

	local major minor
	major="${KUBE_VERSION#v}"; major="${major%%.*}"
	minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
	local pkg=k8s.io/component-base/version
	local ldflags="-s -w -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"

	(
		cd "$tmp"
		export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
		log "resolving dependencies"
		go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBE_VERSION}" >&2
		log "building (several minutes on 2 cores)"
		go build -trimpath -ldflags "$ldflags" -o "${BIN}.tmp.$$" k8s.io/kubernetes/cmd/kube-apiserver >&2
	)
	mv -f "${BIN}.tmp.$$" "$BIN"
	log "built ${BIN}"
}

main() {
	ensure_etcd
	mkdir -p "$CACHE"
	if [[ ! -x "$BIN" ]]; then
		# Serialize concurrent callers (test.sh and a test binary) on one build.
		exec 9>"${CACHE}/.kube-apiserver-${KUBE_VERSION}.lock"
		flock 9
		if [[ ! -x "$BIN" ]]; then
			build
		fi
		flock -u 9
	fi
	"$BIN" --version >&2
	echo "$BIN"
}

main "$@"
