#!/usr/bin/env bash
# What a central check costs, per request: Redis CPU, gateway CPU and store calls, for one
# or two tollgate builds in the same run, beside the same requests on a local policy.
#
#   benches/central_cost.sh [BINARY...]     # default: target/release/tollgate
#   DURATION=10 CONNS=32 benches/central_cost.sh /tmp/old-tollgate target/release/tollgate
#
# Why: the load bench's central / local throughput ratio moves by ±0.1 between runs on these
# shared 2-core machines, and its "other CPU" column mixes Redis with everything else. CPU
# time per request is read from the processes themselves (Redis: INFO cpu, the gateway:
# /proc/PID/stat utime + stime), so it says what a central check costs the store and the
# gateway however busy the machine is (a busy machine makes calls wait longer, so more
# checks share one batched call: read rows of one run side by side).
#
# Per build: one redis-server, one nginx upstream (`return 200`), one gateway (one worker
# per core, as in production) with two routes on the same GCRA policy numbers (limits never
# reached): /local (site = "local") and /central (site = "central"). Each row: wrk -t1
# -c$CONNS for $DURATION s after a 2 s warm-up, X-Forwarded-For spread over 1 000 clients.
# Printed per row: req/s, gateway CPU µs per request, Redis CPU µs per request, store calls
# per request (the gateway's tollgate_store_calls_total{op="check"}) and Redis script calls
# per request (INFO commandstats, EVALSHA + EVAL). SHOW_THREADS=1 also prints, per row, the
# gateway's CPU µs per request and context switches per request by thread name (workers
# against the main runtime: a count, so it compares builds on a busy machine too).
#
# Installs redis-server, redis-tools, nginx and wrk with apt-get when missing; binds free
# 127.0.0.1 ports; kills what it started, by pid; about 30 s per build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${DURATION:-10}"
CONNS="${CONNS:-32}"
NGINX="${NGINX:-/usr/sbin/nginx}"
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$ROOT/target/release/tollgate")
log() { printf '[central_cost.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
need() { # need COMMAND-OR-PATH PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need redis-server redis-server
need redis-cli redis-tools
need "$NGINX" nginx
need wrk wrk
for b in "${BINS[@]}"; do [ -x "$b" ] || die "$b is not an executable"; done

TMP="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# ticks PID: utime + stime of the process, in clock ticks.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# thread_ticks PID: "name ticks" per thread name (threads of one name summed), and
# "switches:name N": its context switches (voluntary + involuntary), the count that says
# which wakeups a request causes however busy the machine is.
thread_ticks() {
    for t in /proc/"$1"/task/*; do
        printf '%s %s\n' "$(tr ' ' _ <"$t/comm")" "$(awk '{ print $14 + $15 }' "$t/stat")"
        printf 'switches:%s %s\n' "$(tr ' ' _ <"$t/comm")" \
            "$(awk '/ctxt_switches/ { s += $2 } END { print s }' "$t/status")"
    done | awk '{ s[$1] += $2 } END { for (n in s) print n, s[n] }' | sort
}
# redis_cpu PORT: used_cpu_user + used_cpu_sys, in seconds.
redis_cpu() {
    redis-cli -p "$1" INFO cpu | tr -d '\r' |
        awk -F: '/^used_cpu_(user|sys):/ { t += $2 } END { printf "%.6f", t }'
}
# redis_scripts PORT: EVALSHA + EVAL calls so far.
redis_scripts() {
    redis-cli -p "$1" INFO commandstats | tr -d '\r' |
        awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ { t += $3 } END { print t + 0 }'
}
store_calls() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk '/^tollgate_store_calls_total\{op="check"/ { t += $NF } END { print t + 0 }'
}
wait_ready() { # URL PID
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || die "process $2 exited; see $TMP"
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ] && return 0
        sleep 0.1
    done
    die "$1 never answered 200"
}

cat >"$TMP/spread.lua" <<'LUA'
local ips = {}
for i = 0, 999 do ips[i + 1] = string.format("10.%d.%d.%d", i % 7, math.floor(i / 7) % 256, i % 251) end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ips[(n % 1000) + 1] })
end
LUA

read -r UP_PORT <<<"$(free_ports 1)"
mkdir -p "$TMP/up"
cat >"$TMP/up/nginx.conf" <<NGX
worker_processes 1;
pid $TMP/up/nginx.pid;
error_log $TMP/up/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    server { listen 127.0.0.1:$UP_PORT; keepalive_requests 1000000; location / { return 200 "hello"; } }
}
NGX
"$NGINX" -c "$TMP/up/nginx.conf" -g 'daemon off;' &
PIDS+=($!)

printf '| build | row | req/s | gateway CPU µs/req | Redis CPU µs/req | store calls/req | script calls/req |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | ---: |\n'
HZ=$(getconf CLK_TCK)
for BIN in "${BINS[@]}"; do
    read -r REDIS_PORT GW_PORT ADMIN_PORT <<<"$(free_ports 3)"
    mkdir -p "$TMP/redis-$REDIS_PORT"
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$TMP/redis-$REDIS_PORT" >"$TMP/redis-$REDIS_PORT/log" 2>&1 &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
    cat >"$TMP/gw-$GW_PORT.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
[client_ip]
trusted_proxies = ["127.0.0.1/32"]
[store]
kind = "redis"
urls = ["redis://127.0.0.1:$REDIS_PORT"]
timeout = "50ms"
[upstreams.app]
urls = ["http://127.0.0.1:$UP_PORT"]
[policies.local_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
[policies.central_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
site = "central"
[[routes]]
name = "local"
match = { path_prefix = "/local" }
upstream = "app"
policies = ["local_ip"]
[[routes]]
name = "central"
match = { path_prefix = "/central" }
upstream = "app"
policies = ["central_ip"]
TOML
    "$BIN" serve -c "$TMP/gw-$GW_PORT.toml" >"$TMP/gw-$GW_PORT.log" 2>&1 &
    GW_PID=$!
    PIDS+=("$GW_PID")
    wait_ready "http://127.0.0.1:$GW_PORT/central" "$GW_PID"
    for row in local central; do
        url="http://127.0.0.1:$GW_PORT/$row"
        wrk -t1 -c"$CONNS" -d2s -s "$TMP/spread.lua" "$url" >/dev/null 2>&1
        g0=$(ticks "$GW_PID"); r0=$(redis_cpu "$REDIS_PORT"); s0=$(store_calls "$ADMIN_PORT")
        t0=$(thread_ticks "$GW_PID")
        e0=$(redis_scripts "$REDIS_PORT")
        out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$TMP/spread.lua" "$url")
        g1=$(ticks "$GW_PID"); r1=$(redis_cpu "$REDIS_PORT"); s1=$(store_calls "$ADMIN_PORT")
        t1=$(thread_ticks "$GW_PID")
        e1=$(redis_scripts "$REDIS_PORT")
        reqs=$(awk '/requests in/ { print $1 }' <<<"$out")
        non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
        [ -z "$non2xx" ] || log "warning: $row: $non2xx non-2xx answers"
        awk -v b="$(basename "$BIN")" -v row="$row" -v n="$reqs" -v d="$DURATION" -v hz="$HZ" \
            -v g=$((g1 - g0)) -v r="$(awk -v a="$r0" -v b="$r1" 'BEGIN { print b - a }')" \
            -v s=$((s1 - s0)) -v e=$((e1 - e0)) 'BEGIN {
            printf "| %s | %s | %.0f | %.1f | %.2f | %.4f | %.4f |\n", b, row, n / d,
                1e6 * g / hz / n, 1e6 * r / n, s / n, e / n }'
        [ -z "${SHOW_THREADS:-}" ] || join -a2 <(echo "$t0") <(echo "$t1") | awk -v n="$reqs" \
            -v hz="$HZ" -v row="$row" '{ d = (NF == 3 ? $3 - $2 : $2); if (d <= 0) next
            if (sub(/^switches:/, "", $1))
                printf "[central_cost.sh] %s: thread %s %.4f context switches/req\n", row, $1, d / n
            else
                printf "[central_cost.sh] %s: thread %s %.1f µs/req\n", row, $1, 1e6 * d / hz / n }' >&2
    done
    [ -z "${SHOW_STATS:-}" ] || redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d "\r" | grep cmdstat >&2
    kill "$GW_PID" "$REDIS_PID" 2>/dev/null || true
    wait "$GW_PID" "$REDIS_PID" 2>/dev/null || true
done
