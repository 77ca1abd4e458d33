#!/usr/bin/env bash
# Builds CoreDNS at a pinned version for scripts/bench.sh and prints its path.
#
# `go install github.com/coredns/coredns@VERSION` into a cache directory
# outside the repository (nothing of CoreDNS's source is kept in nodedns);
# a second run prints the cached binary without building. Only the Go module
# proxy is needed.
#
# Usage: scripts/coredns.sh            (last line of stdout: binary path)
# Env:   COREDNS_VERSION (default v1.15.0), NODEDNS_CACHE
set -euo pipefail

COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
DIR="${CACHE}/coredns-${COREDNS_VERSION}"
BIN="${DIR}/coredns"

log() { printf 'coredns.sh: %s\n' "$*" >&2; }

build() {
	local tmp
	tmp="$(mktemp -d "${DIR}/.build.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '${tmp}'" RETURN
	log "building github.com/coredns/coredns@${COREDNS_VERSION} (several minutes on 2 cores)"
	# GOBIN is a fresh directory so that a failed build leaves no binary.
	(
		cd "$tmp"
		export GOBIN="$tmp" GOFLAGS="-trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
		go install -ldflags "-s -w" "github.com/coredns/coredns@${COREDNS_VERSION}" >&2
	)
	mv -f "${tmp}/coredns" "$BIN"
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
	"$BIN" -version >&2
	echo "$BIN"
}

main "$@"
