#!/usr/bin/env bash
# Checks what can be checked of the Dockerfile without a Docker engine:
# 1. the binary it builds (same flags) is static;
# 2. every iptables program the agent runs exists in the Debian 12 iptables
#    package the image installs (this machine runs Debian 12 too: the
#    package's file list is the image's).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/nodedns" ./cmd/nodedns
if file "$out/nodedns" 2>/dev/null | grep -q "dynamically linked" || ldd "$out/nodedns" >/dev/null 2>&1; then
  echo "check-image: nodedns is not static" >&2; exit 1
fi
echo "static binary: ok ($(du -h "$out/nodedns" | cut -f1))"
grep -q 'bookworm' Dockerfile || { echo "check-image: Dockerfile base is not bookworm" >&2; exit 1; }
missing=0
files=$(dpkg -L iptables)
for b in iptables-nft iptables-nft-save ip6tables-nft ip6tables-nft-save \
         iptables-legacy iptables-legacy-save ip6tables-legacy ip6tables-legacy-save; do
  if grep -qx "/usr/sbin/$b" <<<"$files"; then echo "/usr/sbin/$b: in package iptables"; else echo "/usr/sbin/$b: MISSING" >&2; missing=1; fi
done
# Plain iptables/ip6tables are alternatives the package's postinst creates.
postinst=$(dpkg-query --control-show iptables postinst)
for b in iptables ip6tables; do
  if grep -q "\-\-install /usr/sbin/$b $b " <<<"$postinst"; then echo "/usr/sbin/$b: alternative set up by the package's postinst"; else echo "/usr/sbin/$b: MISSING" >&2; missing=1; fi
done
exit $missing
