#!/usr/bin/env bash
# Runs every fuzz target of nodedns for a set time each (default 20 s, as
# scripts/test.sh runs them):
#
#   scripts/fuzz.sh [SECONDS [REGEXP]]
#
# REGEXP (grep -E) picks the targets whose "./package Name" matches.
#
# The targets are found in the tree (every `func FuzzXxx(f *testing.F)` of a
# _test.go file), so a target that moves with its package, or a new one, is
# fuzzed without editing this list; the run fails when it finds fewer than
# NODEDNS_FUZZ_MIN_TARGETS (default 16, the count on main when this was written), so
# a target cannot silently drop out either. The targets are printed as they
# run: the request path through the server (FuzzServe), the decoders and
# parsers of wire data, API server lists, resolv.conf, hosts(5) lines and
# Corefiles, the cache's hit path, the upstream-reply validator, cluster
# record synthesis, name rewrites, DNS-name helpers.
#
# An input that makes a target fail is kept by go test in the package's
# testdata/fuzz/<Target>/ (the corpus): the script lists those files, prints
# them, and exits non-zero. Commit them: from then on they run as regression
# cases with every plain `go test`. New interesting inputs that pass stay in
# Go's fuzz cache ($GOCACHE/fuzz) and seed the next run.
#
# Exit status: 0 no failure; 1 findings (inputs kept, as above; targets
# that failed without one are named too); 3 no finding, but a target failed
# without keeping an input (it does not build, or a seed fails); 2 usage;
# 4 fewer targets than expected.
# The first run builds instrumented test binaries, which takes minutes for
# pkg/k8s (client-go); later runs reuse the build cache.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-20}
[[ $secs =~ ^[0-9]+$ ]] && ((secs > 0)) || {
  echo "usage: scripts/fuzz.sh [SECONDS [REGEXP]]" >&2
  exit 2
}
only=${2:-}
min_targets=${NODEDNS_FUZZ_MIN_TARGETS:-16}
[[ -z $only ]] || min_targets=1

# "./dir FuzzName" for every target, sorted by package so that the targets
# of one package reuse its instrumented build back to back.
mapfile -t targets < <(
  grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' cmd pkg internal 2>/dev/null |
    sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*|./\1 \2|' | sort -u |
    grep -E -- "${only:-.}"
)
echo "fuzz.sh: ${#targets[@]} targets, ${secs}s each"
if ((${#targets[@]} < min_targets)); then
  echo "fuzz.sh: found ${#targets[@]} fuzz targets, want at least ${min_targets} (NODEDNS_FUZZ_MIN_TARGETS):" >&2
  printf '  %s\n' "${targets[@]}" >&2
  exit 4
fi

# Corpus files present before the run: a finding is a file that was not.
corpus_before=$(find . -path '*/testdata/fuzz/*' -type f 2>/dev/null | sort)
# fuzz_one PKG NAME: go test's status, not its log, says whether the target
# failed; pipefail carries it through tail.
fuzz_one() { go test -run '^$' -fuzz "^${2}\$" -fuzztime "${secs}s" "$1" 2>&1 | tail -n 20; }
found=() broken=() retried=()
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "== $name ($pkg, ${secs}s)"
  start=$(date +%s)
  before=$(find "$pkg/testdata/fuzz/$name" -type f 2>/dev/null | sort || true)
  if ! fuzz_one "$pkg" "$name"; then
    if [[ $(find "$pkg/testdata/fuzz/$name" -type f 2>/dev/null | sort || true) != "$before" ]]; then
      found+=("$name ($pkg)")
    else
      # Failed without keeping an input. Go 1.26's fuzz coordinator can
      # report its own stop at the end of -fuzztime as a failure ("context
      # deadline exceeded", golang/go#75804, fixed in Go 1.27), above all
      # on a busy machine; a failing seed or a build error fails again.
      echo "   $name failed without keeping an input: run once more (the Go 1.26 fuzztime race, golang/go#75804, looks like this)"
      retried+=("$name")
      if ! fuzz_one "$pkg" "$name"; then
        if [[ $(find "$pkg/testdata/fuzz/$name" -type f 2>/dev/null | sort || true) != "$before" ]]; then
          found+=("$name ($pkg)")
        else
          broken+=("$name ($pkg)")
        fi
      fi
    fi
  fi
  echo "   $name: $(($(date +%s) - start))s"
done
((${#retried[@]} == 0)) || echo "fuzz.sh: run twice after a failure that kept no input: ${retried[*]}"
new=$(comm -13 <(echo "$corpus_before") <(find . -path '*/testdata/fuzz/*' -type f 2>/dev/null | sort) | sed '/^$/d')
if [[ -n $new ]]; then
  echo "fuzz.sh: inputs that failed, kept in the corpus (commit them: they become regression cases):" >&2
  while IFS= read -r f; do
    echo "--- $f" >&2
    head -c 2000 "$f" >&2
    echo >&2
  done <<<"$new"
fi
if ((${#broken[@]})); then
  echo "fuzz.sh: failed twice without keeping an input (a build error or a failing seed: go test's last lines above): ${broken[*]}" >&2
fi
if ((${#found[@]})); then
  echo "fuzz.sh: findings in ${found[*]}" >&2
  exit 1
fi
((${#broken[@]} == 0)) || exit 3
if [[ -n $new ]]; then
  echo "fuzz.sh: new corpus files although every target passed" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets fuzzed ${secs}s each, no findings"
