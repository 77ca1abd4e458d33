#!/usr/bin/env bash
# Prints the path of a kube-apiserver for the integration tests, built by
# scripts/kube-bin.sh (the API server alone when it is not there yet; one
# build module, cached by version), and makes sure etcd (Debian package
# etcd-server) is installed, because every caller also needs etcd.
#
# Usage: scripts/kube-apiserver.sh            (last line of stdout: binary path)
# Env:   KUBE_VERSION (default v1.34.4), NODEDNS_CACHE, SKIP_ETCD=1
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'kube-apiserver.sh: %s\n' "$*" >&2; }

if [[ "${SKIP_ETCD:-}" != 1 ]] && ! command -v etcd >/dev/null 2>&1; then
	log "etcd not found; installing Debian package etcd-server"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y etcd-server >&2 || { apt-get update >&2 && apt-get install -y etcd-server >&2; }
fi
dir=$(scripts/kube-bin.sh kube-apiserver | tail -n 1)
echo "${dir}/kube-apiserver"
