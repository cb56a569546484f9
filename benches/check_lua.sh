#!/usr/bin/env bash
# Redis CPU per request of the central check script, for one or more versions of it.
#
#   benches/check_lua.sh [SCRIPT...]    # default: crates/tollgate-limit/src/site/central/check.lua
#   git show HEAD~1:crates/tollgate-limit/src/site/central/check.lua >/tmp/old.lua
#   benches/check_lua.sh /tmp/old.lua crates/tollgate-limit/src/site/central/check.lua
#
# Why: Redis runs every central check, so the script's CPU per request is what the store
# costs per request (the gateway's batching already shares one invocation among the
# requests that queue behind a call). `redis-benchmark` sends the `batch` op with G one-key
# GCRA requests (the common request: one policy, one key; G = 13, what the gateway's calls
# carried in `benches/central_cost.sh`) N times on CONNS connections; Redis's own CPU
# (INFO cpu: user + sys) over the run, divided by the requests, is the figure. The same
# keys every call (limits never reached), so every call reads and writes G existing keys.
# Also printed: `usec_per_call` from INFO commandstats (wall time inside the script, so a
# busy machine inflates it; the CPU column is the figure).
#
# OP=check sends the `check` op instead (one request of G keys, the unbatched call: G=1 is
# one one-key request per call, what every central request cost the store before batching;
# scripts older than the batch op understand only this).
#
# COUNT=instructions runs Redis under valgrind's callgrind instead and prints the
# instructions Redis executes per request (N defaults to 1500 calls there): the same on a
# busy machine as on a quiet one, so two scripts compare to within about 2 % in any
# conditions (Redis's own timers run in the count too, at most a few per cent of it).
#
# Installs redis-server and redis-tools with apt-get when missing; binds a free 127.0.0.1
# port; kills the server it started, by pid.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
G="${G:-13}"
OP="${OP:-batch}"
N="${N:-20000}"
CONNS="${CONNS:-4}"
SCRIPTS=("$@")
[ ${#SCRIPTS[@]} -gt 0 ] || SCRIPTS=("$ROOT/crates/tollgate-limit/src/site/central/check.lua")
log() { printf '[check_lua.sh] %s\n' "$*" >&2; }
need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need redis-server redis-server
need redis-benchmark redis-tools
for s in "${SCRIPTS[@]}"; do [ -r "$s" ] || { log "error: cannot read $s"; exit 1; }; done

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
TMP="$(mktemp -d)"
CALLGRIND=()
if [ "${COUNT:-}" = instructions ]; then
    command -v valgrind >/dev/null 2>&1 || need valgrind valgrind
    CALLGRIND=(valgrind --tool=callgrind "--callgrind-out-file=$TMP/cg.%p")
    N="${N_CALLGRIND:-1500}"
fi
"${CALLGRIND[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$TMP" >"$TMP/log" 2>&1 &
RP=$!
trap 'kill "$RP" 2>/dev/null || true; wait "$RP" 2>/dev/null || true; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done

cpu() {
    redis-cli -p "$PORT" INFO cpu | tr -d '\r' |
        awk -F: '/^used_cpu_(user|sys):/ { t += $2 } END { printf "%.6f", t }'
}
# One GCRA key per request: algorithm 1, limit 1e8 per 1 s (in µs), burst 1e6, cost 1,
# no max delay, enforce, no slot.
KEYS=(); SIZES=(); VALS=()
for i in $(seq "$G"); do
    KEYS+=("{bench}k$i"); SIZES+=(1); VALS+=(1 100000000 1000000 1000000 1 0 1 0)
done

# Requests per call: G (batch), or 1 (check: one request of G keys).
PER_CALL="$G"
run() { # SHA CALLS
    if [ "$OP" = check ]; then
        redis-benchmark -p "$PORT" -n "$2" -c "$CONNS" -q \
            EVALSHA "$1" "$G" "${KEYS[@]}" check "${VALS[@]}" >/dev/null
    else
        redis-benchmark -p "$PORT" -n "$2" -c "$CONNS" -q \
            EVALSHA "$1" "$G" "${KEYS[@]}" batch "$G" "${SIZES[@]}" "${VALS[@]}" >/dev/null
    fi
}
case "$OP" in
    check) PER_CALL=1 ;;
    batch) ;;
    *) log "error: OP must be batch or check, not $OP"; exit 1 ;;
esac

if [ ${#CALLGRIND[@]} -gt 0 ]; then
    printf '| script | Redis instructions / request | instructions / call |\n| --- | ---: | ---: |\n'
    for s in "${SCRIPTS[@]}"; do
        sha=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat "$s")")
        run "$sha" 100 # warm: every key exists, the script is compiled
        callgrind_control -z "$RP" >/dev/null 2>&1
        run "$sha" "$N"
        callgrind_control -d "$RP" >/dev/null 2>&1
        sleep 0.5
        ir=$(grep -h -m1 '^summary:' "$(ls -t "$TMP"/cg.*.* | head -1)" | awk '{ print $2 }')
        awk -v s="$s" -v ir="$ir" -v n="$N" -v g="$PER_CALL" 'BEGIN {
            printf "| %s | %.0f | %.0f |\n", s, ir / n / g, ir / n }'
    done
    exit 0
fi

printf '| script | Redis CPU µs / request | µs / call | usec_per_call (wall time in the script: preemption counts) |\n'
printf '| --- | ---: | ---: | ---: |\n'
for s in "${SCRIPTS[@]}"; do
    sha=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat "$s")")
    redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
    c0=$(cpu)
    run "$sha" "$N"
    c1=$(cpu)
    per_call=$(redis-cli -p "$PORT" INFO commandstats | tr -d '\r' |
        awk -F'[=,]' '/^cmdstat_evalsha:/ { print $6 }')
    awk -v s="$s" -v a="$c0" -v b="$c1" -v n="$N" -v g="$PER_CALL" -v u="$per_call" 'BEGIN {
        printf "| %s | %.2f | %.1f | %s |\n", s, 1e6 * (b - a) / n / g, 1e6 * (b - a) / n, u }'
done
