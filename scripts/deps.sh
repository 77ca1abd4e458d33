#!/usr/bin/env bash
# Installs the Debian packages the tests, benchmarks and integration suite
# need, once: `apt-get update` runs only when something is missing.
# (iproute2: ip and ss -K; libcap2-bin: capsh, for the agent without NET_RAW;
# musl-tools: musl-gcc, for the static musl resolver clients of
# scripts/resolver-failover.sh and scripts/image.sh client; clang-19: the
# clang the Cilium of scripts/cilium-bin.sh compiles its BPF with, which
# that script installs itself too: here first, so that a full run's
# background build of Cilium runs no apt-get beside a foreground step's.)
set -euo pipefail

pkgs=(iptables etcd-server dnsutils dnsperf conntrack iproute2 libcap2-bin procps unbound dnsmasq-base curl ca-certificates prometheus musl-tools clang-19)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages (${missing[*]}) and not root to install them" >&2
    exit 1
  fi
  echo "deps.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# unbound's package enables a system service; the tests and benchmarks start
# their own instances on loopback and need nothing else on port 53.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet unbound 2>/dev/null; then
  systemctl stop unbound || true
fi
# Likewise prometheus (its promtool checks the alert rules; the scrape test
# runs its own server on a loopback port, with its own storage).
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl stop prometheus || true
fi
