#!/usr/bin/env bash
# Builds Cilium from the github.com/cilium/cilium Go module at one pinned
# version, for scripts/cluster.sh's Cilium mode (CLUSTER_CNI=cilium), and
# prints the directory that holds it.
#
# What a Cilium node needs, as the cilium/cilium image has it:
#   bin/cilium-agent   the agent (daemon/)
#   bin/cilium-cni     the CNI plugin (plugins/cilium-cni)
#   bin/cilium-dbg     the CLI (status, service list, lrp list, endpoint list)
#   bin/clang          a link to the Debian clang the version asks for: the
#                      agent compiles its BPF programs at run time and runs
#                      "clang" from PATH
#   lib/bpf/           the BPF C sources it compiles (--lib-dir=DIR/lib)
#   crds/              the CiliumNetworkPolicy, CiliumLocalRedirectPolicy, ...
#                      CustomResourceDefinitions, as the module ships them
#
# No operator: cilium-operator-generic cannot be built from the module here,
# because it imports sigs.k8s.io/mcs-api/controllers v0.5.2 (a nested
# module of mcs-api) and the Go module proxy refuses it ("403 Forbidden:
# This module version is not available"; it serves sigs.k8s.io/mcs-api
# itself). On one node the operator's jobs are done otherwise: the CRDs are
# applied from crds/ and the node's pod ranges are set on the Node object
# (--ipam=kubernetes), see scripts/cluster-cilium.sh.
#
# Version: v1.20.2. Its compatibility table lists Kubernetes 1.33-1.36 (the
# cluster runs 1.34.4) and its system requirements clang+LLVM >= 18.1:
# Debian 12 has clang-19 (19.1.7) in bookworm/main. v1.15.19 (clang >= 10)
# is tested only up to Kubernetes 1.29.
#
# One dependency is substituted: v1.20.2's go.mod pins github.com/osrg/gobgp/v4
# at the pseudo-version v4.6.1-0.20260630022313-d6dee8360046, which the Go
# module proxy refuses ("403 Forbidden: This module version is not
# available"); the build uses v4.7.0, the next release, through a replace in
# a copy of the module. gobgp is only used by the BGP control plane, which
# the cluster leaves off.
#
# The module is copied to a throwaway directory (the module cache is read
# only) and built there as the main module, with the tags and version stamp
# its Makefiles use, CGO_ENABLED=0, -p 2, -trimpath (so a rebuild in another
# throwaway directory reuses the build cache). Measured here with load ~13 on
# 2 cores: cilium-agent 1625 s cold, 133.6 MB; then cilium-cni 5 s, 17.3 MB;
# cilium-dbg 22 s, 98.4 MB. Cached by version under
# ${NODEDNS_CACHE:-/var/cache/nodedns}/cilium-VERSION/; a second run only
# prints the path. Concurrent callers wait on one build (flock).
#
# Usage: scripts/cilium-bin.sh   (last line of stdout: the cache directory,
#        holding bin/ and lib/)
# Env:   CILIUM_VERSION (default v1.20.2), NODEDNS_CACHE
set -euo pipefail

CILIUM_VERSION="${CILIUM_VERSION:-v1.20.2}"
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
DIR="${CACHE}/cilium-${CILIUM_VERSION}"
BINS=(cilium-agent cilium-cni cilium-dbg)

log() { printf 'cilium-bin.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# clang_pkg: the Debian clang package the version's system requirements
# ask for.
clang_pkg() {
	case "$CILIUM_VERSION" in
	v1.1[5-7].*) echo clang-14 ;;
	v1.1[89].* | v1.2[0-9].*) echo clang-19 ;;
	*) die "no clang known for Cilium ${CILIUM_VERSION}: set it in clang_pkg" ;;
	esac
}

# substitutes: go.mod replaces for dependencies the module proxy does not
# serve at the version the release pins, one "module=module@version" a line.
substitutes() {
	case "$CILIUM_VERSION" in
	v1.20.2) echo "github.com/osrg/gobgp/v4=github.com/osrg/gobgp/v4@v4.7.0" ;;
	esac
}

need_pkgs() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

complete() {
	local b
	for b in "${BINS[@]}" clang; do
		[[ -x "${DIR}/bin/${b}" ]] || return 1
	done
	[[ -f "${DIR}/lib/bpf/bpf_lxc.c" && -d "${DIR}/crds" ]]
}

build() {
	local tmp src moddir s start
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/cilium-build.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	# EXIT too: a failed go build ends the script (set -e) before RETURN.
	trap "rm -rf '${tmp}' || true" RETURN EXIT

	log "downloading github.com/cilium/cilium@${CILIUM_VERSION}"
	moddir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/cilium/cilium@${CILIUM_VERSION}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
	[[ -n "$moddir" && -f "${moddir}/go.mod" ]] || die "could not locate the source of github.com/cilium/cilium@${CILIUM_VERSION}"
	src="${tmp}/src"
	cp -r "$moddir" "$src"
	chmod -R u+w "$src"
	# The release's vendor/ holds only modules.txt: build in module mode.
	rm -rf "${src}/vendor"
	while IFS= read -r s; do
		[[ -z "$s" ]] && continue
		log "substituting ${s} (the proxy does not serve the pinned version)"
		(cd "$src" && go mod edit -replace "$s")
	done < <(substitutes)

	local ver=${CILIUM_VERSION#v}
	local ldflags="-s -w -X 'github.com/cilium/cilium/pkg/version.ciliumVersion=${ver} go-module'"
	mkdir -p "${tmp}/out"
	(
		cd "$src"
		export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
		local t name pkg tags
		for t in "cilium-agent ./daemon osusergo" \
			"cilium-cni ./plugins/cilium-cni osusergo" \
			"cilium-dbg ./cilium-dbg osusergo"; do
			read -r name pkg tags <<<"$t"
			[[ -x "${DIR}/bin/${name}" ]] && continue
			log "building ${name}$([[ "$name" == cilium-agent ]] && echo ' (about 27 minutes cold on 2 busy cores)')"
			start=$(date +%s)
			go build -p 2 -trimpath -tags "$tags" -ldflags "$ldflags" -o "${tmp}/out/${name}" "$pkg" >&2
			log "built ${name} in $(($(date +%s) - start))s, $(stat -c %s "${tmp}/out/${name}") bytes"
		done
	)
	mkdir -p "${DIR}/bin" "${DIR}/lib"
	local b
	for b in "${BINS[@]}"; do
		if [[ -f "${tmp}/out/${b}" ]]; then mv -f "${tmp}/out/${b}" "${DIR}/bin/${b}"; fi
	done
	rm -rf "${DIR}/lib/bpf" "${DIR}/crds"
	cp -r "${src}/bpf" "${DIR}/lib/bpf"
	mkdir -p "${DIR}/crds"
	cp "${src}"/pkg/k8s/apis/cilium.io/client/crds/v2/*.yaml "${src}"/pkg/k8s/apis/cilium.io/client/crds/v2alpha1/*.yaml "${DIR}/crds/"
	log "built ${DIR}"
}

main() {
	local clang
	clang=$(clang_pkg)
	need_pkgs "$clang" ipset iptables
	mkdir -p "$CACHE"
	if ! complete; then
		exec 9>"${CACHE}/.cilium-${CILIUM_VERSION}.lock"
		flock 9
		if ! complete; then
			build
			ln -sfn "/usr/bin/${clang}" "${DIR}/bin/clang"
		fi
		flock -u 9
	fi
	"${DIR}/bin/cilium-agent" --version >&2
	"${DIR}/bin/clang" --version | head -n 1 >&2
	echo "$DIR"
}

main "$@"
