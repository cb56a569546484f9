#!/usr/bin/env bash
# Two tollgate builds and nginx, CPU a request on a core of their own, in alternated rounds.
#
#   benches/pinned_ab.sh OLD_BINARY [NEW_BINARY]   # NEW defaults to target/release/tollgate
#   ROUNDS=10 DURATION=8 benches/pinned_ab.sh /tmp/tollgate-old
#
# Why: load.sh's rows drift by ±10 % and more between identical runs (wrk, the upstream and
# two proxy workers share two cores, and the scheduler decides who waits), too much to see a
# change of a few per cent in real time. Here each proxy runs one worker pinned to core 1,
# wrk and the upstream nginx are pinned to core 0, and the three proxies (nginx
# `proxy_pass`, OLD, NEW) take turns, round after round, so slow drift hits them alike.
# Each row: requests per proxy CPU-second (user + system ticks of the proxy in /proc),
# mean ± standard deviation over the rounds, and its user and system µs a request. The
# figure that matters is NEW / OLD and each / nginx, from the same run.
#
# Traffic: `GET /bench` answered `200 hello` by the upstream, wrk -t2 -c$CONNECTIONS for
# DURATION s after a 1 s warm-up, every round. Binds free 127.0.0.1 ports; kills what it
# started by pid. Needs wrk, nginx and taskset (util-linux); installs the first two.
set -euo pipefail

OLD="${1:?usage: benches/pinned_ab.sh OLD_BINARY [NEW_BINARY]}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NEW="${2:-$ROOT/target/release/tollgate}"
ROUNDS="${ROUNDS:-6}"
DURATION="${DURATION:-5}"
CONNECTIONS="${CONNECTIONS:-32}"
NGINX="${NGINX:-/usr/sbin/nginx}"
log() { printf '[pinned_ab.sh] %s\n' "$*" >&2; }
need() { # need COMMAND-OR-PATH PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need wrk wrk
need "$NGINX" nginx
need taskset util-linux
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { log "error: $b is not an executable"; exit 1; }; done

TMP="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

read -r UP NG OP NP <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')"

# start_nginx NAME CPU SERVER-BLOCK: nginx, one worker, pinned; its pid in STARTED.
start_nginx() {
    local dir="$TMP/$1" user_line=""
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && user_line="user root root;"
    cat >"$dir/nginx.conf" <<EOF
$user_line
daemon off;
master_process on;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    keepalive_requests 1000000;
    $3
}
EOF
    taskset -c "$2" "$NGINX" -p "$dir" -c "$dir/nginx.conf" 2>>"$dir/error.log" &
    STARTED=$!
    PIDS+=("$STARTED")
}

start_tollgate() { # start_tollgate NAME BINARY PORT: pid in STARTED
    cat >"$TMP/$1.toml" <<EOF
[server]
listen = "127.0.0.1:$3"
[client_ip]
trusted_proxies = []
[upstreams.app]
urls = ["http://127.0.0.1:$UP"]
[[routes]]
name = "default"
match = { path_prefix = "/" }
upstream = "app"
EOF
    RUST_LOG=warn TOLLGATE_WORKERS=1 taskset -c 1 "$2" serve -c "$TMP/$1.toml" 2>"$TMP/$1.log" &
    STARTED=$!
    PIDS+=("$STARTED")
}

start_nginx upstream 0 "server { listen 127.0.0.1:$UP; location / { return 200 \"hello\\n\"; } }"
start_nginx nginx 1 "upstream app { server 127.0.0.1:$UP; keepalive 64; }
    server { listen 127.0.0.1:$NG; location / { proxy_pass http://app;
        proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
declare -A PID PORT
PID[nginx]=$STARTED
PORT[nginx]=$NG
start_tollgate old "$OLD" "$OP"
PID[old]=$STARTED
PORT[old]=$OP
start_tollgate new "$NEW" "$NP"
PID[new]=$STARTED
PORT[new]=$NP

for name in nginx old new; do
    for _ in $(seq 50); do
        [ "$(curl -fsS --max-time 1 "http://127.0.0.1:${PORT[$name]}/bench" 2>/dev/null)" = hello ] && break
        sleep 0.1
    done
done

# ticks PID: "user system" clock ticks of PID and its children (nginx's worker).
ticks() {
    local u=0 s=0 p line
    for p in "$1" $(pgrep -P "$1" || true); do
        line=$(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$p/stat")
        u=$((u + ${line% *})); s=$((s + ${line#* }))
    done
    echo "$u $s"
}

hz=$(getconf CLK_TCK)
rows="$TMP/rows"
for round in $(seq "$ROUNDS"); do
    for name in nginx old new; do
        url="http://127.0.0.1:${PORT[$name]}/bench"
        taskset -c 0 wrk -t2 -c"$CONNECTIONS" -d1s "$url" >/dev/null
        before=$(ticks "${PID[$name]}")
        n=$(taskset -c 0 wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" "$url" | awk '/requests in/ { print $1 }')
        after=$(ticks "${PID[$name]}")
        echo "$name $n $before $after" >>"$rows"
    done
    log "round $round of $ROUNDS done"
done

echo "| proxy | requests per proxy CPU-second (mean ± sd) | user µs a request | system µs a request |"
echo "| --- | ---: | ---: | ---: |"
awk -v hz="$hz" '
    { n = $2; u = ($5 - $3) / hz; s = ($6 - $4) / hz
      r = n / (u + s); k = $1; c[k]++; m[k] += r; q[k] += r * r; us[k] += u * 1e6 / n; ss[k] += s * 1e6 / n }
    END {
        split("nginx old new", order, " ")
        for (i = 1; i <= 3; i++) {
            k = order[i]; mean[k] = m[k] / c[k]; sd = sqrt(q[k] / c[k] - mean[k] ^ 2)
            printf "| %s | %.0f ± %.0f | %.2f | %.2f |\n", k, mean[k], sd, us[k] / c[k], ss[k] / c[k]
        }
        printf "\nnew / old: %.3f; old / nginx: %.3f; new / nginx: %.3f (%d rounds)\n",
            mean["new"] / mean["old"], mean["old"] / mean["nginx"], mean["new"] / mean["nginx"], c["new"]
    }' "$rows"
echo
echo "old: $OLD"
echo "new: $NEW"
