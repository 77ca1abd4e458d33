#!/usr/bin/env bash
# Validates nodedns's alerting rules with promtool (Debian's prometheus
# package; scripts/deps.sh installs it): the plain rules file, the groups of
# the PrometheusRule (the Go test in deploy/ extracts and checks them too,
# and keeps them equal to the plain file), and the unit tests of every alert.
#
# Usage: scripts/check-rules.sh
set -euo pipefail
cd "$(dirname "$0")/../deploy/prometheus"

command -v promtool >/dev/null || { echo "check-rules.sh: promtool missing (apt-get install prometheus)" >&2; exit 1; }
tmp=$(mktemp -d)
# A temporary directory left behind is named by rm and does not fail the
# run: under set -e a failed command in the trap would exit with its status.
trap 'rm -rf "$tmp" || true' EXIT

promtool check rules nodedns.rules.yaml
# The PrometheusRule's spec is a rules file indented under spec:.
sed -n '/^spec:$/,$p' nodedns-rules.yaml | tail -n +2 | sed 's/^  //' >"$tmp/prometheusrule-spec.yaml"
promtool check rules "$tmp/prometheusrule-spec.yaml"
promtool test rules nodedns.rules.test.yaml
