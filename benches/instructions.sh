#!/usr/bin/env bash
# Instructions per request: two tollgate builds side by side, counted by valgrind's callgrind.
#
#   benches/instructions.sh OLD_BINARY [NEW_BINARY]     # NEW defaults to target/release/tollgate
#
# Why: on these shared 2-core machines req/s drifts by ±10 % between identical runs (another
# build, wrk and the upstream share the cores), too much to see a 3 % change on the hot path.
# callgrind counts the user-space instructions the gateway executes: repeatable for the same
# binary and inputs, whatever else the machine is doing. Kernel time (sockets, syscalls) is
# not counted, so a change of X % here is a smaller share of the whole CPU per request.
#
# Rows (one worker thread, wrk -t1 -c8 -d8s once it listens, through an nginx upstream
# answering `200 hello`):
#   plain   GET /bench, a route without policies: the proxy path (canonical request, route,
#           forward, both bodies)
#   local   GET /local, one local GCRA keyed by client IP whose limit is never reached: what
#           a policy decided in process costs (its check, its RateLimit headers)
#   abuse   GET /abuse, a local GCRA limited to 100/s: almost every answer is a 429 (the
#           deny path: a flood of 429s from one key)
#   three   GET /three with `X-Api-Key: bench`, three local GCRA policies never reached, keyed
#           by client IP, by the account (`[account] header`) and by the route: what a
#           route's usual handful of policies costs (its own config, gw3.toml: `[account]`
#           would make every other row read the account header too)
#   central GET /central, a GCRA keyed by client IP with site = "central" (a Redis started
#           here), X-Forwarded-For spread over 1 000 clients, limit never reached: what a
#           central check costs the gateway (batches form from wrk's 8 connections)
# and "idle": the process started and stopped with no traffic, subtracted from both rows, so
#   per request = (instructions(row) - instructions(idle)) / requests(row), each run counted
#   less the clock calibration's spin at start (see `run`).
#
# Last, the peer: nginx proxy_pass (one process) on the plain row's load, counted the same
# way, and new plain / nginx.
#
# KEEP_PROFILES=DIR keeps each run's callgrind file as DIR/{old,new}.{idle,plain,local,abuse,central,three}.cg
# and DIR/nginx.{idle,load}.cg
# (for `callgrind_annotate`, or benches/profile_table.py's top-ten table).
#
# Installs valgrind, wrk, nginx and redis-server with apt-get when missing; binds free
# 127.0.0.1 ports; kills what it started by pid; takes about 5 minutes.
set -euo pipefail

OLD="${1:?usage: benches/instructions.sh OLD_BINARY [NEW_BINARY]}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NEW="${2:-$ROOT/target/release/tollgate}"
NGINX="${NGINX:-/usr/sbin/nginx}"
log() { printf '[instructions.sh] %s\n' "$*" >&2; }
need() { # need COMMAND-OR-PATH PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need valgrind valgrind
need wrk wrk
need "$NGINX" nginx
need redis-server redis-server
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { log "error: $b is not an executable"; exit 1; }; done

TMP="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

read -r UP GW RP NP <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')"

cat >"$TMP/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/error.log;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$UP; location / { return 200 "hello\n"; } } }
EOF
cat >"$TMP/gw.toml" <<EOF
[server]
listen = "127.0.0.1:$GW"
[client_ip]
trusted_proxies = ["127.0.0.1/32"]
[store]
kind = "redis"
urls = ["redis://127.0.0.1:$RP"]
timeout = "1s"
[upstreams.app]
urls = ["http://127.0.0.1:$UP"]
[policies.local_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
[policies.abuse_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100
period = "1s"
[policies.central_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
site = "central"
[[routes]]
name = "central"
match = { path_prefix = "/central" }
upstream = "app"
policies = ["central_ip"]
[[routes]]
name = "local"
match = { path_prefix = "/local" }
upstream = "app"
policies = ["local_ip"]
[[routes]]
name = "abuse"
match = { path_prefix = "/abuse" }
upstream = "app"
policies = ["abuse_ip"]
[[routes]]
name = "plain"
upstream = "app"
EOF
# The three row's gateway: the same, with an account header and a route of three policies.
{
    cat "$TMP/gw.toml"
    cat <<'EOF'
[account]
header = "x-api-key"
[policies.three_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
[policies.three_account]
key = ["account"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
[policies.three_route]
key = ["route"]
algorithm = "gcra"
limit = 100000000
period = "1s"
burst = 1000000
[[routes]]
name = "three"
match = { path_prefix = "/three" }
upstream = "app"
policies = ["three_ip", "three_account", "three_route"]
EOF
} >"$TMP/gw3.toml"
"$NGINX" -p "$TMP" -c "$TMP/nginx.conf" & PIDS+=($!)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
    >"$TMP/redis.log" 2>&1 & PIDS+=($!)
# The central row's clients: one of 1 000 addresses a request, as a trusted proxy reports.
cat >"$TMP/spread.lua" <<'LUA'
local ips = {}
for i = 0, 999 do ips[i + 1] = string.format("10.%d.%d.%d", i % 7, math.floor(i / 7) % 256, i % 251) end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ips[(n % 1000) + 1] })
end
LUA

# listening PORT: waits until 127.0.0.1:PORT accepts (at most 120 s), then 2 s more for the
# process to settle. A fixed wait was not enough on a loaded host: valgrind's start of the
# gateway took over 4 s at a load of 7 on 2 cores, and every row measured a refused port.
listening() {
    local i
    for i in $(seq 240); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && { sleep 2; return 0; }
        sleep 0.5
    done
    log "error: nothing listens on 127.0.0.1:$1"
    return 1
}

# run BINARY PATH-or-idle NAME: prints "REQUESTS INSTRUCTIONS" (NAME: the kept profile's).
run() {
    local out="$TMP/cg.out" n=0 pid
    local config="$TMP/gw.toml"
    [ "$2" = /three ] && config="$TMP/gw3.toml"
    RUST_LOG=warn TOLLGATE_WORKERS=1 valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$1" serve -c "$config" 2>/dev/null & pid=$!
    PIDS+=("$pid")
    listening "$GW"
    if [ "$2" = idle ]; then
        sleep 8
    else
        local script=()
        [ "$2" = /central ] && script=(-s "$TMP/spread.lua")
        [ "$2" = /three ] && script=(-H "X-Api-Key: bench")
        n=$(wrk -t1 -c8 -d8s "${script[@]}" "http://127.0.0.1:$GW$2" | awk '/requests in/ { print $1 }')
    fi
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
    [ -n "${KEEP_PROFILES:-}" ] && mkdir -p "$KEEP_PROFILES" && cp "$out" "$KEEP_PROFILES/$3.cg"
    # Less the clock's calibration at start (quanta's): it spins for a stretch of wall time,
    # so under valgrind on a loaded host its count varied from 1.2 to 5.9 million between
    # runs of the same binary, ±600 instructions a request of 5 000 requests.
    local total calibration
    total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
    calibration=$(callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null |
        awk '!found && /quanta::Calibration::calibrate / { gsub(",", "", $1); print $1; found = 1 }')
    echo "$n $(( total - ${calibration:-0} ))"
}

declare -A PER
for which in old new; do
    bin="$OLD"; [ "$which" = new ] && bin="$NEW"
    log "$which: $bin"
    read -r _ idle <<<"$(run "$bin" idle "$which.idle")"
    for row in plain local abuse central three; do
        path=/bench; [ "$row" = local ] && path=/local
        [ "$row" = abuse ] && path=/abuse; [ "$row" = central ] && path=/central
        [ "$row" = three ] && path=/three
        read -r n total <<<"$(run "$bin" "$path" "$which.$row")"
        PER[$which.$row]=$(( (total - idle) / n ))
        log "$which $row: $n requests, $total instructions ($idle idle)"
    done
done

# The peer, counted the same way: nginx proxy_pass (one process, keep-alive upstream, as
# load.sh's nginx row) on the plain row's load. What a request costs it in user space is
# the yardstick for the per-core goal: kernel time a request is level between the two.
cat >"$TMP/proxy.conf" <<EOF
master_process off;
daemon off;
worker_processes 1;
pid $TMP/proxy.pid;
error_log $TMP/proxy-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    upstream app { server 127.0.0.1:$UP; keepalive 64; }
    server {
        listen 127.0.0.1:$NP;
        location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
EOF
# nginx_run idle|load: prints "REQUESTS INSTRUCTIONS".
nginx_run() {
    local out="$TMP/cg-nginx.out" n=1 pid
    valgrind --tool=callgrind --callgrind-out-file="$out" "$NGINX" -p "$TMP" -c "$TMP/proxy.conf" \
        2>/dev/null & pid=$!
    PIDS+=("$pid")
    listening "$NP"
    if [ "$1" = idle ]; then
        sleep 8
    else
        n=$(wrk -t1 -c8 -d8s "http://127.0.0.1:$NP/bench" | awk '/requests in/ { print $1 }')
    fi
    kill -QUIT "$pid"; wait "$pid" 2>/dev/null || true
    [ -n "${KEEP_PROFILES:-}" ] && cp "$out" "$KEEP_PROFILES/nginx.$1.cg"
    echo "$n $(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')"
}
read -r _ nginx_idle <<<"$(nginx_run idle)"
read -r nginx_n nginx_total <<<"$(nginx_run load)"
NGINX_PER=$(( (nginx_total - nginx_idle) / nginx_n ))
log "nginx proxy_pass: $nginx_n requests, $nginx_total instructions ($nginx_idle idle)"

echo "| row | old instructions/request | new instructions/request | new / old |"
echo "| --- | ---: | ---: | ---: |"
for row in plain local abuse central three; do
    o=${PER[old.$row]} n=${PER[new.$row]}
    echo "| $row | $o | $n | $(awk -v a="$n" -v b="$o" 'BEGIN { printf "%.3f", a / b }') |"
done
echo
echo "nginx proxy_pass, the plain row's load: $NGINX_PER instructions a request;" \
    "new plain / nginx: $(awk -v a="${PER[new.plain]}" -v b="$NGINX_PER" 'BEGIN { printf "%.2f", a / b }')"
echo
echo "old: $OLD"
echo "new: $NEW"
