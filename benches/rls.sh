#!/usr/bin/env bash
# ShouldRateLimit decisions per server CPU-second: tollgate as Envoy's rate limit service
# (local and central), beside Limitador when LIMITADOR_BIN is given, in the same run (issue 49).
#
#   benches/rls.sh [TOLLGATE_BIN]            # default: target/release/tollgate
#   LIMITADOR_BIN=/path/limitador-server N=400000 benches/rls.sh target/release/tollgate
#   RLS_STUB=1 N=20000 benches/rls.sh        # the plumbing alone, against benches/rls_stub.py
#
# The load is h2load (nghttp2-client) with one prepared gRPC body, as Envoy sends it: a
# length-prefixed protobuf RateLimitRequest (domain "bench"), made with the protos Envoy
# publishes (PyPI xds-protos): one descriptor (req.method=GET, user_id=u1), and a variant of
# ten (user_id u1..u10). Every limit is 1e9 a second, never reached. Per row:
#   h2load -n $N -c $CONNS -m $STREAMS --header 'content-type: application/grpc'
#          --header 'te: trailers' -d BODY http://127.0.0.1:PORT/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
# after a warm-up of N/10. The server's CPU is read from /proc/PID/stat (utime + stime)
# before and after, so a figure is calls per second of the server's own CPU, whatever else
# the machine runs; req/s (wall) is printed too, but moves with the machine.
#
# Rows: tollgate local (site = "local"), tollgate central (site = "central", on a
# redis-server this script starts on a free port), Limitador (memory storage, its own limits
# file with the same numbers; not run where this was written, which had no Limitador build)
# when LIMITADOR_BIN is set; each with one and ten descriptors.
# Ratios: tollgate local / Limitador, central / local. Goals (issue 49): local ≥ 1.5×
# Limitador per CPU-second, never below 1.0×; central ≥ 0.8× local.
#
# h2load counts HTTP/2 responses, and a gRPC error is an HTTP 200 with a grpc-status trailer,
# so the script checks the answers another way: before each server's rows, one call with
# grpcio must answer OK with one status per descriptor; after each row, tollgate's own
# tollgate_decisions_total (on its admin listener) must have grown by calls × descriptors
# (printed as "counted"). RLS_STUB=1 runs benches/rls_stub.py in tollgate's place (it counts
# the calls it parsed): what proves the body, the flags and the CPU reading on a build
# without the service.
#
# TOLLGATE_TOML names a config template to run instead of the built-in one below; its
# @RLS_LISTEN@, @ADMIN_LISTEN@, @RLS_CONFIG@, @SITE@ and @REDIS_URL@ are filled in per row.
#
# Installs h2load (nghttp2-client) and redis-server with apt-get when missing, and the
# xds-protos Python (target/venv/xds, as scripts/test.sh makes it; TOLLGATE_XDS_PYTHON names
# another). Binds free 127.0.0.1 ports; kills what it started, by pid.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/tollgate}"
N="${N:-200000}"
CONNS="${CONNS:-32}"
STREAMS="${STREAMS:-10}"
PY="${TOLLGATE_XDS_PYTHON:-$ROOT/target/venv/xds/bin/python}"
log() { printf '[rls.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need h2load nghttp2-client
need redis-server redis-server
need curl curl
"$PY" -c 'import grpc, envoy.service.ratelimit.v3.rls_pb2_grpc' 2>/dev/null || {
    log "installing xds-protos and grpcio in $ROOT/target/venv/xds"
    python3 -m venv "$ROOT/target/venv/xds"
    "$ROOT/target/venv/xds/bin/pip" install --quiet xds-protos grpcio pyyaml
    PY="$ROOT/target/venv/xds/bin/python"
}
if [ -z "${RLS_STUB:-}" ]; then
    [ -x "$BIN" ] || die "$BIN is not an executable (cargo build --release, or pass the binary)"
fi
[ -z "${LIMITADOR_BIN:-}" ] || [ -x "$LIMITADOR_BIN" ] || die "LIMITADOR_BIN=$LIMITADOR_BIN is not an executable"

TMP="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -n "${KEEP_TMP:-}" ] && log "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# ticks PID: the process's utime + stime, in clock ticks.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ="$(getconf CLK_TCK)"
wait_port() { # wait_port PORT PID LOG
    for _ in $(seq 200); do
        if ! kill -0 "$2" 2>/dev/null; then
            log "pid $2 exited before it listened on 127.0.0.1:$1; its output:"
            tail -5 "$3" >&2
            exit 1
        fi
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    die "nothing listens on 127.0.0.1:$1"
}

# The bodies: gRPC's 5-byte prefix (not compressed, big-endian length) and the message.
for n in 1 10; do
    "$PY" -c '
import struct, sys
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2 as rl
from envoy.service.ratelimit.v3 import rls_pb2
n = int(sys.argv[1])
entry = rl.RateLimitDescriptor.Entry
request = rls_pb2.RateLimitRequest(domain="bench", hits_addend=1, descriptors=[
    rl.RateLimitDescriptor(entries=[entry(key="req.method", value="GET"), entry(key="user_id", value="u%d" % (i + 1))])
    for i in range(n)])
b = request.SerializeToString()
sys.stdout.buffer.write(b"\0" + struct.pack(">I", len(b)) + b)' "$n" >"$TMP/body$n.bin"
done

# tollgate's rules: envoyproxy/ratelimit's YAML.
mkdir -p "$TMP/rls"
cat >"$TMP/rls/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: req.method
    value: GET
    descriptors:
      - key: user_id
        rate_limit:
          unit: second
          requests_per_unit: 1000000000
EOF
# Limitador's: the same limit on each descriptor of the request (its conditions name a
# descriptor by its place, so the one- and ten-descriptor rows get files of their own, lest a
# condition name a descriptor the request lacks).
for n in 1 10; do
    for i in $(seq 0 $((n - 1))); do
        cat <<EOF
- namespace: bench
  max_value: 1000000000
  seconds: 1
  conditions:
    - "descriptors[$i]['req.method'] == 'GET'"
  variables:
    - "descriptors[$i]['user_id']"
EOF
    done >"$TMP/limitador$n.yaml"
done

TEMPLATE="$TMP/template.toml"
if [ -n "${TOLLGATE_TOML:-}" ]; then
    cp "$TOLLGATE_TOML" "$TEMPLATE"
else
    cat >"$TEMPLATE" <<'EOF'
[server]
admin_listen = "@ADMIN_LISTEN@"

[store]
kind = "redis"
urls = ["@REDIS_URL@"]

[rls]
listen = "@RLS_LISTEN@"
config = "@RLS_CONFIG@"
site = "@SITE@"
EOF
fi

# check_one PORT DESCRIPTORS: one call with grpcio answers OK, one status per descriptor.
check_one() {
    "$PY" - "$1" "$2" "$TMP/body$2.bin" <<'EOF'
import sys, grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
port, n, body = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read()[5:]
stub = rls_pb2_grpc.RateLimitServiceStub(grpc.insecure_channel("127.0.0.1:" + port))
r = stub.ShouldRateLimit(rls_pb2.RateLimitRequest.FromString(body), timeout=5)
ok = rls_pb2.RateLimitResponse.OK
if r.overall_code != ok or len(r.statuses) != n or any(s.code != ok for s in r.statuses):
    sys.exit("the server did not answer OK to the bench's request: %s" % r)
EOF
}

# decisions ADMIN: the sum of tollgate_decisions_total's samples (0 without an admin port).
decisions() {
    [ -n "$1" ] || { echo 0; return; }
    curl -sf "http://$1/metrics" | awk '/^tollgate_decisions_total\{/ { s += $NF } END { printf "%d\n", s }'
}

ROWS=()
# run_row NAME PID PORT DESCRIPTORS ADMIN: one measured h2load run; appends a row.
run_row() {
    local name=$1 pid=$2 port=$3 n=$4 admin=$5
    local url="http://127.0.0.1:$port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    local flags=(-c "$CONNS" -m "$STREAMS" --header 'content-type: application/grpc' --header 'te: trailers' -d "$TMP/body$n.bin")
    h2load -n $((N / 10)) "${flags[@]}" "$url" >/dev/null
    local d0 t0 t1 out
    d0=$(decisions "$admin")
    t0=$(ticks "$pid")
    out=$(h2load -n "$N" "${flags[@]}" "$url")
    t1=$(ticks "$pid")
    echo "$out" >"$TMP/h2load-$name-$n.txt"
    local ok rps counted cpu
    ok=$(echo "$out" | awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^succeeded/) print $i }')
    rps=$(echo "$out" | awk '/^finished in/ { gsub(",", ""); print $4 }')
    [ "$ok" = "$N" ] || log "warning: $name, $n descriptors: $ok of $N calls succeeded (h2load: $TMP/h2load-$name-$n.txt, KEEP_TMP=1 keeps it)"
    counted=-
    if [ -n "$admin" ]; then
        counted=$(($(decisions "$admin") - d0))
        [ "$counted" -ge $((ok * n)) ] || log "warning: $name, $n descriptors: tollgate counted $counted decisions for $ok calls of $n descriptors"
    fi
    cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')
    ROWS+=("$name|$n|$ok|$rps|$cpu|$counted")
}

start_tollgate() { # start_tollgate SITE REDIS_URL: sets SPID SPORT SADMIN
    SPORT=$(free_port)
    SADMIN=127.0.0.1:$(free_port)
    sed -e "s|@RLS_LISTEN@|127.0.0.1:$SPORT|" -e "s|@ADMIN_LISTEN@|$SADMIN|" -e "s|@RLS_CONFIG@|$TMP/rls|" \
        -e "s|@SITE@|$1|" -e "s|@REDIS_URL@|$2|" "$TEMPLATE" >"$TMP/tollgate-$1.toml"
    RUST_LOG=warn "$BIN" serve -c "$TMP/tollgate-$1.toml" >"$TMP/tollgate-$1.log" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    wait_port "$SPORT" "$SPID" "$TMP/tollgate-$1.log"
}
stop() { kill "$1"; wait "$1" 2>/dev/null || true; }

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
PIDS+=("$!")
wait_port "$REDIS_PORT" "$!" "$TMP/redis.log"

if [ -n "${RLS_STUB:-}" ]; then
    SPORT=$(free_port)
    "$PY" "$ROOT/benches/rls_stub.py" "$SPORT" "$TMP/stub.count" >"$TMP/stub.log" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    wait_port "$SPORT" "$SPID" "$TMP/stub.log"
    for n in 1 10; do check_one "$SPORT" "$n"; run_row stub "$SPID" "$SPORT" "$n" ""; done
    stop "$SPID"
    read -r calls descs <"$TMP/stub.count"
    # Warm-ups (N/10 each), the two measured runs and the two grpcio checks.
    want_calls=$((2 * (N + N / 10) + 2))
    want_descs=$((N + N / 10 + 1 + 10 * (N + N / 10 + 1)))
    log "the stub parsed $calls calls and $descs descriptors (expected $want_calls and $want_descs)"
    [ "$calls" = "$want_calls" ] && [ "$descs" = "$want_descs" ] || die "the stub did not parse every call h2load sent"
else
    for site in local central; do
        start_tollgate "$site" "redis://127.0.0.1:$REDIS_PORT"
        for n in 1 10; do check_one "$SPORT" "$n"; run_row "tollgate-$site" "$SPID" "$SPORT" "$n" "$SADMIN"; done
        stop "$SPID"
    done
fi
if [ -n "${LIMITADOR_BIN:-}" ]; then
    for n in 1 10; do
        SPORT=$(free_port)
        RUST_LOG=warn "$LIMITADOR_BIN" --rls-ip 127.0.0.1 --rls-port "$SPORT" --http-ip 127.0.0.1 \
            --http-port "$(free_port)" "$TMP/limitador$n.yaml" memory >"$TMP/limitador$n.log" 2>&1 &
        SPID=$!
        PIDS+=("$SPID")
        wait_port "$SPORT" "$SPID" "$TMP/limitador$n.log"
        check_one "$SPORT" "$n"
        run_row limitador "$SPID" "$SPORT" "$n" ""
        stop "$SPID"
    done
fi

echo "## benches/rls.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"
echo
echo "h2load -n $N -c $CONNS -m $STREAMS, one prepared RateLimitRequest; server CPU from /proc/PID/stat"
echo
echo "| server | descriptors | calls ok | req/s (wall) | server CPU s | calls per CPU-s | descriptors per CPU-s | counted decisions |"
echo "|---|---|---|---|---|---|---|---|"
declare -A PER_CPU
for row in "${ROWS[@]}"; do
    IFS='|' read -r name n ok rps cpu counted <<<"$row"
    per=$(awk -v ok="$ok" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", ok / c; else print "-" }')
    perd=$(awk -v ok="$ok" -v c="$cpu" -v n="$n" 'BEGIN { if (c > 0) printf "%.0f", ok * n / c; else print "-" }')
    PER_CPU["$name/$n"]=$per
    echo "| $name | $n | $ok | $rps | $cpu | $per | $perd | $counted |"
done
echo
ratio() { awk -v a="${PER_CPU[$1]:-}" -v b="${PER_CPU[$2]:-}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }'; }
for n in 1 10; do
    [ -z "${PER_CPU[tollgate-local/$n]:-}" ] && continue
    echo "- $n descriptor(s): central / local $(ratio "tollgate-central/$n" "tollgate-local/$n")×" \
        "(goal ≥ 0.8)$([ -n "${LIMITADOR_BIN:-}" ] && echo "; local / Limitador $(ratio "tollgate-local/$n" "limitador/$n")× (goal ≥ 1.5)")"
done
