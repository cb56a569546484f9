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
# Rows (one worker thread, wrk -t1 -c8 -d8s after a 4 s start, through an nginx upstream
# answering `200 hello`):
#   plain   GET /bench, a route without policies: the proxy path (canonical request, route,
#           forward, both bodies)
#   abuse   GET /abuse, a local GCRA limited to 100/s: almost every answer is a 429
# and "idle": the process started and stopped with no traffic, subtracted from both rows, so
#   per request = (instructions(row) - instructions(idle)) / requests(row).
#
# Installs valgrind, wrk and nginx with apt-get when missing; binds free 127.0.0.1 ports;
# kills what it started by pid; takes about 2 minutes.
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
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { log "error: $b is not an executable"; exit 1; }; done

TMP="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

read -r UP GW <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
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
[upstreams.app]
urls = ["http://127.0.0.1:$UP"]
[policies.abuse_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100
period = "1s"
[[routes]]
name = "abuse"
match = { path_prefix = "/abuse" }
upstream = "app"
policies = ["abuse_ip"]
[[routes]]
name = "plain"
upstream = "app"
EOF
"$NGINX" -p "$TMP" -c "$TMP/nginx.conf" & PIDS+=($!)

# run BINARY PATH-or-idle: prints "REQUESTS INSTRUCTIONS".
run() {
    local out="$TMP/cg.out" n=0 pid
    RUST_LOG=warn TOLLGATE_WORKERS=1 valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$1" serve -c "$TMP/gw.toml" 2>/dev/null & pid=$!
    PIDS+=("$pid")
    sleep 4
    if [ "$2" = idle ]; then
        sleep 8
    else
        n=$(wrk -t1 -c8 -d8s "http://127.0.0.1:$GW$2" | awk '/requests in/ { print $1 }')
    fi
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
    echo "$n $(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')"
}

declare -A PER
for which in old new; do
    bin="$OLD"; [ "$which" = new ] && bin="$NEW"
    log "$which: $bin"
    read -r _ idle <<<"$(run "$bin" idle)"
    for row in plain abuse; do
        path=/bench; [ "$row" = abuse ] && path=/abuse
        read -r n total <<<"$(run "$bin" "$path")"
        PER[$which.$row]=$(( (total - idle) / n ))
        log "$which $row: $n requests, $total instructions ($idle idle)"
    done
done

echo "| row | old instructions/request | new instructions/request | new / old |"
echo "| --- | ---: | ---: | ---: |"
for row in plain abuse; do
    o=${PER[old.$row]} n=${PER[new.$row]}
    echo "| $row | $o | $n | $(awk -v a="$n" -v b="$o" 'BEGIN { printf "%.3f", a / b }') |"
done
echo
echo "old: $OLD"
echo "new: $NEW"
