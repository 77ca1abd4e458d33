#!/usr/bin/env bash
# Prints a directory holding the Prometheus Operator's CustomResourceDefinitions
# (monitoring.coreos.com_*.yaml) at a pinned version: the integration test
# installs PodMonitor, ServiceMonitor and PrometheusRule into its API server
# so that the Helm chart's objects of those kinds are validated against the
# real schemas. They come from the operator's Go module (the Go module proxy
# is the only network this needs), kept in the module cache.
#
# Usage: scripts/prometheus-crds.sh     (last line of stdout: the directory)
# Env:   PROMETHEUS_OPERATOR_VERSION (default v0.85.0)
set -euo pipefail
VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@${VERSION}" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crds="${dir}/example/prometheus-operator-crd"
for k in podmonitors servicemonitors prometheusrules; do
	[[ -f "${crds}/monitoring.coreos.com_${k}.yaml" ]] || { echo "prometheus-crds.sh: no ${k} CRD in ${crds}" >&2; exit 1; }
done
echo "$crds"
