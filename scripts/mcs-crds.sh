#!/usr/bin/env bash
# Prints a directory holding the Multi-Cluster Services CustomResourceDefinitions
# (multicluster.x-k8s.io_serviceimports.yaml, ..._serviceexports.yaml) of
# sigs.k8s.io/mcs-api at a pinned version: the integration test installs them
# into its API server so that ServiceImports can be created there and
# answered by nodedns and CoreDNS (`multicluster`) side by side. They come
# from the module (the Go module proxy is the only network this needs), kept
# in the module cache; nodedns itself does not import the module.
#
# Usage: scripts/mcs-crds.sh     (last line of stdout: the directory)
# Env:   MCS_API_VERSION (default v0.5.2, the version CoreDNS 1.15 reads)
set -euo pipefail
VERSION="${MCS_API_VERSION:-v0.5.2}"
dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/mcs-api@${VERSION}" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crds="${dir}/config/crd"
for k in serviceimports serviceexports; do
	[[ -f "${crds}/multicluster.x-k8s.io_${k}.yaml" ]] || { echo "mcs-crds.sh: no ${k} CRD in ${crds}" >&2; exit 1; }
done
echo "$crds"
