#!/usr/bin/env bash
# Builds the Kubernetes binaries nodedns's tests and local cluster run, from
# the k8s.io/kubernetes Go module at one pinned version, and prints the
# directory that holds them.
#
# k8s.io/kubernetes cannot be required directly: its go.mod pins every
# staging module (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and replaces
# it with a ./staging path that the published module does not contain. A
# throwaway build module outside nodedns's go.mod requires k8s.io/kubernetes
# and replaces each staging module with its published v0.Y.Z; the list is
# read from the downloaded go.mod, so it cannot go stale.
#
# Every component is built in one `go build` of one build module (they share
# nearly all packages, so the set costs little more than the API server
# alone), statically (CGO_ENABLED=0), with the version stamped as the
# release build stamps it. The binaries are cached by version under
# ${NODEDNS_CACHE:-/var/cache/nodedns}/kubernetes-VERSION/; a second run only
# prints the path. Concurrent callers wait on one build (flock).
#
# A caller that needs some of them names them (scripts/kube-apiserver.sh:
# the API server alone, about three quarters of the set's packages, so a
# fresh machine's integration suite need not wait for the rest); a later
# call for the set builds only what is missing, reusing the build cache.
#
# Usage: scripts/kube-bin.sh [COMPONENT...]  (default: all of them; last
#        line of stdout: the bin directory)
# Env:   KUBE_VERSION (default v1.34.4), NODEDNS_CACHE
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
DIR="${CACHE}/kubernetes-${KUBE_VERSION}"
ALL=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)
COMPONENTS=("${@:-${ALL[@]}}")
for c in "${COMPONENTS[@]}"; do
	[[ " ${ALL[*]} " == *" ${c} "* ]] || { printf 'kube-bin.sh: unknown component %q: want some of %s\n' "$c" "${ALL[*]}" >&2; exit 2; }
done

log() { printf 'kube-bin.sh: %s\n' "$*" >&2; }

# missing: the asked components not built yet, one per line.
missing() {
	local c
	for c in "${COMPONENTS[@]}"; do
		[[ -x "${DIR}/bin/${c}" ]] || echo "$c"
	done
}

complete() { [[ -z "$(missing)" ]]; }

build() {
	local tmp staging_version gomod staging pkgs=() c
	case "$KUBE_VERSION" in
	v1.*) staging_version="v0.${KUBE_VERSION#v1.}" ;;
	*) log "KUBE_VERSION must look like v1.Y.Z, got ${KUBE_VERSION}"; return 1 ;;
	esac

	tmp="$(mktemp -d "${TMPDIR:-/tmp}/kube-build.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	# Left behind, it is named by rm and fails nothing (under set -e a
	# failed command in the trap would end the script with its status).
	trap "rm -rf '${tmp}' || true" RETURN

	log "downloading k8s.io/kubernetes@${KUBE_VERSION} metadata"
	gomod="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
	if [[ -z "$gomod" || ! -f "$gomod" ]]; then
		log "could not locate go.mod of k8s.io/kubernetes@${KUBE_VERSION}"
		return 1
	fi
	staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod" | sort -u)"
	if [[ -z "$staging" ]]; then
		log "no staging replaces found in ${gomod}"
		return 1
	fi
	log "replacing $(wc -w <<<"$staging") staging modules with ${staging_version}"
	{
		echo "module nodedns.local/kube-build"
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
	local ldflags="-s -w"
	local p
	# Both version packages: components report component-base's, kubectl
	# also client-go's.
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X ${p}.gitVersion=${KUBE_VERSION} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor} -X ${p}.gitTreeState=clean"
	done
	local todo
	mapfile -t todo < <(missing)
	for c in "${todo[@]}"; do
		pkgs+=("k8s.io/kubernetes/cmd/${c}")
	done

	mkdir -p "${tmp}/out"
	(
		cd "$tmp"
		export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
		log "resolving dependencies"
		go get "${pkgs[0]}@${KUBE_VERSION}" >&2
		log "building ${todo[*]} (all of them: about 5-10 minutes cold on 2 cores)"
		go build -trimpath -ldflags "$ldflags" -o "${tmp}/out/" "${pkgs[@]}" >&2
	)
	mkdir -p "${DIR}/bin"
	for c in "${todo[@]}"; do
		mv -f "${tmp}/out/${c}" "${DIR}/bin/${c}"
	done
	log "built ${DIR}/bin"
}

main() {
	mkdir -p "$CACHE"
	if ! complete; then
		exec 9>"${CACHE}/.kubernetes-${KUBE_VERSION}.lock"
		flock 9
		complete || build
		flock -u 9
	fi
	"${DIR}/bin/${COMPONENTS[0]}" --version >&2
	echo "${DIR}/bin"
}

main "$@"
