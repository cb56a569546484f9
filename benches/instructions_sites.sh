#!/usr/bin/env bash
# Instructions per request of one gateway of a fleet of three, by decision site: a local
# policy against a gossip policy and an owner policy, counted by valgrind's callgrind.
#
#   benches/instructions_sites.sh [BINARY]        # BINARY defaults to target/release/tollgate
#   KEEP=DIR benches/instructions_sites.sh         # also keeps DIR/ROW.callgrind.out, to read
#                                                  # with callgrind_annotate
#
# Why: the load bench's gossip / local throughput ratio drifts between runs on these shared
# 2-core machines by more than the difference it is meant to show; user-space instructions
# per request are repeatable. Kernel time is not counted.
#
# Node A runs under callgrind with one worker thread; B and C run normally. Each row is its
# own run of A: wrk -t1 -c8 -d8s with X-Forwarded-For spread over 1 000 clients (limits never
# reached), through an nginx upstream; an idle run of A is subtracted:
#   per request = (instructions(row) - instructions(idle)) / requests(row).
# Only the 8 s after A's 6 s of start-up are counted (callgrind starts with instrumentation
# off; callgrind_control turns it on): start-up varies from run to run by more than the
# rows differ (quanta's clock calibration alone by some 3 M instructions, 0.5 % of a row
# when charged to its requests), and it is no cost of a request.
# The SHA-256 column is the part of that spent in SHA-256 compression (the peer messages'
# HMAC up to wire version 5; they are keyed BLAKE3 since, so it is 0 for newer builds):
# valgrind does not emulate the CPU's SHA extensions, so under it the sha2 crate takes its
# software path, some 3 500 instructions a 64-byte block, where a CPU with SHA extensions
# (the bench machines have them) spends a small fraction of that. The last column is the
# ratio without it. Pushes come every gossip_interval whatever the load, so
# the gossip row's push share per request grows as fewer requests fit in a run (a busy
# machine): compare rows of one run.
# Binds free 127.0.0.1 ports; kills what it started by pid; takes about 2 minutes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/tollgate}"
NGINX="${NGINX:-/usr/sbin/nginx}"
log() { printf '[instructions_sites.sh] %s\n' "$*" >&2; }
for c in valgrind wrk "$NGINX" callgrind_annotate callgrind_control python3; do
    command -v "$c" >/dev/null 2>&1 || { log "error: $c missing (apt-get install valgrind wrk nginx)"; exit 1; }
done
[ -x "$BIN" ] || { log "error: $BIN is not an executable"; exit 1; }

TMP="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

read -r UP L0 L1 L2 P0 P1 P2 <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(7)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')"
export TOLLGATE_PEER_SECRET="instructions bench: a peer secret of 32+ bytes"

printf '%s\n' "worker_processes 1;" "daemon off;" "pid $TMP/nginx.pid;" "error_log $TMP/error.log;" \
    "events { worker_connections 4096; }" \
    "http { access_log off; server { listen 127.0.0.1:$UP; location / { return 200 \"hello\\n\"; } } }" \
    >"$TMP/nginx.conf"
LISTENS=("$L0" "$L1" "$L2")
PEERS=("$P0" "$P1" "$P2")
for i in 0 1 2; do
    {
        printf '[server]\nlisten = "127.0.0.1:%s"\n' "${LISTENS[$i]}"
        printf '[client_ip]\ntrusted_proxies = ["127.0.0.1/32"]\n'
        printf '[cluster]\nnode_id = "n%s"\npeer_listen = "127.0.0.1:%s"\n' "$i" "${PEERS[$i]}"
        printf 'peers = ["127.0.0.1:%s", "127.0.0.1:%s", "127.0.0.1:%s"]\n' "$P0" "$P1" "$P2"
        printf 'peer_secret_env = "TOLLGATE_PEER_SECRET"\n'
        printf '[upstreams.app]\nurls = ["http://127.0.0.1:%s"]\n' "$UP"
        for site in local gossip owner; do
            printf '[policies.%s_ip]\nkey = ["ip"]\nalgorithm = "gcra"\nlimit = 100000000\n' "$site"
            printf 'period = "1s"\nburst = 1000000\nsite = "%s"\n' "$site"
            printf '[[routes]]\nname = "%s"\nmatch = { path_prefix = "/%s" }\n' "$site" "$site"
            printf 'upstream = "app"\npolicies = ["%s_ip"]\n' "$site"
        done
    } >"$TMP/n$i.toml"
done
"$BIN" check -c "$TMP/n0.toml" >/dev/null
printf '%s\n' 'local ips = {}' \
    'for i = 0, 999 do ips[i + 1] = string.format("10.%d.%d.%d", i % 7, math.floor(i / 7) % 256, i % 251) end' \
    'local n = 0' \
    'request = function()' \
    '  n = n + 1' \
    '  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ips[(n % 1000) + 1] })' \
    'end' >"$TMP/spread.lua"
"$NGINX" -p "$TMP" -c "$TMP/nginx.conf" & PIDS+=($!)
for i in 1 2; do
    RUST_LOG=warn TOLLGATE_WORKERS=1 "$BIN" serve -c "$TMP/n$i.toml" 2>/dev/null & PIDS+=($!)
done

# run ROW: prints "REQUESTS INSTRUCTIONS SHA256" for node A (under callgrind) serving /ROW.
run() {
    local out="$TMP/cg.out" n=0 pid
    RUST_LOG=warn TOLLGATE_WORKERS=1 valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$out" "$BIN" serve -c "$TMP/n0.toml" 2>/dev/null & pid=$!
    PIDS+=("$pid")
    sleep 6
    callgrind_control -i on "$pid" >/dev/null 2>&1 || { log "error: callgrind_control failed"; exit 1; }
    if [ "$1" = idle ]; then
        sleep 8
    else
        n=$(wrk -t1 -c8 -d8s -s "$TMP/spread.lua" "http://127.0.0.1:$L0/$1" | awk '/requests in/ { print $1 }')
    fi
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
    [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$out" "$KEEP/$1.callgrind.out"; }
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | awk -v n="$n" '
        /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
        /sha2::sha256::compress256 / { gsub(",", "", $1); sha = $1 }
        END { print n, total, sha + 0 }'
}

read -r _ idle idle_sha <<<"$(run idle)"
log "idle: $idle instructions"
declare -A PER SHA
for row in local gossip owner; do
    read -r n total sha <<<"$(run "$row")"
    PER[$row]=$(( (total - idle) / n ))
    SHA[$row]=$(( (sha - idle_sha) / n ))
    log "$row: $n requests, $total instructions, $sha in SHA-256"
done
echo "| row (node A of three) | instructions/request | / local | of which SHA-256 | / local without SHA-256 |"
echo "| --- | ---: | ---: | ---: | ---: |"
for row in local gossip owner; do
    echo "| $row | ${PER[$row]} | $(awk -v a="${PER[$row]}" -v b="${PER[local]}" 'BEGIN { printf "%.3f", a / b }') |" \
        "${SHA[$row]} | $(awk -v a="${PER[$row]}" -v s="${SHA[$row]}" -v b="${PER[local]}" -v t="${SHA[local]}" \
            'BEGIN { printf "%.3f", (a - s) / (b - t) }') |"
done
echo
echo "binary: $BIN"
