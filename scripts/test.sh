#!/usr/bin/env bash
# Runs every test of nodedns on a fresh Debian machine with Go, as root:
# installs the Debian packages it needs, builds (and caches) kube-apiserver
# and CoreDNS, then runs go vet (the scale tests' build tags included),
# staticcheck, the unit tests with -race, promtool on the alert rules
# (scripts/check-rules.sh), a compile of the scale tests, every fuzz target
# for a bounded time (scripts/fuzz.sh), the integration suite (real
# kube-apiserver + etcd on loopback, network namespaces, iptables nft and
# legacy, real resolvers, CoreDNS as the reference for the cluster zone; the
# Helm chart rendered by a pinned helm and applied to the API server), one
# short round of the pod benchmark workloads with CoreDNS and the node-cache
# arrangement, and on a real single-node cluster the end-to-end test in
# both kube-proxy modes (scripts/e2e.sh: the DaemonSet, kubelet, kube-proxy
# in iptables and then nftables mode, containerd, rolling updates under
# load), the Helm chart's (scripts/chart-e2e.sh: install, upgrade,
# uninstall hooks) and the pod-network mode's on a real Cilium
# (scripts/cilium-e2e.sh: cilium-agent with kube-proxy replacement, the
# chart's CiliumLocalRedirectPolicy objects, a NetworkPolicy Cilium
# enforces).
#
#   scripts/test.sh               everything
#   scripts/test.sh unit          vet, staticcheck, scale build, unit tests
#   scripts/test.sh fuzz          every fuzz target, NODEDNS_FUZZ_SECONDS each
#   scripts/test.sh integration   the integration suite and the bench round
#   scripts/test.sh e2e           e2e.sh in both kube-proxy modes, chart-e2e.sh,
#                                 cilium-e2e.sh
#
# A full run overlaps what computes with what waits. kube-apiserver and
# CoreDNS (a fresh machine's longest builds) are built in the background
# beside the unit tests, and waited for before the integration suite.
# Beside the integration suite and the end-to-end tests, which mostly wait
# on servers and clusters, the background then builds the other Kubernetes
# components (waited for before the e2e), runs the static checks
# (scripts/checks.sh: go vet, staticcheck, the scale tests' compile) and
# fuzzes, one after the other; beside those two, once the Kubernetes
# components are built, it builds Cilium (scripts/cilium-bin.sh: the
# longest build of a fresh machine, waited for before the Cilium e2e, the
# last e2e step). Background jobs run at nice 19, their
# autogroup too, so the steps in the foreground keep the CPU they ask for;
# their logs are printed when they are waited for, their failures fail the
# run at its end, and a run that ends early stops them.
#
# A missing prerequisite is a failure whatever the environment says (no
# test reads CI): a test that lacks root, a program or a kernel feature
# fails, and every `go test` stream goes through internal/tools/testsum,
# which fails the run on any skipped test that is not on the allow-list
# below. The
# script ends with the tests passed, failed and skipped (and why), and with
# the time of each phase.
#
# The exit status is non-zero when any step fails (each step's own status,
# not a search of its log). A failure is named where it happens and again
# at the end: a command that fails under set -e prints its file, line,
# command, status and the functions it ran in; each step's output (stdout
# and stderr, still printed as before) is kept in $out/step-NN-NAME.log;
# and the run ends with each failed step (a background job's too), its
# exit status and the last 20 lines of its log, then "== FAILED (exit N):"
# with the steps named. On a machine shared by several engineers,
# NODEDNS_HOST_LOCK=/tmp/nodedns-host.lock runs each step that changes the
# host (integration, the bench round, each e2e) under that flock(1) lock,
# and only those, one at a time: the lock is taken and released per step.
#
# Env: NODEDNS_CACHE (built binaries, default /var/cache/nodedns),
#      NODEDNS_FUZZ_SECONDS (per fuzz target, default 20),
#      NODEDNS_TEST_OUT (where the go test streams and logs are kept,
#      default a new /tmp/nodedns-test.XXXXXX).
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
case $what in all | unit | fuzz | integration | e2e) ;; *)
  echo "usage: scripts/test.sh [all|unit|fuzz|integration|e2e]" >&2
  exit 2
  ;;
esac
export NODEDNS_CACHE=${NODEDNS_CACHE:-/var/cache/nodedns}
export PATH="$(go env GOPATH)/bin:$PATH"
FUZZ_SECONDS=${NODEDNS_FUZZ_SECONDS:-20}
out=${NODEDNS_TEST_OUT:-$(mktemp -d /tmp/nodedns-test.XXXXXX)}
mkdir -p "$out"

# The skips allowed: PKG:TEST=WHY (internal/tools/testsum -allow). Every
# other skip fails the run.
ALLOW_SKIPS=(
  "integration:TestSoak=the soak is opt-in (NODEDNS_SOAK=DURATION, scripts/soak.sh); it runs for hours"
)

# step TITLE: a phase header with the time since the start, so a CI log
# says where the time went; the phases and their times are printed again at
# the end. The step's output goes on to the console as before and is also
# kept in its own log, $out/step-NN-NAME.log (tee, one for stdout and one
# for stderr, ignoring INT and TERM so that the end of an interrupted run
# is still printed), for the summary of a failed run.
T0=$(date +%s)
phases=()
phase_name="" phase_t=$T0 phase_log="" phase_n=0 phase_failed=0 err_where=""
exec {console_out}>&1 {console_err}>&2
tee_pids=()
# log_close: the console back on stdout and stderr, and the tees given up
# to 10 s to copy what they hold (a process the step left running may hold
# their pipe: its output goes on being copied, and the run goes on).
log_close() {
  exec 1>&"$console_out" 2>&"$console_err"
  local i p up
  for ((i = 0; i < 100; i++)); do
    up=0
    for p in "${tee_pids[@]}"; do if kill -0 "$p" 2>/dev/null; then up=1; fi; done
    ((up)) || break
    sleep 0.1
  done
  tee_pids=()
}
phase_next() {
  local now
  now=$(date +%s)
  [[ -z $phase_name ]] || phases+=("$(printf '%6ds  %s' $((now - phase_t)) "$phase_name")")
  phase_name=$* phase_t=$now phase_failed=0 err_where=""
  echo "== [+$((now - T0))s] $*"
}
step() {
  log_close
  phase_n=$((phase_n + 1))
  local slug
  slug=$(tr -cs '[:alnum:]' '-' <<<"$*" | tr '[:upper:]' '[:lower:]' | cut -c 1-40)
  phase_log=$(printf '%s/step-%02d-%s.log' "$out" "$phase_n" "${slug%-}")
  : >"$phase_log"
  exec > >(trap '' INT TERM; exec tee -a "$phase_log" >&"$console_out")
  tee_pids+=($!)
  exec 2> >(trap '' INT TERM; exec tee -a "$phase_log" >&"$console_err")
  tee_pids+=($!)
  phase_next "$@"
}

# The failures, for the end: NAME, exit status, log, where (the failing
# command, when the ERR trap saw it).
fail_name=() fail_rc=() fail_log=() fail_where=()
failed() {
  fail_name+=("$1") fail_rc+=("$2") fail_log+=("$3") fail_where+=("${4:-}")
  phase_failed=1
}
# A command that fails outside a checked context (which ends the run under
# set -e) is named at once: file, line, command, status, and the functions
# it ran in with the lines they were called from. A subshell's failure is
# named where this shell sees it (the command that ran the subshell).
set -E
on_err() {
  local rc=$1 line=$2 cmd=$3 i src
  [[ $BASHPID == "$$" ]] || return 0
  {
    echo "test.sh: ${BASH_SOURCE[1]}:$line: $cmd exited $rc"
    # The line itself: when a function failed, the command above is the
    # last one it ran.
    src=$(sed -n "${line}{s/^[[:space:]]*//;p;q}" "${BASH_SOURCE[1]}" 2>/dev/null)
    [[ -z $src || $src == "$cmd" ]] || echo "test.sh:   line $line: $src"
    err_where="${BASH_SOURCE[1]}:$line: ${src:-$cmd} exited $rc"
    for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
      src=$(sed -n "${BASH_LINENO[i]}{s/^[[:space:]]*//;p;q}" "${BASH_SOURCE[i + 1]}" 2>/dev/null)
      echo "test.sh:   in ${FUNCNAME[i]}, called from ${BASH_SOURCE[i + 1]}:${BASH_LINENO[i]}: $src"
    done
    # For the summary: where the step's own line called what failed.
    ((i == 1)) || err_where+=", in ${FUNCNAME[i - 1]} called from ${BASH_SOURCE[i]}:${BASH_LINENO[i - 1]}: $src"
  } >&2
}
trap 'on_err $? "$LINENO" "$BASH_COMMAND"' ERR

# locked CMD...: CMD (a command or a function of this script) under the
# host lock when NODEDNS_HOST_LOCK names one, released as soon as CMD ends.
locked() {
  if [[ -z ${NODEDNS_HOST_LOCK:-} ]]; then
    "$@"
    return
  fi
  local fd rc=0
  exec {fd}>>"$NODEDNS_HOST_LOCK"
  flock "$fd"
  "$@" || rc=$?
  flock -u "$fd"
  exec {fd}>&-
  return "$rc"
}

# Background jobs (a full run's builds and fuzzing): bg_start NAME CMD...
# runs CMD at the lowest CPU priority (nice 19: it takes what the steps in
# the foreground leave idle) in a process group of its own, its output in
# $out/NAME.log; bg_wait NAME waits for it, prints its log and returns its
# status, and adds its time to the phases. finish stops whatever still
# runs, the group's children included, when the run ends early.
declare -A bg_pid=() bg_t0=()
bg_start() {
  local name=$1
  shift
  echo "== [+$(($(date +%s) - T0))s] background: $name ($*), output in $out/$name.log"
  # A session of its own is also a scheduler autogroup of its own (Linux
  # with sched_autogroup_enabled), whose weight is its own setting, not
  # its tasks' nice: the autogroup is set to 19 too, from inside it, or
  # the background would take half of the CPU.
  # shellcheck disable=SC2016 # expanded by the inner bash
  # The job writes when it ended to $out/NAME.end.
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid --wait bash -c 'if [[ -w /proc/self/autogroup ]]; then echo 19 >/proc/self/autogroup; fi
    nice -n 19 "${@:2}"; rc=$?; date +%s >"$1"; exit "$rc"' \
    "bg-$name" "$out/$name.end" "$@" >"$out/$name.log" 2>&1 </dev/null &
  bg_pid[$name]=$! bg_t0[$name]=$(date +%s)
}
bg_running() { [[ -n ${bg_pid[$1]:-} ]]; }
bg_wait() {
  local name=$1 rc=0 t0=${bg_t0[$1]}
  wait "${bg_pid[$name]}" || rc=$?
  unset "bg_pid[$name]"
  local end
  end=$(cat "$out/$name.end" 2>/dev/null || date +%s)
  phases+=("$(printf '%6ds  background: %s (from +%ds to +%ds, exit %d)' $((end - t0)) "$name" $((t0 - T0)) $((end - T0)) "$rc")")
  echo "-- $name (background, exit $rc): $out/$name.log"
  if [[ $name == fuzz || $name == checks ]]; then
    cat "$out/$name.log"
  else
    tail -n 30 "$out/$name.log"
  fi
  ((rc == 0)) || failed "background: $name" "$rc" "$out/$name.log"
  return "$rc"
}
# bg_stop: the background jobs still running, stopped (group and all);
# each is listed with the failures, stopped unfinished, unless it had
# ended (its .end file) with status 0.
bg_stop() {
  local name pid ended rc
  for name in "${!bg_pid[@]}"; do
    pid=${bg_pid[$name]} ended=0 rc=0
    [[ -e $out/$name.end ]] && ended=1
    echo "== stopping the background job $name (process group $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || rc=$?
    unset "bg_pid[$name]"
    if ((!ended)); then
      failed "background: $name" "stopped unfinished, the run ended early" "$out/$name.log"
    elif ((rc != 0)); then
      failed "background: $name" "$rc" "$out/$name.log"
    fi
  done
}

testsum_bin="$out/testsum"
allow_args=()
for a in "${ALLOW_SKIPS[@]}"; do allow_args+=(-allow "$a"); done

# gotest LABEL [-show REGEXP] -- GO-TEST-ARGS...: go test -json through
# testsum, which prints progress, keeps the stream in $out/LABEL.json and
# the text in $out/LABEL.log, and fails on a failed, unfinished or
# disallowed skipped test. The step fails when go test or testsum does.
gotest() {
  local label=$1 show=()
  shift
  if [[ $1 == -show ]]; then show=(-show "$2"); shift 2; fi
  [[ $1 == -- ]] && shift
  local rc=0
  go test -json "$@" 2>&1 | "$testsum_bin" -label "$label" -json "$out/$label.json" -log "$out/$label.log" \
    "${show[@]}" "${allow_args[@]}" || rc=$?
  if ((rc != 0)); then
    echo "$label: go test or its skip check failed (exit $rc); full output: $out/$label.log"
  fi
  return "$rc"
}

# The end, passed or not: what every go test stream ran, skipped and why,
# the phases with their times, and what failed: each failed step with its
# status, where it failed and the last lines of its log. Errexit is off:
# one failed command here must not cut the summary short or replace the
# run's status with its own.
finish() {
  local rc=$? i
  set +e
  trap - ERR
  log_close
  # The step the run ended in, unless its failure is listed already: by
  # the step itself, or a background job's that made it exit (its failing
  # command, or the signal that stopped the run, is listed whatever).
  if ((rc != 0 && !phase_failed)) && [[ -n $phase_name ]] && [[ -n $err_where || ${#fail_name[@]} == 0 ]]; then
    failed "step: $phase_name" "$rc" "$phase_log" "$err_where"
  fi
  if ((${#bg_pid[@]})); then
    bg_stop
    rc=$((rc ? rc : 1))
  fi
  phase_next "end"
  local streams=("$out"/*.json)
  if [[ -e ${streams[0]} && -x $testsum_bin ]]; then
    echo "== tests, all steps (streams and logs in $out):"
    "$testsum_bin" "${allow_args[@]}" "${streams[@]}" >"$out/tests-all.log"
    i=$?
    cat "$out/tests-all.log"
    # A failure of its own only when no step failed: a failed test failed
    # its step already.
    if ((i != 0 && rc == 0)); then
      failed "tests, all steps (testsum over every go test stream)" "$i" "$out/tests-all.log"
      rc=1
    fi
  fi
  echo "== phases (seconds):"
  printf '%s\n' "${phases[@]}"
  printf '%6ds  total\n' $(($(date +%s) - T0))
  if ((rc == 0)); then
    echo "== all passed"
    exit 0
  fi
  local list="" st
  echo "== failed (logs in $out):"
  for i in "${!fail_name[@]}"; do
    st=${fail_rc[i]}
    [[ $st == *[!0-9]* ]] || st="exit $st"
    echo "-- ${fail_name[i]}: $st${fail_where[i]:+; ${fail_where[i]}}; log ${fail_log[i]:-none}, its last 20 lines:"
    if [[ -s ${fail_log[i]:-} ]]; then
      tail -n 20 "${fail_log[i]}" | sed 's/^/   | /'
    else
      echo "   (empty)"
    fi
    list+="${list:+; }${fail_name[i]} ($st)"
  done
  echo "== FAILED (exit $rc): ${list:-no step recorded a failure}"
  exit "$rc"
}
trap finish EXIT
# Stopped by a signal, the run must not end "all passed".
trap 'err_where="stopped by SIGINT"; exit 130' INT
trap 'err_where="stopped by SIGTERM"; exit 143' TERM

step "Debian packages (scripts/deps.sh)"
scripts/deps.sh
go build -o "$testsum_bin" ./internal/tools/testsum

# In a full run, what the integration suite needs and takes minutes to
# build on a fresh machine (kube-apiserver, CoreDNS; cached by version,
# nothing to do after) is built in the background from here, taking the
# CPU the unit tests leave, and waited for before the suite.
if [[ $what == all ]]; then
  bg_start builds bash -c 'scripts/kube-apiserver.sh >/dev/null && scripts/coredns.sh >/dev/null'
fi

# helm at a pinned version (built with go install, cached): the chart's lint,
# its rendering into deploy/daemonset.yaml and the chart tests (unit: deploy/;
# integration: the rendering applied to a real API server).
step "helm (cached in $NODEDNS_CACHE)"
NODEDNS_HELM=$(scripts/helm.sh | tail -n 1)
export NODEDNS_HELM

if [[ $what == all || $what == unit ]]; then
  # go vet, staticcheck and the scale tests' compile (scripts/checks.sh):
  # nothing waits for them, so a full run has them in the background
  # beside the integration suite (below).
  if [[ $what == unit ]]; then
    step "go vet (tags: none, integration, integration scale), staticcheck, scale tests compile (scripts/checks.sh)"
    scripts/checks.sh
  fi
  step "deploy/daemonset.yaml is the chart's default rendering"
  scripts/render-manifest.sh --check
  step "unit tests (-race)"
  gotest unit -- -race -count=1 ./...
  step "alert rules (promtool check rules, promtool test rules)"
  scripts/check-rules.sh
fi

# A fuzz failure fails the run at its end, not at once: the steps after it
# test other things, and their results (and the run's time) are wanted too.
# In a full run the fuzzing runs in the background (bg_start below) beside
# the integration suite and the end-to-end tests, which wait on servers and
# clusters far more than they compute.
fuzz_rc=0
if [[ $what == fuzz ]]; then
  step "fuzz: every target ${FUZZ_SECONDS}s (scripts/fuzz.sh)"
  scripts/fuzz.sh "$FUZZ_SECONDS" || { fuzz_rc=$?; failed "step: $phase_name" "$fuzz_rc" "$phase_log"; }
fi

if [[ $what == all || $what == integration ]]; then
  if bg_running builds; then
    step "wait for the background builds (Kubernetes, CoreDNS)"
    bg_wait builds || exit 1
  fi
  # From here the host waits on servers and clusters more than it
  # computes: the background builds the other Kubernetes components (the
  # e2e's), then runs the static checks, then fuzzes, one after the other
  # so that what the e2e needs comes first.
  if [[ $what == all ]]; then
    bg_start k8s scripts/kube-bin.sh
    # shellcheck disable=SC2016 # expanded by the inner bash
    bg_start checks bash -c 'tail --pid="$1" -f /dev/null && exec scripts/checks.sh' _ "${bg_pid[k8s]}"
    # shellcheck disable=SC2016 # expanded by the inner bash
    bg_start fuzz bash -c 'tail --pid="$1" -f /dev/null && exec scripts/fuzz.sh "$2"' _ "${bg_pid[checks]}" "$FUZZ_SECONDS"
    # Cilium (cilium-agent, its CNI plugin and CLI from the Go module, and
    # the Debian clang it compiles its BPF with): cold, half an hour of
    # CPU, so it starts here, after the Kubernetes components (the first
    # e2e's, which share much of its build cache), beside the checks and
    # the fuzzing, and is waited for only before the Cilium e2e.
    # shellcheck disable=SC2016 # expanded by the inner bash
    bg_start cilium bash -c 'tail --pid="$1" -f /dev/null && exec scripts/cilium-bin.sh' _ "${bg_pid[k8s]}"
  fi
  step "kube-apiserver (cached in $NODEDNS_CACHE)"
  NODEDNS_KUBE_APISERVER=$(scripts/kube-apiserver.sh | tail -n 1)
  export NODEDNS_KUBE_APISERVER
  step "CoreDNS (cached in $NODEDNS_CACHE), the reference of the differential tests"
  NODEDNS_COREDNS=$(scripts/coredns.sh | tail -n 1)
  export NODEDNS_COREDNS
  step "Prometheus Operator CRDs (Go module cache), for the chart's monitoring objects"
  NODEDNS_PROMETHEUS_CRDS=$(scripts/prometheus-crds.sh | tail -n 1)
  export NODEDNS_PROMETHEUS_CRDS
  step "Multi-Cluster Services CRDs (Go module cache), for ServiceImports in the differential tests"
  NODEDNS_MCS_CRDS=$(scripts/mcs-crds.sh | tail -n 1)
  export NODEDNS_MCS_CRDS
  step "integration tests"
  # Progress: each test's start and result, and its t.Log lines (the
  # figures the suite reports).
  locked gotest integration -show '^(=== RUN|\s+\S+_test\.go:[0-9]+:)' -- -tags integration -count=1 -timeout 40m ./integration/

  # A short run of the pod workloads: the benchmark builds its pod (a
  # registered Pod's network namespace), every server answers what the pod
  # sends (CoreDNS and the node-cache arrangement included: -c fails the
  # run when they do not answer), no query is lost at the fixed rate and no
  # glibc lookup fails (-z; the unthrottled runs' losses are reported), and
  # the script cleans up; the figures of so short a run mean nothing and
  # are not kept, so the tree may be dirty (-D: a test run is not a
  # measurement, and a fuzz finding above leaves a corpus file behind).
  step "scripts/bench.sh pod workloads, one short round (with CoreDNS and node-cache, no loss)"
  # Its table is printed failed or not (a failure after the measurements,
  # its cleanup's, is read against them).
  bench_rc=0
  locked scripts/bench.sh -c -z -D -w 'pod pod-shortcut pod-hit' -l 1 -r 1 -n 100 -Q 2000 -T 2 >"$out/bench.txt" || bench_rc=$?
  tail -n 40 "$out/bench.txt"
  if ((bench_rc != 0)); then
    echo "scripts/bench.sh failed (exit $bench_rc): its reason is in its stderr above; its stdout in $out/bench.txt" >&2
    failed "step: $phase_name" "$bench_rc" "$phase_log" "scripts/bench.sh exited $bench_rc"
    exit "$bench_rc"
  fi
fi

if [[ $what == all || $what == e2e ]]; then
  if bg_running k8s; then
    step "wait for the background build of the other Kubernetes components"
    bg_wait k8s || exit 1
  fi
  for mode in iptables nftables; do
    step "end-to-end on a real single-node cluster, kube-proxy in $mode mode (scripts/e2e.sh)"
    locked env KUBE_PROXY_MODE="$mode" scripts/e2e.sh
  done
  step "the Helm chart on a real single-node cluster (scripts/chart-e2e.sh)"
  locked scripts/chart-e2e.sh
  # The pod-network mode on a real Cilium (scripts/cluster.sh's
  # CLUSTER_CNI=cilium). Alone (scripts/test.sh e2e) the cluster's Cilium
  # mode builds Cilium itself when the cache lacks it (scripts/cilium-bin.sh,
  # under its own lock), outside the host lock only if built first: so it
  # is built here first either way.
  if bg_running cilium; then
    step "wait for the background build of Cilium (scripts/cilium-bin.sh)"
    bg_wait cilium || exit 1
  else
    step "Cilium (cached in $NODEDNS_CACHE)"
    scripts/cilium-bin.sh >/dev/null
  fi
  step "the pod-network mode behind Cilium's Local Redirect Policy on a real single-node cluster (scripts/cilium-e2e.sh)"
  locked scripts/cilium-e2e.sh
fi

checks_rc=0
if bg_running checks; then
  step "wait for the background static checks (scripts/checks.sh)"
  bg_wait checks || checks_rc=$?
fi
if bg_running fuzz; then
  step "wait for the background fuzzing (scripts/fuzz.sh)"
  bg_wait fuzz || fuzz_rc=$?
fi
if ((checks_rc != 0)); then
  echo "static checks: scripts/checks.sh failed (exit $checks_rc; its output above names the check)"
  ((fuzz_rc == 0)) || echo "fuzz: scripts/fuzz.sh failed too (exit $fuzz_rc; its output above)"
  exit 1
fi

# scripts/fuzz.sh's status says what failed (its header).
case $fuzz_rc in
  0) ;;
  1)
    echo "fuzz: findings: inputs that make a target fail, kept in the packages' testdata/fuzz/ (scripts/fuzz.sh above lists and prints them)"
    exit 1
    ;;
  3)
    echo "fuzz: no finding, but a target failed without keeping an input: it did not build, or its seed corpus fails (scripts/fuzz.sh above names it, with the last lines of go test)"
    exit 1
    ;;
  *)
    echo "fuzz: scripts/fuzz.sh failed (exit $fuzz_rc) before fuzzing: fewer targets than expected, or a usage error (its output above)"
    exit 1
    ;;
esac
