#!/usr/bin/env bash
# Load benchmark: tollgate against nginx (the peer) and against the upstream alone (the ceiling).
#
#   benches/load.sh                      # 3 s warm-up + 10 s measured per target
#   DURATION=30 CONNECTIONS=128 benches/load.sh
#
# Every target gets the same small GET (`GET /bench` answered `200 "hello\n"`) from the same
# upstream, one after the other, in ONE run, so the numbers are comparable with each other
# (absolute numbers depend on the machine: wrk, the upstream and the proxy share its cores).
#
# Targets:
#   direct   wrk -> upstream nginx                       the ceiling
#   nginx    wrk -> nginx proxy_pass (keepalive 64) -> upstream   the peer
#   tollgate wrk -> tollgate (release, 2 workers) -> upstream
# and, with X-Forwarded-For spread over 1 000 client addresses (spread.lua):
#   nginx-limit_req   nginx as above with limit_req keyed by the client, never reached
#   tollgate-nolimit  tollgate, a route without policies (the baseline of the next two)
#   tollgate-local    a route with one local GCRA policy keyed by client IP, never reached
#   tollgate-central  the same policy with site = "central" in a Redis the script starts
#   tollgate-lease    one key for all clients, site = "lease": cells leased in batches
# and, without spread: tollgate-abuse, one client hammering a central key limited to 100/s
# (store calls per request show the denied-until cache); then redis-benchmark runs the check
# script's EVALSHA directly: the store's own ceiling. Last, the store-free fleet sites, with
# spread again: three tollgate processes A, B, C on a static fleet ([cluster] peers, the
# peer secret in their environment only), wrk -> A, B and C answering A's peer calls:
#   tollgate-owner      one policy keyed by client IP with site = "owner", never reached
#                       (A asks B or C for the keys it does not own; asks per request on A)
#   tollgate-owner-hot  one key for all clients (key = ["route"]) owned by B or C (found by
#                       trying: one request on A moves A's ask counter): every request is
#                       an ask to one owner, whose CPU is reported beside A's
#   tollgate-gossip     one policy keyed by client IP with site = "gossip", gossip_interval 20ms
# Targets: tollgate-owner >= 0.70 x tollgate-local, tollgate-gossip >= 0.95 x tollgate-local.
# Efficiency (issue 14): requests per proxy CPU-second (user + system ticks of the proxy's
# processes in /proc, children included) for every row with a proxy, and tollgate / nginx of
# it on the plain row and on the local-limiting row (tollgate-local / nginx-limit_req);
# then both rows' CPU µs a request split into user and system, and the ratio's ceiling:
# nginx's whole CPU a request over tollgate's system CPU alone.
#
# The upstream is its own nginx instance with `worker_processes 1`: it is the same process for
# every target, and it is never counted among the proxy nginx's workers, so the peer gets
# exactly 2 workers as tollgate gets exactly 2 tokio worker threads.
#
# Everything listens on free 127.0.0.1 ports chosen at start; nginx runs with `-p`/`-c` in a
# `mktemp -d` folder with `daemon off`; every process started here is killed by pid on exit.
# Traffic goes to 127.0.0.1 only, bounded by WARMUP + DURATION seconds per target.
#
# Environment: DURATION (10), WARMUP (3), CONNECTIONS (64), THREADS (2), TOLLGATE_WORKERS (2),
# NGINX_WORKERS (2), SKIP_BUILD (unset: `cargo build --release` first), KEEP_TMP (unset),
# TOLLGATE_BIN (unset: this tree's target/release/tollgate; set it to compare another build).
#
# To add a target: start its server with a helper below (start_nginx / start_tollgate, which
# return its pid in $STARTED_PID), wait_ready on its URL, then `measure NAME URL PID...`; the
# row and the ratios in the report come from the NAMES array.
set -euo pipefail

DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-3}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"
TOLLGATE_WORKERS="${TOLLGATE_WORKERS:-2}"
NGINX_WORKERS="${NGINX_WORKERS:-2}"
NGINX="${NGINX:-/usr/sbin/nginx}"
BENCH_PATH="/bench"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMMAND_LINE="DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS THREADS=$THREADS TOLLGATE_WORKERS=$TOLLGATE_WORKERS NGINX_WORKERS=$NGINX_WORKERS benches/load.sh"

log() { printf '[load.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and build.
# ---------------------------------------------------------------------------------------------
APT_UPDATED=""
need() { # need COMMAND-OR-PATH PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    if [ -z "$APT_UPDATED" ]; then apt-get update -qq >&2; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
    command -v "$1" >/dev/null 2>&1 || die "$2 did not provide $1"
}
need wrk wrk
need "$NGINX" nginx
need curl curl
need python3 python3
need redis-server redis-server
need redis-cli redis-tools
need redis-benchmark redis-tools

if [ -z "${SKIP_BUILD:-}" ]; then
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --quiet)
fi
# TOLLGATE_BIN runs another build (e.g. the previous commit's) through the same rows.
TOLLGATE="${TOLLGATE_BIN:-$ROOT/target/release/tollgate}"
[ -x "$TOLLGATE" ] || die "$TOLLGATE missing (cargo build --release)"

# ---------------------------------------------------------------------------------------------
# Process bookkeeping: every pid started here is killed on exit, whatever the exit.
# ---------------------------------------------------------------------------------------------
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-load.XXXXXX")"
chmod 755 "$TMP"
PIDS=()
cleanup() {
    local rc=$? pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        # nginx's fast shutdown and tollgate's graceful one both take well under 5 s here.
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "${KEEP_TMP:-}" ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_ports N: N distinct free loopback ports, all held open together while they are picked.
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

# wait_ready URL PID: until URL answers 200 "hello" through whatever is listening (10 s max).
wait_ready() {
    local url="$1" pid="$2" body
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || die "process $pid for $url exited; see $TMP"
        body="$(curl -fsS --max-time 1 "$url" 2>/dev/null || true)"
        [ "$body" = "hello" ] && return 0
        sleep 0.1
    done
    die "$url not ready after 10 s"
}

# start_nginx NAME HTTP-BLOCK-BODY WORKERS: runs nginx in $TMP/NAME; pid in STARTED_PID.
STARTED_PID=""
start_nginx() {
    local name="$1" body="$2" workers="$3" dir="$TMP/$1" user_line=""
    mkdir -p "$dir/tmp"
    # As root nginx would switch its workers to `nobody`; keep them as the invoking user.
    [ "$(id -u)" = 0 ] && user_line="user root root;"
    cat >"$dir/nginx.conf" <<EOF
$user_line
daemon off;
master_process on;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    keepalive_requests 1000000;
$body
}
EOF
    "$NGINX" -t -q -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" || die "bad nginx config $dir/nginx.conf"
    "$NGINX" -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" 2>>"$dir/error.log" &
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
}

# start_tollgate NAME CONFIG-FILE: runs the release build; pid in STARTED_PID.
start_tollgate() {
    local name="$1" config="$2"
    mkdir -p "$TMP/$name"
    RUST_LOG=warn TOLLGATE_WORKERS="$TOLLGATE_WORKERS" \
        "$TOLLGATE" serve -c "$config" 2>"$TMP/$name/stderr.log" &
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
}

# machine_ticks: "busy total" clock ticks of all cores so far; busy = user + nice + system,
# the time processes are charged with (irq/softirq time, loopback networking mostly, is not).
machine_ticks() {
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $2 + $3 + $4, t }' /proc/stat
}

# cpu_ticks PID...: user+system clock ticks used so far by these processes and their children.
cpu_ticks() {
    local total=0 pid p t
    for pid in "$@"; do
        for p in "$pid" $(pgrep -P "$pid" || true); do
            # fields 14 and 15 of /proc/PID/stat (after the parenthesised command name)
            t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
            total=$((total + t))
        done
    done
    echo "$total"
}

# cpu_split PID...: "user system" clock ticks of these processes and their children (the
# efficiency table's user / system split).
cpu_split() {
    local u=0 s=0 pid p line
    for pid in "$@"; do
        for p in "$pid" $(pgrep -P "$pid" || true); do
            line=$(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$p/stat" 2>/dev/null || echo "0 0")
            u=$((u + ${line% *})); s=$((s + ${line#* }))
        done
    done
    echo "$u $s"
}

# upstream_accepts: connections the upstream nginx has accepted so far (its own stub_status;
# the curl asking for it is one of them).
upstream_accepts() {
    curl -fsS --max-time 2 "http://127.0.0.1:$UP_PORT/nginx-status" | awk 'NR == 3 { print $1 }'
}

# ---------------------------------------------------------------------------------------------
# Measuring.
# ---------------------------------------------------------------------------------------------
cat >"$TMP/report.lua" <<'EOF'
-- One parse-friendly line at the end of a wrk run; latencies in microseconds.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f max_us=%.0f " ..
    "connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
EOF

WRK_CMD="wrk --threads $THREADS --connections $CONNECTIONS --duration ${DURATION}s --latency --script report.lua URL"
NAMES=()
declare -A RPS P50 P99 ERRS CPU UPCPU WRKCPU OTHER UPCONNS CPU_EACH PER_CPU USER_US SYS_US
NOISY=""
UPSTREAM_PID=""

# measure NAME URL [PID...]: warm-up (discarded), then the measured run; appends a row.
# PIDs are the processes under test, for the CPU column (their children count too); each
# one's own share goes to CPU_EACH[NAME], space-separated in the order given.
measure() {
    local name="$1" url="$2"; shift 2
    local out="$TMP/wrk-$name.txt" hz before after up_before up_after line wrk_ticks m_before m_after others acc_before acc_after
    log "$name: warm-up ${WARMUP}s, then ${DURATION}s against $url"
    local script="${SCRIPT_FILE:-$TMP/report.lua}"
    wrk --threads "$THREADS" --connections "$CONNECTIONS" --duration "${WARMUP}s" --script "$script" "$url" >/dev/null
    hz=$(getconf CLK_TCK)
    acc_before=$(upstream_accepts)
    local -a each_before=() each=()
    local pid i
    for pid in "$@"; do each_before+=("$(cpu_ticks "$pid")"); done
    before=$(cpu_ticks "$@"); up_before=$(cpu_ticks "$UPSTREAM_PID"); m_before=$(machine_ticks)
    local split_before split_after
    split_before=$(cpu_split "$@")
    # In a subshell, so that its cutime+cstime afterwards are wrk's own CPU ticks.
    wrk_ticks=$(
        wrk --threads "$THREADS" --connections "$CONNECTIONS" --duration "${DURATION}s" \
            --latency --script "$script" "$url" >"$out"
        awk '{ sub(/^.*\) /, ""); print $14 + $15 }' "/proc/$BASHPID/stat"
    )
    after=$(cpu_ticks "$@"); up_after=$(cpu_ticks "$UPSTREAM_PID"); m_after=$(machine_ticks)
    split_after=$(cpu_split "$@")
    i=0
    for pid in "$@"; do
        each+=("$(awk -v t=$(( $(cpu_ticks "$pid") - each_before[i] )) -v hz="$(getconf CLK_TCK)" -v d="$DURATION" \
                   'BEGIN { printf "%.0f%%", 100 * t / hz / d }')")
        i=$((i + 1))
    done
    # Each process's own share, in the order given (the fleet rows: A, B, C).
    CPU_EACH[$name]="${each[*]}"
    acc_after=$(upstream_accepts)
    UPCONNS[$name]=$((acc_after - acc_before - 1))
    line=$(grep '^BENCH ' "$out") || die "no BENCH line in $out: $(cat "$out")"
    # BENCH k=v k=v ... -> shell-free parsing with awk
    NAMES+=("$name")
    RPS[$name]=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                       printf "%.0f", v["requests"] / (v["duration_us"] / 1e6) }' <<<"$line")
    P50[$name]=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                       printf "%.3f", v["p50_us"] / 1000 }' <<<"$line")
    P99[$name]=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                       printf "%.3f", v["p99_us"] / 1000 }' <<<"$line")
    ERRS[$name]=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                        printf "%d", v["connect"] + v["read"] + v["write"] + v["status"] + v["timeout"] }' <<<"$line")
    if [ "$#" -gt 0 ]; then
        CPU[$name]=$(awk -v t=$((after - before)) -v hz="$hz" -v d="$DURATION" 'BEGIN { printf "%.0f%%", 100 * t / hz / d }')
        # Requests per CPU-second of the proxy processes alone (/proc ticks, as CPU above):
        # the work a core buys, whatever share of the machine the proxy got.
        PER_CPU[$name]=$(awk -v rps="${RPS[$name]}" -v t=$((after - before)) -v hz="$hz" -v d="$DURATION" \
            'BEGIN { if (t > 0) printf "%.0f", rps * d / (t / hz); else print "n/a" }')
        # The same CPU as µs a request, user and system apart: the kernel's share (sockets,
        # loopback TCP, wakeups) is what no user-space change can lower.
        read -r USER_US[$name] SYS_US[$name] <<<"$(awk -v b="$split_before" -v a="$split_after" \
            -v rps="${RPS[$name]}" -v hz="$hz" -v d="$DURATION" 'BEGIN {
                split(b, x, " "); split(a, y, " "); n = rps * d
                if (n > 0) printf "%.1f %.1f", (y[1] - x[1]) / hz * 1e6 / n, (y[2] - x[2]) / hz * 1e6 / n
                else print "n/a n/a" }')"
    else
        CPU[$name]="-"
        PER_CPU[$name]="-"
    fi
    WRKCPU[$name]=$(awk -v t="$wrk_ticks" -v hz="$hz" -v d="$DURATION" 'BEGIN { printf "%.0f%%", 100 * t / hz / d }')
    # Whatever else ran on the machine meanwhile (a build, a test suite) skews every column.
    others=$(awk -v busy="$(awk -v b="$m_before" -v a="$m_after" 'BEGIN { split(b, x, " "); split(a, y, " "); print y[1] - x[1] }')" \
                 -v ours=$(( (after - before) + (up_after - up_before) + wrk_ticks )) -v hz="$hz" -v d="$DURATION" \
                 'BEGIN { o = (busy - ours) / hz / d * 100; if (o < 0) o = 0; printf "%.0f", o }')
    OTHER[$name]="${others}%"
    if [ "$others" -gt 15 ]; then NOISY="$NOISY $name"; fi
    UPCPU[$name]=$(awk -v t=$((up_after - up_before)) -v hz="$hz" -v d="$DURATION" 'BEGIN { printf "%.0f%%", 100 * t / hz / d }')
    log "$name: ${RPS[$name]} req/s, p50 ${P50[$name]} ms, p99 ${P99[$name]} ms, errors ${ERRS[$name]}"
}

# ratio A B FIELD-ARRAY: A/B of a numeric column, or "n/a".
ratio() {
    local -n col="$3"
    [ -n "${col[$1]:-}" ] && [ -n "${col[$2]:-}" ] || { echo "n/a"; return; }
    awk -v a="${col[$1]}" -v b="${col[$2]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'
}

# ---------------------------------------------------------------------------------------------
# The targets.
# ---------------------------------------------------------------------------------------------
read -r UP_PORT NGINX_PORT TOLLGATE_PORT <<<"$(free_ports 3)"

start_nginx upstream "
    server {
        listen 127.0.0.1:$UP_PORT;
        location / { return 200 \"hello\\n\"; }
        location = /nginx-status { stub_status; }
    }" 1
UPSTREAM_PID=$STARTED_PID
wait_ready "http://127.0.0.1:$UP_PORT$BENCH_PATH" "$UPSTREAM_PID"

start_nginx nginx "
    upstream app {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }
    }" "$NGINX_WORKERS"
NGINX_PID=$STARTED_PID
wait_ready "http://127.0.0.1:$NGINX_PORT$BENCH_PATH" "$NGINX_PID"

cat >"$TMP/tollgate.toml" <<EOF
[server]
listen = "127.0.0.1:$TOLLGATE_PORT"

[client_ip]
trusted_proxies = []

[upstreams.app]
urls = ["http://127.0.0.1:$UP_PORT"]

[[routes]]
name = "default"
match = { path_prefix = "/" }
upstream = "app"
EOF
"$TOLLGATE" check -c "$TMP/tollgate.toml" >/dev/null || die "tollgate rejects $TMP/tollgate.toml"
start_tollgate tollgate "$TMP/tollgate.toml"
TOLLGATE_PID=$STARTED_PID
wait_ready "http://127.0.0.1:$TOLLGATE_PORT$BENCH_PATH" "$TOLLGATE_PID"

measure direct "http://127.0.0.1:$UP_PORT$BENCH_PATH"
measure nginx "http://127.0.0.1:$NGINX_PORT$BENCH_PATH" "$NGINX_PID"
measure tollgate "http://127.0.0.1:$TOLLGATE_PORT$BENCH_PATH" "$TOLLGATE_PID"

# ---------------------------------------------------------------------------------------------
# Rate limiting: the same request with client addresses spread over 1 000 IPs (X-Forwarded-For
# from a trusted loopback client), through nginx limit_req and through tollgate routes with no
# policy, a local policy, and a central (Redis) policy whose limit is never reached; then one
# abusive client hammering one central key with a small limit.
# ---------------------------------------------------------------------------------------------
cat >"$TMP/spread.lua" <<'LUA'
-- Every request from one of 1 000 client addresses, as a trusted proxy would report them.
local ips = {}
for i = 0, 999 do ips[i + 1] = string.format("10.%d.%d.%d", i % 7, math.floor(i / 7) % 256, i % 251) end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ips[(n % 1000) + 1] })
end
LUA
sed -n '/^done = function/,$p' "$TMP/report.lua" >>"$TMP/spread.lua"

read -r LIMIT_NGINX_PORT LIMITED_PORT LIMITED_ADMIN REDIS_PORT <<<"$(free_ports 4)"
mkdir -p "$TMP/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/redis" \
    >"$TMP/redis/log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG || die "redis-server did not start; see $TMP/redis/log"

start_nginx nginx-limit "
    limit_req_zone \$http_x_forwarded_for zone=perip:10m rate=100000000r/s;
    upstream app {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$LIMIT_NGINX_PORT;
        location / {
            limit_req zone=perip burst=1000000 nodelay;
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }
    }" "$NGINX_WORKERS"
LIMIT_NGINX_PID=$STARTED_PID
wait_ready "http://127.0.0.1:$LIMIT_NGINX_PORT$BENCH_PATH" "$LIMIT_NGINX_PID"

cat >"$TMP/limited.toml" <<TOML
[server]
listen = "127.0.0.1:$LIMITED_PORT"
admin_listen = "127.0.0.1:$LIMITED_ADMIN"
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
[policies.lease_route]
key = ["route"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
site = "lease"
[policies.abuse_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100
period = "1s"
burst = 100
site = "central"
[[routes]]
name = "plain"
match = { path_prefix = "/plain" }
upstream = "app"
[[routes]]
name = "limited"
match = { path_prefix = "/limited" }
upstream = "app"
policies = ["local_ip"]
[[routes]]
name = "central"
match = { path_prefix = "/central" }
upstream = "app"
policies = ["central_ip"]
[[routes]]
name = "lease"
match = { path_prefix = "/lease" }
upstream = "app"
policies = ["lease_route"]
[[routes]]
name = "abuse"
match = { path_prefix = "/abuse" }
upstream = "app"
policies = ["abuse_ip"]
TOML
"$TOLLGATE" check -c "$TMP/limited.toml" >/dev/null || die "tollgate rejects $TMP/limited.toml"
start_tollgate tollgate-limits "$TMP/limited.toml"
LIMITED_PID=$STARTED_PID
wait_ready "http://127.0.0.1:$LIMITED_PORT/plain" "$LIMITED_PID"
wait_ready "http://127.0.0.1:$LIMITED_PORT/central" "$LIMITED_PID"

# metric PATTERN: sum of the tollgate-limits metrics whose line starts with PATTERN.
metric() {
    curl -fsS --max-time 2 "http://127.0.0.1:$LIMITED_ADMIN/metrics" |
        awk -v p="$1" 'index($0, p) == 1 { s += $NF } END { printf "%.0f", s }'
}
declare -A CALLS_PER_REQ
# measure_store NAME ROUTE URL [OP]: measure, and the store calls (of OP, default check) per
# request on ROUTE meanwhile (warm-up included on both sides of the ratio).
measure_store() {
    local name="$1" route="$2" url="$3" op="${4:-check}" c0 r0 c1 r1
    c0=$(metric "tollgate_store_calls_total{op=\"$op\"}")
    r0=$(metric "tollgate_requests_total{route=\"$route\"")
    measure "$name" "$url" "$LIMITED_PID"
    c1=$(metric "tollgate_store_calls_total{op=\"$op\"}")
    r1=$(metric "tollgate_requests_total{route=\"$route\"")
    CALLS_PER_REQ[$name]=$(awk -v c=$((c1 - c0)) -v r=$((r1 - r0)) \
        'BEGIN { if (r > 0) printf "%.3f", c / r; else print "n/a" }')
}

SCRIPT_FILE="$TMP/spread.lua"
measure nginx-limit_req "http://127.0.0.1:$LIMIT_NGINX_PORT$BENCH_PATH" "$LIMIT_NGINX_PID"
measure tollgate-nolimit "http://127.0.0.1:$LIMITED_PORT/plain" "$LIMITED_PID"
measure tollgate-local "http://127.0.0.1:$LIMITED_PORT/limited" "$LIMITED_PID"
measure_store tollgate-central central "http://127.0.0.1:$LIMITED_PORT/central"
measure_store tollgate-lease lease "http://127.0.0.1:$LIMITED_PORT/lease" lease
SCRIPT_FILE=""
measure_store tollgate-abuse abuse "http://127.0.0.1:$LIMITED_PORT/abuse"

# The store's own ceiling: redis-benchmark running the check script directly.
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$ROOT/crates/tollgate-limit/src/site/central/check.lua")")
EVALSHA_RPS=$(redis-benchmark -p "$REDIS_PORT" -n 200000 -c 50 -q \
    EVALSHA "$SHA" 1 tg:bench:key check 1 100000000 1000000 1000000 1 0 1 2>/dev/null |
    tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($i == "requests") v = $(i - 1) } END { print v }')
EVALSHA_RPS=${EVALSHA_RPS%%.*}

# ---------------------------------------------------------------------------------------------
# The store-free fleet sites: three tollgate processes A, B and C on a static fleet
# ([cluster] peers, an authenticated h2c peer transport), the same routes on each. wrk sends
# to A only; B and C only answer A's asks (owner) and take its gossip pushes (gossip).
# ---------------------------------------------------------------------------------------------
read -r A_PORT A_ADMIN A_PEER B_PORT B_ADMIN B_PEER C_PORT C_ADMIN C_PEER <<<"$(free_ports 9)"
# The fleet's shared secret: a shell variable, never exported, handed to each tollgate
# child in its environment only (TOLLGATE_PEER_SECRET=... on its command, not in argv).
PEER_SECRET="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
HOT_CANDIDATES=8 # routes hot0..hot7, one `route` key each: one of them is owned by B or C

# fleet_config NODE-ID PORT ADMIN PEER: a node's config (only ports and node_id differ).
fleet_config() {
    local id="$1" port="$2" admin="$3" peer="$4" i
    cat <<TOML
[server]
listen = "127.0.0.1:$port"
admin_listen = "127.0.0.1:$admin"
[client_ip]
trusted_proxies = ["127.0.0.1/32"]
[store]
timeout = "50ms"
[cluster]
node_id = "$id"
peer_listen = "127.0.0.1:$peer"
peers = ["127.0.0.1:$A_PEER", "127.0.0.1:$B_PEER", "127.0.0.1:$C_PEER"]
peer_secret_env = "TOLLGATE_PEER_SECRET"
gossip_interval = "20ms"
[upstreams.app]
urls = ["http://127.0.0.1:$UP_PORT"]
[policies.owner_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
site = "owner"
[policies.owner_route]
key = ["route"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
site = "owner"
[policies.gossip_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
site = "gossip"
[[routes]]
name = "owner"
match = { path_prefix = "/owner" }
upstream = "app"
policies = ["owner_ip"]
[[routes]]
name = "gossip"
match = { path_prefix = "/gossip" }
upstream = "app"
policies = ["gossip_ip"]
TOML
    for i in $(seq 0 $((HOT_CANDIDATES - 1))); do
        cat <<TOML
[[routes]]
name = "hot$i"
match = { path_prefix = "/hot$i" }
upstream = "app"
policies = ["owner_route"]
TOML
    done
}

# start_fleet_node NAME CONFIG-FILE: start_tollgate with the peer secret in the environment.
start_fleet_node() {
    local name="$1" config="$2"
    mkdir -p "$TMP/$name"
    TOLLGATE_PEER_SECRET="$PEER_SECRET" RUST_LOG=warn TOLLGATE_WORKERS="$TOLLGATE_WORKERS" \
        "$TOLLGATE" serve -c "$config" 2>"$TMP/$name/stderr.log" &
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
}

declare -A NODE_PID NODE_PORT NODE_ADMIN
NODE_PORT=([A]=$A_PORT [B]=$B_PORT [C]=$C_PORT)
NODE_ADMIN=([A]=$A_ADMIN [B]=$B_ADMIN [C]=$C_ADMIN)
for node in A B C; do
    peer_var="${node}_PEER"
    fleet_config "$node" "${NODE_PORT[$node]}" "${NODE_ADMIN[$node]}" "${!peer_var}" >"$TMP/fleet-$node.toml"
    TOLLGATE_PEER_SECRET="$PEER_SECRET" "$TOLLGATE" check -c "$TMP/fleet-$node.toml" >/dev/null ||
        die "tollgate rejects $TMP/fleet-$node.toml"
done
for node in A B C; do
    start_fleet_node "fleet-$node" "$TMP/fleet-$node.toml"
    NODE_PID[$node]=$STARTED_PID
done
for node in A B C; do
    wait_ready "http://127.0.0.1:${NODE_PORT[$node]}/gossip" "${NODE_PID[$node]}"
done

# node_metric NODE PATTERN: sum of NODE's metrics whose line starts with PATTERN.
node_metric() {
    curl -fsS --max-time 2 "http://127.0.0.1:${NODE_ADMIN[$1]}/metrics" |
        awk -v p="$2" 'index($0, p) == 1 { s += $NF } END { printf "%.0f", s }'
}
# Every node sees all three live and has had an answer from both others (10 s max), or the
# ring would not be the one the rows assume.
for node in A B C; do
    for _ in $(seq 100); do
        [ "$(node_metric "$node" tollgate_peers_live)" = 3 ] &&
            [ "$(node_metric "$node" tollgate_peer_latency_seconds_count)" -ge 2 ] && break
        sleep 0.1
    done
    [ "$(node_metric "$node" tollgate_peers_live)" = 3 ] || die "fleet node $node does not see 3 live peers"
done

ASK='tollgate_peer_calls_total{op="ask"}'
# The hot key's owner: the first hotN route whose one request on A moves A's ask counter
# (A does not own it), then one request on B tells B (no ask: B owns it) from C.
HOT_ROUTE="" HOT_OWNER=""
for i in $(seq 0 $((HOT_CANDIDATES - 1))); do
    a0=$(node_metric A "$ASK")
    curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$A_PORT/hot$i" || die "GET /hot$i on A failed"
    a1=$(node_metric A "$ASK")
    [ "$a1" -gt "$a0" ] || continue
    b0=$(node_metric B "$ASK")
    curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$B_PORT/hot$i" || die "GET /hot$i on B failed"
    b1=$(node_metric B "$ASK")
    HOT_ROUTE="hot$i"
    if [ "$b1" -gt "$b0" ]; then HOT_OWNER=C; else HOT_OWNER=B; fi
    break
done
[ -n "$HOT_ROUTE" ] || die "A owns every one of the $HOT_CANDIDATES hot routes' keys (or asks are not counted)"
log "hot key: route $HOT_ROUTE, owned by $HOT_OWNER"

declare -A ASKS_PER_REQ PEER_ERRS GOSSIP_PER_S
# measure_fleet NAME ROUTE URL: measure with the pids A B C (proxy CPU: the three together;
# CPU_EACH: each), and on A meanwhile (warm-up included): peer asks per request on ROUTE,
# failed peer calls, gossip pushes per second.
measure_fleet() {
    local name="$1" route="$2" url="$3" c0 r0 g0 e0 t0 c1 r1 g1 e1 t1
    c0=$(node_metric A "$ASK"); r0=$(node_metric A "tollgate_requests_total{route=\"$route\"")
    g0=$(node_metric A 'tollgate_peer_calls_total{op="gossip"}'); e0=$(node_metric A tollgate_peer_errors_total)
    t0=$(date +%s.%N)
    measure "$name" "$url" "${NODE_PID[A]}" "${NODE_PID[B]}" "${NODE_PID[C]}"
    c1=$(node_metric A "$ASK"); r1=$(node_metric A "tollgate_requests_total{route=\"$route\"")
    g1=$(node_metric A 'tollgate_peer_calls_total{op="gossip"}'); e1=$(node_metric A tollgate_peer_errors_total)
    t1=$(date +%s.%N)
    ASKS_PER_REQ[$name]=$(awk -v c=$((c1 - c0)) -v r=$((r1 - r0)) \
        'BEGIN { if (r > 0) printf "%.3f", c / r; else print "n/a" }')
    PEER_ERRS[$name]=$((e1 - e0))
    GOSSIP_PER_S[$name]=$(awk -v g=$((g1 - g0)) -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", g / (b - a) }')
}

# All three with spread.lua, as tollgate-local (the hot row's key ignores the address, but wrk
# then costs the same as in the row it is compared with).
SCRIPT_FILE="$TMP/spread.lua"
measure_fleet tollgate-owner owner "http://127.0.0.1:$A_PORT/owner"
measure_fleet tollgate-owner-hot "$HOT_ROUTE" "http://127.0.0.1:$A_PORT/$HOT_ROUTE"
measure_fleet tollgate-gossip gossip "http://127.0.0.1:$A_PORT/gossip"
SCRIPT_FILE=""

# ---------------------------------------------------------------------------------------------
# Report (stdout, markdown).
# ---------------------------------------------------------------------------------------------
echo "## tollgate load benchmark"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "- nproc: $(nproc)"
echo "- command: \`$COMMAND_LINE\`"
echo "- wrk per target: \`$WRK_CMD\` after a ${WARMUP}s warm-up run (discarded)"
echo "- request: \`GET $BENCH_PATH\` -> \`200 hello\\n\` from an nginx upstream (worker_processes 1)"
echo "- versions: $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'), $(wrk --version 2>&1 | head -1 | awk '{ print "wrk " $2 }'), tollgate $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || echo '+dirty')${SKIP_BUILD:+ (SKIP_BUILD: the binary may be older than this tree)}"
echo
echo "| target | req/s | p50 ms | p99 ms | errors | proxy CPU | req per proxy CPU-s | upstream CPU | wrk CPU | other CPU | upstream conns |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in "${NAMES[@]}"; do
    echo "| $n | ${RPS[$n]} | ${P50[$n]} | ${P99[$n]} | ${ERRS[$n]} | ${CPU[$n]} | ${PER_CPU[$n]} | ${UPCPU[$n]} | ${WRKCPU[$n]} | ${OTHER[$n]} | ${UPCONNS[$n]} |"
done
echo
echo "CPU columns: share of one core used during the measured run ($(( $(nproc) * 100 ))% = every core);"
echo "req per proxy CPU-s: requests answered per second of CPU (user + system, /proc) the proxy processes used;"
echo "other CPU: the machine's user+system time not used by the proxy, the upstream or wrk"
echo "(another build or test suite running meanwhile); softirq time (loopback networking) is in no column."
echo "upstream conns: connections the upstream accepted during the measured run (a proxy that"
echo "reuses its upstream connections opens ~0; wrk itself opens CONNECTIONS for the direct row)."
echo "errors: wrk's connect/read/write/timeout errors plus non-2xx/3xx answers."
if [ -n "$NOISY" ]; then
    echo
    echo "**Warning**: other processes used more than 15% of a core during:$NOISY; those rows are skewed."
fi
echo
echo "| ratio | throughput | p99 |"
echo "| --- | ---: | ---: |"
echo "| tollgate / nginx | $(ratio tollgate nginx RPS) | $(ratio tollgate nginx P99) |"
echo "| tollgate / direct | $(ratio tollgate direct RPS) | $(ratio tollgate direct P99) |"
echo "| nginx / direct | $(ratio nginx direct RPS) | $(ratio nginx direct P99) |"
echo "| tollgate-local / tollgate-nolimit | $(ratio tollgate-local tollgate-nolimit RPS) | $(ratio tollgate-local tollgate-nolimit P99) |"
echo "| tollgate-local / nginx-limit_req | $(ratio tollgate-local nginx-limit_req RPS) | $(ratio tollgate-local nginx-limit_req P99) |"
echo "| tollgate-central / tollgate-local | $(ratio tollgate-central tollgate-local RPS) | $(ratio tollgate-central tollgate-local P99) |"
echo "| tollgate-lease / tollgate-local | $(ratio tollgate-lease tollgate-local RPS) | $(ratio tollgate-lease tollgate-local P99) |"
echo "| tollgate-owner / tollgate-local | $(ratio tollgate-owner tollgate-local RPS) | $(ratio tollgate-owner tollgate-local P99) |"
echo "| tollgate-owner-hot / tollgate-local | $(ratio tollgate-owner-hot tollgate-local RPS) | $(ratio tollgate-owner-hot tollgate-local P99) |"
echo "| tollgate-gossip / tollgate-local | $(ratio tollgate-gossip tollgate-local RPS) | $(ratio tollgate-gossip tollgate-local P99) |"
echo
echo "| efficiency (requests per proxy CPU-second) | tollgate | nginx | tollgate / nginx (goal >= 1.2) |"
echo "| --- | ---: | ---: | ---: |"
echo "| plain proxy: tollgate / nginx | ${PER_CPU[tollgate]:-n/a} | ${PER_CPU[nginx]:-n/a} | $(ratio tollgate nginx PER_CPU) |"
echo "| local limiting: tollgate-local / nginx-limit_req | ${PER_CPU[tollgate-local]:-n/a} | ${PER_CPU[nginx-limit_req]:-n/a} | $(ratio tollgate-local nginx-limit_req PER_CPU) |"
echo
# The ceiling of the efficiency ratio: nginx's whole CPU a request over tollgate's system
# CPU alone, what tollgate / nginx would be if tollgate's user space cost nothing.
ceiling() { # ceiling TOLLGATE NGINX
    awk -v nu="${USER_US[$2]:-0}" -v ns="${SYS_US[$2]:-0}" -v ts="${SYS_US[$1]:-0}" \
        'BEGIN { if (ts > 0) printf "%.2f", (nu + ns) / ts; else print "n/a" }'
}
echo "| proxy CPU µs a request, user + system | tollgate | nginx | ceiling: nginx user+system / tollgate system |"
echo "| --- | ---: | ---: | ---: |"
echo "| plain proxy | ${USER_US[tollgate]:-n/a} + ${SYS_US[tollgate]:-n/a} | ${USER_US[nginx]:-n/a} + ${SYS_US[nginx]:-n/a} | $(ceiling tollgate nginx) |"
echo "| local limiting | ${USER_US[tollgate-local]:-n/a} + ${SYS_US[tollgate-local]:-n/a} | ${USER_US[nginx-limit_req]:-n/a} + ${SYS_US[nginx-limit_req]:-n/a} | $(ceiling tollgate-local nginx-limit_req) |"
echo
echo "| store | value |"
echo "| --- | ---: |"
echo "| store calls per request, tollgate-central (1 000 clients, limit never reached) | ${CALLS_PER_REQ[tollgate-central]:-n/a} |"
echo "| store calls per request, tollgate-abuse (one client hammering one key) | ${CALLS_PER_REQ[tollgate-abuse]:-n/a} |"
echo "| store calls per request, tollgate-lease (1 000 clients on one leased key, lease_max 50) | ${CALLS_PER_REQ[tollgate-lease]:-n/a} |"
echo "| redis-benchmark EVALSHA of the check script, req/s (50 clients) | ${EVALSHA_RPS:-n/a} |"
echo "| tollgate-central req/s / EVALSHA req/s | $(awk -v a="${RPS[tollgate-central]:-0}" -v b="${EVALSHA_RPS:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }') |"

# fleet_cell NAME WHAT: one cell of the fleet table from CPU_EACH (A B C), RPS and ASKS_PER_REQ.
#   a b c: each node's CPU; owner_us: CPU microseconds the owners spent per ask (the hot row:
#   its owner; the spread row: B and C together); a_us: A's CPU microseconds per request.
fleet_cell() {
    local name="$1" what="$2"
    [ -n "${CPU_EACH[$name]:-}" ] || { echo "n/a"; return; }
    awk -v cpu="${CPU_EACH[$name]}" -v rps="${RPS[$name]}" -v apr="${ASKS_PER_REQ[$name]:-0}" \
        -v owner="$HOT_OWNER" -v hot="$([ "$name" = tollgate-owner-hot ] && echo 1)" -v what="$what" 'BEGIN {
        gsub(/%/, "", cpu); split(cpu, c, " ")
        if (what == "a") { print c[1] "%"; exit }
        if (what == "b") { print c[2] "%"; exit }
        if (what == "c") { print c[3] "%"; exit }
        if (what == "a_us") { if (rps > 0) printf "%.1f\n", c[1] / 100 / rps * 1e6; else print "n/a"; exit }
        if (what == "owner_us") {
            o = hot ? (owner == "B" ? c[2] : c[3]) : c[2] + c[3]
            if (rps * apr > 0) printf "%.1f\n", o / 100 / (rps * apr) * 1e6; else print "-"
            exit
        }
    }'
}
echo
echo "| fleet row (wrk -> A; B and C get no traffic) | req/s | asks per request (A) | CPU A | CPU B | CPU C | A CPU us per request | owner CPU us per ask | failed peer calls (A) | gossip pushes/s (A) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in tollgate-owner tollgate-owner-hot tollgate-gossip; do
    [ -n "${RPS[$n]:-}" ] || continue
    label="$n"
    [ "$n" = tollgate-owner-hot ] && label="$n (route $HOT_ROUTE, owner $HOT_OWNER)"
    echo "| $label | ${RPS[$n]} | ${ASKS_PER_REQ[$n]:-n/a} | $(fleet_cell "$n" a) | $(fleet_cell "$n" b) | $(fleet_cell "$n" c) | $(fleet_cell "$n" a_us) | $(fleet_cell "$n" owner_us) | ${PEER_ERRS[$n]:-n/a} | ${GOSSIP_PER_S[$n]:-n/a} |"
done
echo
echo "Fleet rows: the proxy CPU column above is A + B + C. Asks per request: tollgate_peer_calls_total{op=\"ask\"}"
echo "over tollgate_requests_total of the route, both on A (one call per remote key; calls to one owner"
echo "share messages). Owner CPU per ask: the owner's CPU (spread row: B + C) over A's asks per second."
echo "Gossip pushes: A's tollgate_peer_calls_total{op=\"gossip\"} per second (one per peer per gossip_interval)."
echo
echo "Targets: tollgate / nginx throughput >= 0.80 and p99 <= 1.25; tollgate-local >= 0.95 x"
echo "tollgate-nolimit and >= 0.80 x nginx-limit_req; tollgate-central >= 0.60 x tollgate-local with"
echo "1.0 store call per request; tollgate-lease >= 0.90 x tollgate-local with <= 1/k (0.02) store"
echo "calls per request; tollgate-abuse <= 0.1 store calls per request; tollgate-owner >= 0.70 x"
echo "tollgate-local (about 2/3 ask per request: A owns a third of the keys); tollgate-gossip >= 0.95 x"
echo "tollgate-local (no ask). The spread rows (nginx-limit_req, tollgate-nolimit/local/central/lease,"
echo "tollgate-owner/owner-hot/gossip) send spread.lua's X-Forwarded-For, whose"
echo "per-request Lua makes wrk costlier than in the first three rows: compare them with each other."
