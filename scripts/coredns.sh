#!/usr/bin/env bash
# Builds CoreDNS at a pinned version for the tests (the reference of the
# differential tests, the central cluster DNS of the e2e cluster, a
# server of scripts/bench.sh) and prints its path.
#
# CoreDNS's own main with every plugin but the six whose dependencies are
# most of a full build's time and that no test of nodedns configures:
# route53, azure, clouddns (cloud SDKs), etcd (its client), trace (tracer
# libraries) and nomad (its API client). The build module is written in a
# temporary directory outside the repository: a main that imports
# CoreDNS's coremain and the plugins' packages as CoreDNS's generated
# core/plugin/zplugin.go lists them, and sets the directives in the order of
# its core/dnsserver/zdirectives.go, both read from the downloaded module,
# so they cannot go stale; the dependencies are CoreDNS's own go.mod's.
# Every plugin kept is CoreDNS's code at that version, so its answers are
# CoreDNS's. A second run prints the cached binary without building. Only
# the Go module proxy is needed.
#
# Usage: scripts/coredns.sh            (last line of stdout: binary path)
# Env:   COREDNS_VERSION (default v1.15.0), NODEDNS_CACHE
set -euo pipefail

COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
# The plugins left out (see above); the cache directory names the build.
DROPPED=(route53 azure clouddns etcd trace nomad)
DIR="${CACHE}/coredns-${COREDNS_VERSION}-nocloud"
BIN="${DIR}/coredns"

log() { printf 'coredns.sh: %s\n' "$*" >&2; }

build() {
	local tmp src p
	tmp="$(mktemp -d "${DIR}/.build.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	# Left behind, it is named by rm and fails nothing (under set -e a
	# failed command in the trap would end the script with its status).
	trap "rm -rf '${tmp}' || true" RETURN
	export GOFLAGS="-mod=mod -trimpath -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
	src="$(cd "$tmp" && go mod download -json "github.com/coredns/coredns@${COREDNS_VERSION}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
	if [[ -z "$src" || ! -f "${src}/core/plugin/zplugin.go" || ! -f "${src}/core/dnsserver/zdirectives.go" ]]; then
		log "could not locate the source of github.com/coredns/coredns@${COREDNS_VERSION}"
		return 1
	fi
	# keep: a plugin path or a quoted directive that is none of DROPPED.
	local drop
	drop="$(IFS='|'; echo "${DROPPED[*]}")"
	local imports directives
	imports="$(grep -E '^[[:space:]]*_ "[^"]+"' "${src}/core/plugin/zplugin.go" | grep -vE "/plugin/(${drop})\"")"
	directives="$(sed -n '/^var Directives = \[\]string{/,/^}/p' "${src}/core/dnsserver/zdirectives.go" |
		grep -E '^[[:space:]]*"[a-z0-9_]+",' | grep -vE "^[[:space:]]*\"(${drop})\",")"
	if (($(wc -l <<<"$imports") < 40)) || (($(wc -l <<<"$directives") < 40)); then
		log "unexpected plugin lists in ${src} ($(wc -l <<<"$imports") imports, $(wc -l <<<"$directives") directives)"
		return 1
	fi
	log "building github.com/coredns/coredns@${COREDNS_VERSION} without ${DROPPED[*]} ($(wc -l <<<"$directives") plugins; a few minutes on 2 cores)"
	{
		echo "// Command coredns is CoreDNS ${COREDNS_VERSION} without ${DROPPED[*]}: written by nodedns's scripts/coredns.sh."
		echo "package main"
		echo
		echo "import ("
		echo '	"github.com/coredns/coredns/core/dnsserver"'
		echo '	"github.com/coredns/coredns/coremain"'
		echo
		echo "$imports"
		echo ")"
		echo
		echo "func init() {"
		echo "	dnsserver.Directives = []string{"
		echo "$directives"
		echo "	}"
		echo "}"
		echo
		echo "func main() { coremain.Run() }"
	} >"${tmp}/main.go"
	printf 'module nodedns.local/coredns-build\n\ngo 1.24\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"${tmp}/go.mod"
	(
		cd "$tmp"
		go mod tidy >&2
		go build -ldflags "-s -w" -o "${tmp}/coredns" . >&2
	)
	for p in "${DROPPED[@]}"; do
		if "${tmp}/coredns" -plugins | grep -qx "${p}"; then
			log "built CoreDNS still has plugin ${p}"
			return 1
		fi
	done
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
