# shellcheck shell=bash
# What scripts/e2e.sh, scripts/chart-e2e.sh and scripts/cilium-e2e.sh share,
# sourced by each (not run): the log lines, the naming of a failed command,
# the packages the tests read with, the cluster brought up from a clean
# machine, the Go tests run, and the cleanup that takes the cluster down
# and checks that the machine is as before, whatever ended the run.
#
# The sourcing script sets, before it sources this file:
#   E2E_NAME       its name in the log lines ("e2e iptables", "chart-e2e")
#   E2E_DEPS       Debian packages the tests need on the node
# and may define e2e_collect_logs DIR (run on a failure before the cluster
# goes down: the pods' logs into DIR). KEEP=1 leaves the cluster up.
# Sets: START, E2E_WORK (the work directory, kept on a failure), KUBECONFIG.

KEEP=${KEEP:-0}
START=$(date +%s)
E2E_WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodedns-${E2E_NAME%% *}.XXXXXX")
# e2e_passed: set to 1 by e2e_go_test when the tests passed; only then is
# the machine compared with before (a failed run's cluster may be half down).
e2e_passed=0

log() { printf '[%s %3ds] %s\n' "$E2E_NAME" "$(($(date +%s) - START))" "$*" >&2; }
step() { printf '\n[%s %3ds] ===== %s\n' "$E2E_NAME" "$(($(date +%s) - START))" "$*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}
ok() { log "ok: $*"; }
k() { scripts/cluster.sh kubectl "$@"; }

# A command that fails outside a check (and so ends the run under set -e)
# is named: file, line, command, status, and the functions it ran in. A
# subshell's failure is named where this shell sees it.
set -E
e2e_on_err() {
	local i
	[[ $BASHPID == "$$" ]] || return 0
	log "FAIL: ${BASH_SOURCE[1]}:$2: $3 exited $1"
	for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
		log "  in ${FUNCNAME[i]}, called from ${BASH_SOURCE[i + 1]}:${BASH_LINENO[i]}"
	done
}
trap 'e2e_on_err $? "$LINENO" "$BASH_COMMAND"' ERR

# e2e_cleanup, on exit whatever ended the run: every step runs whatever the
# ones before it did (errexit off: under set -e one failed command would
# end the trap, leaving the cluster up, and the script with that command's
# status, in silence); a step that fails where it matters (the cluster not
# taken down, the machine not as before or not compared) is named and
# fails the run; the logs or the work directory not written or not removed
# is only reported.
# shellcheck disable=SC2317 # run by the EXIT trap
e2e_cleanup() {
	local rc=$? st
	set +e
	trap - ERR
	if [[ "$KEEP" != 1 ]]; then
		if [[ $rc != 0 ]]; then
			log "collecting logs into ${E2E_WORK}/logs before taking the cluster down"
			if mkdir -p "${E2E_WORK}/logs"; then
				if declare -F e2e_collect_logs >/dev/null; then
					e2e_collect_logs "${E2E_WORK}/logs"
				fi
				k get events -A --sort-by=.lastTimestamp >"${E2E_WORK}/logs/events.txt" 2>&1 ||
					log "cleanup: could not list the events (${E2E_WORK}/logs/events.txt says why)"
			else
				log "cleanup: could not make ${E2E_WORK}/logs"
			fi
		fi
		scripts/cluster.sh down
		st=$?
		if ((st != 0)); then
			log "FAIL: cleanup: scripts/cluster.sh down failed (exit ${st}; its output above)"
			rc=1
		fi
		if [[ $rc == 0 && $e2e_passed == 1 ]]; then
			step "scripts/cluster.sh down leaves nothing behind"
			if ! scripts/cluster.sh snapshot "${E2E_WORK}/after.txt"; then
				log "FAIL: cleanup: scripts/cluster.sh snapshot failed: the machine was not compared with before 'up'"
				rc=1
			elif ! diff -u "${E2E_WORK}/before.txt" "${E2E_WORK}/after.txt" >&2; then
				log "FAIL: the machine differs from before 'up' (diff above)"
				rc=1
			else
				ok "links, addresses, routes, netns, iptables (nft and legacy), nft tables, mounts, sysctls, paths, cgroups and processes as before"
			fi
		fi
	fi
	if [[ $rc == 0 ]]; then
		rm -rf "$E2E_WORK" || log "cleanup: could not remove ${E2E_WORK} (left behind)"
		log "PASS in $(($(date +%s) - START))s"
	else
		log "FAIL (exit ${rc}) after $(($(date +%s) - START))s; logs kept in ${E2E_WORK}"
	fi
	exit "$rc"
}
trap e2e_cleanup EXIT

# e2e_setup: root, the packages of E2E_DEPS, a clean machine (a cluster
# left up by an earlier run, KEEP=1 or killed, taken down first: else the
# "before" snapshot would describe a running cluster), its snapshot, and
# the cluster up (KUBECONFIG exported).
e2e_setup() {
	local missing=() p
	[[ $(id -u) == 0 ]] || fail "needs root"
	for p in $E2E_DEPS; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	fi
	if [[ -e "$(scripts/cluster.sh env | sed -n 's/^STATE=//p')" || -e /run/nodedns-cluster ]]; then
		log "a cluster from an earlier run is present; taking it down first"
		scripts/cluster.sh down
	fi
	scripts/cluster.sh snapshot "${E2E_WORK}/before.txt"
	step "cluster up"
	KUBECONFIG=$(scripts/cluster.sh up | tail -n 1)
	export KUBECONFIG
	ok "node Ready (${KUBECONFIG})"
}

# e2e_go_test TIMEOUT TESTS...: the Go tests named (e2e/, build tag e2e)
# run in that order with -failfast (the steps build on each other: the
# first failure ends the run); a failure names the failed tests, their
# messages being above, under their step.
e2e_go_test() {
	local timeout=$1 re
	shift
	re="^($(
		IFS='|'
		echo "$*"
	))\$"
	step "go test -tags e2e -run '${re}' ./e2e/"
	if ! go test -tags e2e -count=1 -v -failfast -timeout "$timeout" -run "$re" ./e2e/ 2>&1 | tee "${E2E_WORK}/go-test.log" >&2; then
		log "failed: $(grep -E -- '--- FAIL' "${E2E_WORK}/go-test.log" | sed 's/^ *//' | paste -sd ';' -)"
		fail "go test failed (the failing check's message above, under its step; the first failed step ends the run)"
	fi
	ok "$* passed"
	e2e_passed=1
}
