#!/usr/bin/env bash
# The commands docs/install.md and docs/troubleshooting.md tell an operator
# to run, run on the local cluster (scripts/cluster.sh) against the agent
# of the shipped manifest (deploy/daemonset.yaml, only its image set).
#
#   scripts/docs-e2e.sh            run every marked block; exit 1 if one fails
#   scripts/docs-e2e.sh --list     print the marked blocks (FILE:LINE KIND),
#                                  one a line, and do nothing else
#   KEEP=1 scripts/docs-e2e.sh     leave what this run brought up (the
#                                  cluster, the DaemonSet) up
#   VERBOSE=1 scripts/docs-e2e.sh  print every block's output, not only a
#                                  failed one's
#
# A block is marked by its fence's info string (docs/testing.md, "Shell
# blocks of the docs"): ```sh node (run as root on the node, the machine
# this runs on) or ```sh kubectl (run against the cluster, `kubectl` being
# scripts/cluster.sh kubectl). Each block runs on its own under bash
# -euo pipefail, with the placeholder NODE (a whole word) replaced by the
# node's name, and POD set to the agent's pod on it (pod/NAME). A block
# fails on the first command that does: a grep that finds nothing too.
#
# Called from scripts/e2e.sh (or the e2e Go tests) once the DaemonSet of
# deploy/daemonset.yaml is Ready, with KUBECONFIG exported, it uses that
# cluster and agent and leaves them as they are. Alone, it brings the
# cluster up when it is not (scripts/cluster.sh up), applies the manifest
# when no nodedns DaemonSet runs (the image from scripts/image.sh), and
# removes what it brought up at the end unless KEEP=1. On a shared machine
# run it under `flock /tmp/nodedns-host.lock`.
#
# Needs root (the node blocks read iptables and conntrack), and, on the
# node, what the docs use: iproute2, iptables, conntrack, dig, curl, jq.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCS=(docs/install.md docs/troubleshooting.md)
KEEP=${KEEP:-0}
VERBOSE=${VERBOSE:-0}

log() { printf 'docs-e2e: %s\n' "$*" >&2; }

# blocks prints the marked blocks of the docs: a header line
# "@@ FILE:LINE KIND" (LINE: the fence's line), then the block's lines.
blocks() {
	awk '
		FNR == 1 { inb = 0 }
		inb && /^```[ \t]*$/ { inb = 0; next }
		inb { print; next }
		/^```sh[ \t]+(node|kubectl)[ \t]*$/ {
			split($0, f, /[ \t]+/)
			printf "@@ %s:%d %s\n", FILENAME, FNR, f[2]
			inb = 1
		}
	' "${DOCS[@]}"
}

if [[ "${1:-}" == --list ]]; then
	blocks | sed -n 's/^@@ //p'
	exit 0
fi
[[ $# == 0 ]] || {
	log "usage: scripts/docs-e2e.sh [--list]"
	exit 2
}
[[ $(id -u) == 0 ]] || {
	log "needs root"
	exit 1
}
for c in ip iptables-nft-save conntrack dig curl jq ss awk; do
	command -v "$c" >/dev/null || {
		log "missing ${c}: the docs' node commands use it (scripts/deps.sh installs it)"
		exit 1
	}
done

work=$(mktemp -d /tmp/nodedns-docs-e2e.XXXXXX)
cluster_up=0
applied=0
cleanup() {
	local rc=$?
	set +e
	if [[ "$KEEP" != 1 ]]; then
		if [[ $applied == 1 ]]; then
			scripts/cluster.sh kubectl delete -f "${work}/daemonset.yaml" --wait=true >/dev/null ||
				{ log "cleanup: could not delete the DaemonSet it applied"; rc=1; }
		fi
		if [[ $cluster_up == 1 ]]; then
			scripts/cluster.sh down || { log "cleanup: scripts/cluster.sh down failed"; rc=1; }
		fi
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT

k() { scripts/cluster.sh kubectl "$@"; }

if [[ -z "${KUBECONFIG:-}" ]]; then
	if [[ ! -e /run/nodedns-cluster ]]; then
		cluster_up=1
	fi
	KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
	export KUBECONFIG
fi
if ! k -n kube-system get ds nodedns >/dev/null 2>&1; then
	image=$(scripts/image.sh nodedns | tail -n 1)
	sed -e "s|image: registry.example.com/nodedns:[^ ]*|image: ${image}|" deploy/daemonset.yaml >"${work}/daemonset.yaml"
	applied=1
	k apply -f "${work}/daemonset.yaml" >/dev/null
fi
k -n kube-system rollout status ds/nodedns --timeout=180s >/dev/null
NODE=$(k get nodes -o jsonpath='{.items[0].metadata.name}')
POD=$(k -n kube-system get pods -l app.kubernetes.io/name=nodedns --field-selector "spec.nodeName=${NODE}" -o name | head -n 1)
[[ -n "$POD" ]] || {
	log "no nodedns pod on ${NODE}"
	exit 1
}
export NODE POD
log "node ${NODE}, agent ${POD}"

# The blocks' own kubectl: the local cluster's.
cat >"${work}/prelude.sh" <<EOF
kubectl() { "$(pwd)/scripts/cluster.sh" kubectl "\$@"; }
EOF

failed=0 n=0
blocks >"${work}/all"
while IFS= read -r header; do
	where=${header#@@ }
	where=${where% *}
	kind=${header##* }
	n=$((n + 1))
	f="${work}/block-${n}.sh"
	cat "${work}/prelude.sh" >"$f"
	# The lines up to the next header.
	awk -v h="$header" '$0 == h { on = 1; next } on && /^@@ / { exit } on' "${work}/all" |
		sed -E "s/(^|[^A-Za-z0-9_])NODE([^A-Za-z0-9_]|$)/\1${NODE}\2/g" >>"$f"
	if out=$(bash -euo pipefail "$f" 2>&1); then
		log "ok ${where} (${kind})"
		[[ "$VERBOSE" != 1 ]] || printf '%s\n' "$out" | sed 's/^/    /' >&2
	else
		failed=$((failed + 1))
		log "FAIL ${where} (${kind}): exit $?"
		printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /' >&2
	fi
done < <(grep '^@@ ' "${work}/all")
if ((failed > 0)); then
	log "${failed} of ${n} blocks failed"
	exit 1
fi
log "all ${n} blocks ran"
