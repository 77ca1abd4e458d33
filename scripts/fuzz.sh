#!/usr/bin/env bash
# Runs every fuzz target of nodedns for a set time each (default 30 s):
#
#   scripts/fuzz.sh [SECONDS]
#
# Targets: the request path through the server (FuzzServe), the request
# decoder (FuzzParseQuery), the cache's hit path (FuzzAppendHit), the
# upstream-reply validator (FuzzValidate), cluster record synthesis
# (FuzzLookup), the resolv.conf reader (FuzzParse), the API server's list
# responses as the agent streams them (FuzzListStream), decodes their
# items (FuzzDecode, against the API types) and parses addresses
# (FuzzParseAddr, against net/netip), the hosts(5) line parser
# (FuzzParseLine), name rewrites and their revert (FuzzRewrite), the
# wire-form address rotation (FuzzRotateAddrs) and the Corefile parser with
# `nodedns migrate`'s mapping (FuzzParse). New interesting inputs stay in
# Go's fuzz cache; a failing input is written to the package's
# testdata/fuzz/<Target>/ by go test: commit it, and it runs as a
# regression test with every plain `go test`.
# The first run builds instrumented test binaries, which takes minutes for
# pkg/cluster/k8s (client-go); later runs reuse the build cache.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-30}
targets=(
  "./pkg/query/server FuzzServe"
  "./pkg/query/dnswire FuzzParseQuery"
  "./pkg/query/cache FuzzAppendHit"
  "./pkg/query/upstream FuzzValidate"
  "./pkg/cluster/k8s FuzzLookup"
  "./pkg/node/resolvconf FuzzParse"
  "./pkg/cluster/k8s FuzzListStream"
  "./pkg/cluster/k8s FuzzDecode"
  "./pkg/cluster/k8s FuzzParseAddr"
  "./pkg/query/hosts FuzzParseLine"
  "./pkg/query/rewrite FuzzRewrite"
  "./pkg/query/dnswire FuzzRotateAddrs"
  "./internal/migrate FuzzParse"
)
failed=()
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "== $name ($pkg, ${secs}s)"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" "$pkg" 2>&1 | tail -n 20; then
    failed+=("$name")
  fi
  # pipefail carries go test's status through tail.
done
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in ${failed[*]}: see testdata/fuzz/ of those packages" >&2
  exit 1
fi
echo "fuzz.sh: no findings"
