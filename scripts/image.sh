#!/usr/bin/env bash
# Builds container images without a Docker engine or a registry and imports
# them into the local cluster's containerd (scripts/cluster.sh). The last
# line of stdout is the image reference.
#
#   scripts/image.sh [nodedns]   the nodedns image, from the Dockerfile
#   scripts/image.sh client      the e2e test client: glibc userland (bash,
#                                coreutils, tar, getent, dig, dnsperf), a
#                                static musl resolver client and the
#                                availability loads (dnsload, glibc-loop)
#   scripts/image.sh coredns     CoreDNS (scripts/coredns.sh) as the e2e
#                                cluster's central DNS
#   scripts/image.sh pause       the sandbox (pause) image
#
# The nodedns image is the one the Dockerfile describes: internal/imagebuild
# reads the Dockerfile (base suite, packages, the go build with its flags,
# the files copied, user, entrypoint, cmd) and refuses what it cannot
# reproduce; the root filesystem is Debian's, made by mmdebstrap with the
# Dockerfile's packages and the paths bookworm-slim leaves out; the result
# is checked against the Dockerfile (`imagebuild verify`) before import.
#
# Cached under ${NODEDNS_CACHE:-/var/cache/nodedns}/images: root
# filesystems by suite, architecture and package list; images by version
# (a tree with uncommitted changes is always rebuilt).
#
# Env: NODEDNS_CACHE; VERSION (default: git describe); NO_IMPORT=1 to only
#      build; CONTAINERD_ADDRESS (default: the local cluster's socket).
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-nodedns}
CACHE="${NODEDNS_CACHE:-/var/cache/nodedns}"
IMAGES="${CACHE}/images"
CONTAINERD_ADDRESS="${CONTAINERD_ADDRESS:-/run/nodedns-cluster/containerd/containerd.sock}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

log() { printf 'image.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

mkdir -p "$IMAGES"
work=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-image.XXXXXX")
# A temporary directory left behind is named by rm and does not fail the
# run: under set -e a failed command in the trap would exit with its status.
trap 'rm -rf "$work" || true' EXIT

need_pkgs() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c "install ok installed" >/dev/null || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

imagebuild() {
	go run ./internal/tools/imagebuild "$@"
}

# rootfs SUITE ARCH SLIM PKG,PKG... -> path of a cached root filesystem tar
# made by mmdebstrap (minbase, as the Debian base images are).
rootfs() {
	local suite=$1 arch=$2 slim=$3 pkgs=$4 key out
	key=$(printf '%s\n' "$suite" "$arch" "$slim" "$pkgs" "$MIRROR" "v2" | sha256sum | cut -c1-16)
	out="${IMAGES}/rootfs-${suite}-${arch}-${key}.tar"
	if [[ -s "$out" ]]; then
		echo "$out"
		return
	fi
	need_pkgs mmdebstrap
	# merged-/usr set up by the hook, as the Debian base images have it,
	# rather than by installing usrmerge (and perl with it).
	local opts=(--variant=minbase --architectures="$arch" --format=tar --quiet
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
	[[ -n "$pkgs" ]] && opts+=(--include="$pkgs")
	if [[ "$slim" == true ]]; then
		# What debian:SUITE-slim leaves out (documentation, manuals,
		# translations), as dpkg path excludes.
		local p
		for p in /usr/share/doc/'*' /usr/share/man/'*' /usr/share/groff/'*' /usr/share/info/'*' \
			/usr/share/lintian/'*' /usr/share/linda/'*' /usr/share/locale/'*'; do
			opts+=("--dpkgopt=path-exclude=$p")
		done
		opts+=("--dpkgopt=path-include=/usr/share/doc/*/copyright" "--dpkgopt=path-include=/usr/share/locale/locale.alias")
	fi
	log "making the ${suite}/${arch} root filesystem with ${pkgs:-no extra packages} (mmdebstrap)"
	mmdebstrap "${opts[@]}" "$suite" "${out}.tmp" \
		"deb ${MIRROR} ${suite} main" "deb ${MIRROR} ${suite}-updates main" \
		"deb ${SECURITY_MIRROR} ${suite}-security main" >&2
	mv -f "${out}.tmp" "$out"
	echo "$out"
}

version() {
	if [[ -n "${VERSION:-}" ]]; then
		echo "$VERSION"
		return
	fi
	local v
	v=$(git describe --always --tags 2>/dev/null || echo dev)
	if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
		v="${v}-dirty-$(git diff HEAD | sha256sum | cut -c1-8)"
	fi
	echo "$v"
}

import() {
	local archive=$1 ref=$2
	if [[ "${NO_IMPORT:-}" == 1 ]]; then
		return
	fi
	[[ -S "$CONTAINERD_ADDRESS" ]] || die "no containerd at ${CONTAINERD_ADDRESS} (scripts/cluster.sh up first, or NO_IMPORT=1)"
	ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images import --no-unpack "$archive" >&2
	local have
	have=$(ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images ls -q)
	grep -qx "$ref" <<<"$have" || die "$ref not in containerd after import"
	log "imported $ref"
}

build_nodedns() {
	local v plan suite arch slim pkgs base ref out
	v=$(version)
	plan=$(imagebuild plan -f Dockerfile -build-arg "VERSION=$v")
	suite=$(sed -n 's/^suite=//p' <<<"$plan")
	arch=$(sed -n 's/^arch=//p' <<<"$plan")
	slim=$(sed -n 's/^slim=//p' <<<"$plan")
	pkgs=$(sed -n 's/^packages=//p' <<<"$plan")
	ref="localhost/nodedns:${v}"
	out="${IMAGES}/nodedns-${v}.tar"
	if [[ "$v" == *-dirty-* || ! -s "$out" ]]; then
		base=$(rootfs "$suite" "$arch" "$slim" "$pkgs")
		log "building ${ref} from the Dockerfile"
		imagebuild build -f Dockerfile -context . -rootfs "$base" -build-arg "VERSION=$v" -tag "$ref" -o "$out"
	fi
	# The image must be what the Dockerfile says, and carry both iptables
	# backends the agent chooses between.
	local want=() b
	for b in iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore \
		iptables-nft iptables-nft-save iptables-legacy iptables-legacy-save \
		ip6tables-nft ip6tables-nft-save ip6tables-legacy ip6tables-legacy-save; do
		want+=(-want "/usr/sbin/$b")
	done
	imagebuild verify -f Dockerfile -build-arg "VERSION=$v" "${want[@]}" "$out" >&2
	import "$out" "$ref"
	echo "$ref"
}

build_client() {
	local base ref out f stale=0
	need_pkgs musl-tools gcc libc6-dev
	ref="localhost/nodedns-e2e-client:v2"
	out="${IMAGES}/client-v2.tar"
	for f in scripts/gai.c internal/tools/dnsload/main.go; do
		[[ "$f" -nt "$out" ]] && stale=1
	done
	if [[ ! -s "$out" || $stale == 1 ]]; then
		base=$(rootfs bookworm "$(go env GOARCH)" true "bash,coreutils,tar,libc-bin,bind9-dnsutils,dnsperf")
		# One getaddrinfo program (scripts/gai.c), built twice: static
		# against musl, and against this machine's bookworm glibc (the
		# image's own). Installed under the names of its modes, it runs
		# the mode it is called by: musl-resolve NAME..., glibc-loop
		# THREADS SECONDS PAUSE_MS NAME...
		musl-gcc -static -O2 -s -pthread -o "$work/musl-resolve" scripts/gai.c
		gcc -O2 -s -pthread -o "$work/glibc-loop" scripts/gai.c
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/dnsload" ./internal/tools/dnsload
		imagebuild assemble -rootfs "$base" -file "/usr/local/bin/musl-resolve=$work/musl-resolve" \
			-file "/usr/local/bin/glibc-loop=$work/glibc-loop" -file "/usr/local/bin/dnsload=$work/dnsload" \
			-entrypoint '["/bin/sleep","infinity"]' -tag "$ref" -o "$out"
	fi
	import "$out" "$ref"
	echo "$ref"
}

# build_coredns: CoreDNS (scripts/coredns.sh's build, cached) as a
# cluster's central DNS for the e2e: the server pods fall back to when no
# agent serves their node.
build_coredns() {
	local bin ref out
	bin=$(scripts/coredns.sh | tail -n 1)
	ref="localhost/nodedns-e2e-coredns:$(basename "$(dirname "$bin")")"
	out="${IMAGES}/$(basename "$(dirname "$bin")")-central.tar"
	if [[ ! -s "$out" || "$bin" -nt "$out" ]]; then
		imagebuild assemble -file "/coredns=$bin" -entrypoint '["/coredns"]' -tag "$ref" -o "$out"
	fi
	import "$out" "$ref"
	echo "$ref"
}

build_pause() {
	local ref out
	ref="localhost/nodedns-pause:v1"
	out="${IMAGES}/pause-v1.tar"
	if [[ ! -s "$out" || internal/tools/pause/main.go -nt "$out" ]]; then
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/pause" ./internal/tools/pause
		imagebuild assemble -file "/pause=$work/pause" -entrypoint '["/pause"]' -user 65535:65535 -tag "$ref" -o "$out"
	fi
	import "$out" "$ref"
	echo "$ref"
}

case "$what" in
nodedns) build_nodedns ;;
client) build_client ;;
coredns) build_coredns ;;
pause) build_pause ;;
*) die "unknown image ${what}: want nodedns, client, coredns or pause" ;;
esac
