#!/usr/bin/env bash
# Measures what glibc's and musl's stub resolvers do when a pod's first
# nameserver fails and a second one answers: how long getaddrinfo() takes,
# whether it succeeds, which server answered and how many queries each one
# got. It decides whether listing a second nameserver (the central kube-dns,
# say) after the node-local agent's 169.254.20.10 helps when the agent dies,
# hangs or crash-loops.
#
#   sudo scripts/resolver-failover.sh > table.md
#
# Two network namespaces joined by a veth, link-local addresses only:
#   client rsv-cli-PID  169.254.201.1/24, its resolv.conf from
#                       /etc/netns/rsv-cli-PID/resolv.conf (ip netns exec
#                       binds it over /etc/resolv.conf): kubelet's search list
#                       (default.svc.cluster.local svc.cluster.local
#                       cluster.local), options ndots:5 and the variant's
#                       options, then `nameserver A` (+ `nameserver B`)
#   server rsv-srv-PID  A 169.254.201.53 and B 169.254.201.54; B always
#                       answers (internal/tools/resolvstub), A is in one of
#                       these states:
#     a     no socket on A:53: the kernel answers ICMP port unreachable, with
#           the ICMP rate limit off (net.ipv4.icmp_ratelimit=0: every query
#           gets its ICMP, the best case of a dead agent)
#     a+rl  the same with the kernel's default ICMP rate limit (1 per second
#           per client after a burst of 6); the token bucket is refilled
#           (7 s idle) before each cell and the lookups then run back to
#           back, as a busy pod's would
#     b     A's packets dropped (iptables DROP in the server namespace): what
#           a hung agent that still holds its socket looks like to a client
#     c     SERVFAIL to everything   d  REFUSED to everything
#     e     answers like B (baseline)
#
# Clients: scripts/gai.c (`gai once NAME`), one getaddrinfo(AF_UNSPEC,
# SOCK_STREAM) per process, built with gcc (glibc) and with musl-gcc -static (musl). Names:
# ext.example.net (2 dots < ndots:5, so the search list is walked first: 3
# NXDOMAIN steps, then the name as is) and ext.example.net. (fully
# qualified, one step). Answers carry the answering server's own address,
# so "answered by" is read from the result.
#
# Sections: "two" (nameserver A + B; options none, `timeout:1 attempts:2`,
# `rotate`), "one" (nameserver A only, states a, a+rl, b: how long until
# failure), "tcp" (A in states e and a: tc.example.net, whose UDP answer is
# truncated so the client retries over TCP, and `options use-vc`).
#
# Prints a markdown table per section on stdout; progress on stderr.
# Env: REPS (lookups per cell, default 5, 1-50); SECTIONS (default
#      "two one tcp"); STATES (default "e a a+rl b c d"; filters every
#      section); RESOLVERS (default "glibc musl"); RAW=FILE copies every
#      lookup's line there.
# Needs root, ip, iptables, gcc, musl-gcc (scripts/deps.sh installs
# musl-tools), go. Removes everything it made on exit, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-5}
SECTIONS=${SECTIONS:-two one tcp}
STATES=${STATES:-e a a+rl b c d}
RESOLVERS=${RESOLVERS:-glibc musl}
RAW=${RAW:-}
# A lookup that takes longer than this is killed and counted as a failure.
LOOKUP_LIMIT=120

log() { printf 'resolver-failover.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ "$REPS" =~ ^[0-9]+$ ]] && ((REPS >= 1 && REPS <= 50)) || die "REPS=$REPS: want 1-50"
[[ "$(id -u)" == 0 ]] || die "needs root (network namespaces, iptables)"
for c in ip iptables gcc musl-gcc go timeout; do
	command -v "$c" >/dev/null || die "$c missing (scripts/deps.sh installs the packages)"
done

CLI="rsv-cli-$$"
SRV="rsv-srv-$$"
VC="rsvc$$"
VS="rsvs$$"
CLIENT_IP=169.254.201.1
A=169.254.201.53
B=169.254.201.54
SEARCH="default.svc.cluster.local svc.cluster.local cluster.local"

work=$(mktemp -d "${TMPDIR:-/tmp}/rsv-failover.XXXXXX")
made_netns_dir=false
stub_a="" stub_b="" client=""

cleanup() {
	local rc=$? p
	set +e
	trap - EXIT INT TERM
	for p in "$client" "$stub_a" "$stub_b"; do
		[[ -n "$p" ]] || continue
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	ip netns pids "$CLI" 2>/dev/null | xargs -r kill 2>/dev/null
	ip netns pids "$SRV" 2>/dev/null | xargs -r kill 2>/dev/null
	for p in "$CLI" "$SRV"; do
		[[ -e "/run/netns/$p" ]] && { ip netns del "$p" || log "could not delete netns $p"; }
	done
	rm -rf "/etc/netns/$CLI" "$work"
	$made_netns_dir && rmdir --ignore-fail-on-non-empty /etc/netns
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "building the clients and resolvstub in $work"
gcc -O2 -Wall -pthread -o "$work/gai-glibc" scripts/gai.c
musl-gcc -static -O2 -Wall -pthread -o "$work/gai-musl" scripts/gai.c
go build -o "$work/resolvstub" ./internal/tools/resolvstub

log "network namespaces $CLI and $SRV"
ip netns add "$CLI"
ip netns add "$SRV"
ip -n "$CLI" link add "$VC" type veth peer name "$VS" netns "$SRV"
ip -n "$CLI" addr add "$CLIENT_IP/24" dev "$VC"
ip -n "$SRV" addr add "$A/24" dev "$VS"
ip -n "$SRV" addr add "$B/24" dev "$VS"
for ns in "$CLI" "$SRV"; do ip -n "$ns" link set lo up; done
ip -n "$CLI" link set "$VC" up
ip -n "$SRV" link set "$VS" up

[[ -d /etc/netns ]] || { mkdir /etc/netns; made_netns_dir=true; }
mkdir "/etc/netns/$CLI"
printf '127.0.0.1 localhost\n::1 localhost\n' >"/etc/netns/$CLI/hosts"
printf 'hosts: files dns\n' >"/etc/netns/$CLI/nsswitch.conf"

# Queries counted where they arrive: rules 1-4 of the server's INPUT chain
# count UDP queries and TCP connections (SYN) to A and B; state b appends
# the DROP rules after them.
srv() { ip netns exec "$SRV" "$@"; }
srv iptables -w -A INPUT -d "$A" -p udp --dport 53
srv iptables -w -A INPUT -d "$B" -p udp --dport 53
srv iptables -w -A INPUT -d "$A" -p tcp --dport 53 --syn
srv iptables -w -A INPUT -d "$B" -p tcp --dport 53 --syn

start_stub() { # VAR ADDR=BEHAVIOUR
	local var=$1 out="$work/stub-$RANDOM.out" i pid
	ip netns exec "$SRV" "$work/resolvstub" -serve "$2" -log "$work/queries.log" -for 3h >"$out" 2>&1 &
	pid=$!
	printf -v "$var" '%s' "$pid"
	for ((i = 0; i < 50; i++)); do
		grep -q '^ready$' "$out" && return 0
		kill -0 "$pid" 2>/dev/null || die "resolvstub $2 exited: $(cat "$out")"
		sleep 0.1
	done
	die "resolvstub $2 not ready after 5 s: $(cat "$out")"
}

stop_stub_a() {
	[[ -n "$stub_a" ]] || return 0
	kill "$stub_a"
	wait "$stub_a" || true # killed by us: its status is SIGTERM's
	stub_a=""
}

start_stub stub_b "$B=answer"

set_state() { # STATE
	stop_stub_a
	while srv iptables -w -D INPUT -d "$A" -j DROP 2>/dev/null; do :; done
	srv sysctl -qw net.ipv4.icmp_ratelimit=1000
	case $1 in
	e) start_stub stub_a "$A=answer" ;;
	c) start_stub stub_a "$A=servfail" ;;
	d) start_stub stub_a "$A=refused" ;;
	a) srv sysctl -qw net.ipv4.icmp_ratelimit=0 ;;
	a+rl) ;;
	b)
		start_stub stub_a "$A=answer"
		srv iptables -w -A INPUT -d "$A" -j DROP
		;;
	*) die "unknown state $1" ;;
	esac
}

# counters prints "udpA udpB tcpA tcpB icmpUnreach" and zeroes the rules.
counters() {
	local rules icmp
	rules=$(srv iptables -w -L INPUT -n -v -x -Z | awk 'NR > 2 && NR <= 6 { printf "%s ", $1 }')
	icmp=$(srv awk '$1 == "Icmp:" { if (h) print $col; else for (i = 1; i <= NF; i++) if ($i == "OutDestUnreachs") col = i; h = 1 }' /proc/net/snmp)
	echo "$rules$icmp"
}

write_resolv() { # "NS..." "OPTIONS"
	{
		local n
		for n in $1; do echo "nameserver $n"; done
		echo "search $SEARCH"
		echo "options ndots:5${2:+ $2}"
	} >"/etc/netns/$CLI/resolv.conf"
}

# cell runs REPS lookups and appends one table row to $work/rows-SECTION.
cell() { # SECTION RESOLVER "NS..." STATE OPTIONS NAME
	local section=$1 res=$2 nss=$3 state=$4 opts=$5 name=$6 i rc c0 c1
	write_resolv "$nss" "$opts"
	[[ "$state" == a+rl ]] && sleep 7
	counters >/dev/null
	c0=$(srv awk '$1 == "Icmp:" { if (h) print $col; else for (i = 1; i <= NF; i++) if ($i == "OutDestUnreachs") col = i; h = 1 }' /proc/net/snmp)
	: >"$work/cell"
	for ((i = 0; i < REPS; i++)); do
		timeout "$LOOKUP_LIMIT" ip netns exec "$CLI" "$work/gai-$res" once "$name" >>"$work/cell" &
		client=$!
		rc=0
		wait "$client" || rc=$?
		client=""
		((rc == 0)) || echo "fail $((LOOKUP_LIMIT * 1000)) killed(rc=$rc)" >>"$work/cell"
	done
	c1=$(counters)
	[[ -n "$RAW" ]] && sed "s|^|$section $res [${nss// /+}] $state [${opts:--}] $name: |" "$work/cell" >>"$RAW"
	sort -k2,2n "$work/cell" | awk -v reps="$REPS" -v res="$res" -v nss="${nss// / + }" -v state="$state" -v opts="${opts:--}" \
		-v name="$name" -v A="$A" -v B="$B" -v c="$c1" -v icmp0="$c0" '
		{ ms[NR] = $2 + 0; if ($1 == "ok") { ok++; by = ""
			if (index($3, A)) by = by "A"; if (index($3, B)) by = by (by ? "+" : "") "B"
			who[by]++ } else err[$3]++ }
		END {
			n = NR # sorted by latency
			med = n % 2 ? ms[(n + 1) / 2] : (ms[n / 2] + ms[n / 2 + 1]) / 2
			out = ""
			for (k in who) out = out (out ? ", " : "") who[k] "x " k
			for (k in err) out = out (out ? ", " : "") err[k] "x " k
			split(c, q, " ")
			nsA = index(nss, A) ? sprintf("%.1f", q[1] / reps) : "-"
			tcp = (q[3] + q[4]) ? sprintf("%.1f / %.1f", q[3] / reps, q[4] / reps) : "0"
			printf "| %s | %s | %s | %s | `%s` | %d/%d | %.0f | %.0f | %s | %s / %s | %s | %.1f |\n",
				res, nss == A ? "A" : "A, B", state, opts, name, ok, reps, med, ms[n], out,
				nsA, index(nss, B) ? sprintf("%.1f", q[2] / reps) : "-", tcp, (q[5] - icmp0) / reps
		}' >>"$work/rows-$section"
	log "$section $res [$nss] $state [${opts:--}] $name: $(tail -n 1 "$work/rows-$section")"
}

want() { # WORD LIST: is WORD in LIST
	[[ " $2 " == *" $1 "* ]]
}

header() {
	printf '\n### %s\n\n' "$1"
	echo '| resolver | nameservers | A state | options | name | ok | median ms | max ms | outcome (answered by / error) | UDP queries per lookup A / B | TCP conns per lookup A / B | ICMP unreachable per lookup |'
	echo '|---|---|---|---|---|---|---|---|---|---|---|---|'
}

EXT=ext.example.net
FQDN=ext.example.net.

for state in e a a+rl b c d; do
	want "$state" "$STATES" || continue
	set_state "$state"
	if want two "$SECTIONS"; then
		for opts in "" "timeout:1 attempts:2" "rotate"; do
			for name in "$EXT" "$FQDN"; do
				for res in glibc musl; do
					want "$res" "$RESOLVERS" && cell two "$res" "$A $B" "$state" "$opts" "$name"
				done
			done
		done
	fi
	if want one "$SECTIONS" && want "$state" "a a+rl b"; then
		for opts in "" "timeout:1 attempts:2"; do
			for name in "$EXT" "$FQDN"; do
				for res in glibc musl; do
					want "$res" "$RESOLVERS" && cell one "$res" "$A" "$state" "$opts" "$name"
				done
			done
		done
	fi
	if want tcp "$SECTIONS" && want "$state" "e a"; then
		for spec in "|tc.example.net" "|tc.example.net." "use-vc|$EXT" "use-vc|$FQDN"; do
			for res in glibc musl; do
				want "$res" "$RESOLVERS" && cell tcp "$res" "$A $B" "$state" "${spec%%|*}" "${spec#*|}"
			done
		done
	fi
done

echo "## getaddrinfo with a failing first nameserver ($REPS lookups per row, $(uname -r), glibc $(ldd --version | awk 'NR == 1 { print $NF }'), musl $(dpkg-query -W -f='${Version}' musl 2>/dev/null || echo '?'))"
for section in two one tcp; do
	[[ -s "$work/rows-$section" ]] || continue
	case $section in
	two) header "nameserver A + nameserver B (B always answers)" ;;
	one) header "nameserver A only (how long until failure)" ;;
	tcp) header "TCP: tc.* answers are truncated over UDP; use-vc asks over TCP only" ;;
	esac
	cat "$work/rows-$section"
done
