#!/usr/bin/env bash
# The static checks of scripts/test.sh, which nothing else in a run waits
# for: go vet with every build tag set the tree uses (none, integration,
# integration scale), staticcheck at a pinned version (installed with go
# install when missing), and a compile of the scale tests (build tag
# scale: scripts/k8s-scale.sh runs them, for minutes against a loaded API
# server; this keeps them building). Each check runs whatever the one
# before did; the exit status is non-zero when any failed, and the last
# line names them.
#
# Usage: scripts/checks.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STATICCHECK_VERSION=${STATICCHECK_VERSION:-v0.8.2}
export PATH="$(go env GOPATH)/bin:$PATH"
failed=()

# check NAME CMD...: CMD, timed; its failure noted.
check() {
  local name=$1 start rc=0
  shift
  echo "== $name"
  start=$(date +%s)
  "$@" || rc=$?
  echo "   $name: exit $rc, $(($(date +%s) - start))s"
  ((rc == 0)) || failed+=("$name")
}

staticcheck_pinned() {
  if ! staticcheck -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
    go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" || return
  fi
  staticcheck ./...
}

scale_compile() {
  local bin
  bin=$(mktemp /tmp/nodedns-scale.XXXXXX.test) || return
  go test -c -tags 'integration scale' -o "$bin" ./integration/
  local rc=$?
  rm -f "$bin"
  return "$rc"
}

check "go vet" go vet ./...
check "go vet -tags integration" go vet -tags integration ./integration/
check "go vet -tags 'integration scale'" go vet -tags 'integration scale' ./integration/
check "go vet -tags e2e" go vet -tags e2e ./e2e/...
check "staticcheck $STATICCHECK_VERSION" staticcheck_pinned
check "scale tests compile (go test -c -tags 'integration scale')" scale_compile

if ((${#failed[@]})); then
  echo "checks.sh: failed: ${failed[*]}"
  exit 1
fi
echo "checks.sh: go vet (4 tag sets), staticcheck and the scale tests' compile passed"
