#!/usr/bin/env bash
# Lease fleet benchmark: store calls per request of `site = "lease"` on three real gateway
# processes sharing one Redis (issue 13's measurement).
#
#   benches/lease_fleet.sh                      # 5 s warm-up + 20 s measured
#   DURATION=60 RATES=30,20,10 benches/lease_fleet.sh
#
# One redis-server, one nginx upstream (`return 200`), and three `tollgate serve` processes
# A, B, C with the same config but their own `[cluster] node_id` (membership heartbeats every
# HEARTBEAT, the default 1s), one route `/lease` with one GCRA policy keyed by client IP:
# LIMIT/s, burst BURST, `site = "lease"`, `lease_max = LEASE_MAX`, `lease_ttl = LEASE_TTL`
# (`lease_target` left at its default unless LEASE_TARGET is set). An open-loop client
# (asyncio, below) sends `GET /lease` with the same `X-Forwarded-For` (one key for the whole
# fleet, from a trusted loopback proxy) to A, B and C at fixed rates (RATES, 30,20,10 by
# default: 60 % of the limit in all); ARRIVALS=poisson spaces them at random instead.
#
# What reaches Redis is read from Redis itself: MONITOR during the measured run, every
# command a client sent (commands a script runs inside Redis, "[0 lua]", are not calls),
# attributed to its gateway through the client's port (`ss -tnp`) and classified by the
# script's SHA1 (lease.lua, membership.lua, others) or command name. `INFO commandstats`
# (after `CONFIG RESETSTAT` at the start) cross-checks the EVALSHA/EVAL/FCALL total.
#
# Everything listens on free 127.0.0.1 ports chosen at start; every process started here is
# killed by pid on exit, however the script exits. The report (markdown) goes to stdout.
#
# Environment: DURATION (20), WARMUP (5), RATES (30,20,10), LIMIT (100), BURST (20),
# LEASE_MAX (20), LEASE_TTL (500ms), LEASE_TARGET (unset), HEARTBEAT (1s), STORE_TIMEOUT
# (50ms), ARRIVALS (fixed | poisson), FALLBACK (the route's on_store_error: closed; with
# local, N decides and membership beats every HEARTBEAT, else every ten), TOLLGATE_WORKERS
# (2), SKIP_BUILD, KEEP_TMP, TOLLGATE_BIN.
set -euo pipefail

DURATION="${DURATION:-20}"
WARMUP="${WARMUP:-5}"
RATES="${RATES:-30,20,10}"
LIMIT="${LIMIT:-100}"
BURST="${BURST:-20}"
LEASE_MAX="${LEASE_MAX:-20}"
LEASE_TTL="${LEASE_TTL:-500ms}"
LEASE_TARGET="${LEASE_TARGET:-}"
HEARTBEAT="${HEARTBEAT:-1s}"
STORE_TIMEOUT="${STORE_TIMEOUT:-50ms}"
ARRIVALS="${ARRIVALS:-fixed}"
FALLBACK="${FALLBACK:-closed}"
TOLLGATE_WORKERS="${TOLLGATE_WORKERS:-2}"
NGINX="${NGINX:-/usr/sbin/nginx}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMMAND_LINE="DURATION=$DURATION WARMUP=$WARMUP RATES=$RATES LIMIT=$LIMIT BURST=$BURST LEASE_MAX=$LEASE_MAX LEASE_TTL=$LEASE_TTL${LEASE_TARGET:+ LEASE_TARGET=$LEASE_TARGET} HEARTBEAT=$HEARTBEAT ARRIVALS=$ARRIVALS FALLBACK=$FALLBACK benches/lease_fleet.sh"

log() { printf '[lease_fleet.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

APT_UPDATED=""
need() { # need COMMAND-OR-PATH PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    log "installing $2"
    if [ -z "$APT_UPDATED" ]; then apt-get update -qq >&2; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
    command -v "$1" >/dev/null 2>&1 || die "$2 did not provide $1"
}
need "$NGINX" nginx
need curl curl
need python3 python3
need ss iproute2
need redis-server redis-server
need redis-cli redis-tools

if [ -z "${SKIP_BUILD:-}" ]; then
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --quiet)
fi
TOLLGATE="${TOLLGATE_BIN:-$ROOT/target/release/tollgate}"
[ -x "$TOLLGATE" ] || die "$TOLLGATE missing (cargo build --release)"

IFS=, read -r -a RATE <<<"$RATES"
[ "${#RATE[@]}" = 3 ] || die "RATES needs three rates (A,B,C), got $RATES"
NODES=(A B C)

# Every pid started here is killed on exit, whatever the exit.
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-lease-fleet.XXXXXX")"
chmod 755 "$TMP"
PIDS=()
cleanup() {
    local rc=$? pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
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
    python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# wait_http URL PID: until URL answers 200 (10 s max).
wait_http() {
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || die "process $2 for $1 exited; see $TMP"
        curl -fsS --max-time 1 -o /dev/null "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    die "$1 not ready after 10 s"
}

read -r UP_PORT REDIS_PORT PORT_A PORT_B PORT_C <<<"$(free_ports 5)"
PORTS=("$PORT_A" "$PORT_B" "$PORT_C")

mkdir -p "$TMP/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/redis" \
    >"$TMP/redis/log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG || die "redis-server did not start; see $TMP/redis/log"

# The upstream: nginx answering 200 to everything, workers kept as the invoking user.
mkdir -p "$TMP/upstream/tmp"
USER_LINE=""
[ "$(id -u)" = 0 ] && USER_LINE="user root root;"
cat >"$TMP/upstream/nginx.conf" <<EOF
$USER_LINE
daemon off;
worker_processes 1;
pid $TMP/upstream/nginx.pid;
error_log $TMP/upstream/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $TMP/upstream/tmp/body;
    proxy_temp_path $TMP/upstream/tmp/proxy;
    fastcgi_temp_path $TMP/upstream/tmp/fastcgi;
    uwsgi_temp_path $TMP/upstream/tmp/uwsgi;
    scgi_temp_path $TMP/upstream/tmp/scgi;
    server { listen 127.0.0.1:$UP_PORT; location / { return 200 "hello\n"; } }
}
EOF
"$NGINX" -e "$TMP/upstream/error.log" -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" 2>>"$TMP/upstream/error.log" &
UPSTREAM_PID=$!
PIDS+=("$UPSTREAM_PID")
wait_http "http://127.0.0.1:$UP_PORT/" "$UPSTREAM_PID"

# Three gateways: one config each, differing only in the listen port and node_id.
NODE_PIDS=()
for i in 0 1 2; do
    n="${NODES[$i]}"
    cat >"$TMP/$n.toml" <<TOML
[server]
listen = "127.0.0.1:${PORTS[$i]}"
[client_ip]
trusted_proxies = ["127.0.0.1/32"]
[store]
kind = "redis"
urls = ["redis://127.0.0.1:$REDIS_PORT"]
timeout = "$STORE_TIMEOUT"
[cluster]
node_id = "fleet-$n"
expected_nodes = 3
heartbeat = "$HEARTBEAT"
[upstreams.app]
urls = ["http://127.0.0.1:$UP_PORT"]
[policies.leased]
key = ["ip"]
algorithm = "gcra"
limit = $LIMIT
period = "1s"
burst = $BURST
site = "lease"
lease_max = $LEASE_MAX
lease_ttl = "$LEASE_TTL"
${LEASE_TARGET:+lease_target = \"$LEASE_TARGET\"}
[[routes]]
name = "lease"
match = { path_prefix = "/lease" }
upstream = "app"
policies = ["leased"]
on_store_error = "$FALLBACK"
[[routes]]
name = "ready"
match = { path_prefix = "/ready" }
upstream = "app"
TOML
    "$TOLLGATE" check -c "$TMP/$n.toml" >/dev/null || die "tollgate rejects $TMP/$n.toml"
    RUST_LOG=warn TOLLGATE_WORKERS="$TOLLGATE_WORKERS" "$TOLLGATE" serve -c "$TMP/$n.toml" 2>"$TMP/$n.log" &
    NODE_PIDS+=("$!")
    PIDS+=("$!")
done
for i in 0 1 2; do wait_http "http://127.0.0.1:${PORTS[$i]}/ready" "${NODE_PIDS[$i]}"; done

# The client and the Redis observer, in one asyncio loop so their clocks agree: warm-up,
# then CONFIG RESETSTAT + MONITOR for the measured run, then INFO commandstats.
cat >"$TMP/drive.py" <<'PY'
import asyncio, collections, hashlib, json, random, re, subprocess, sys, time

cfg = json.loads(sys.argv[1])
SHAS = {hashlib.sha1(open(f, "rb").read()).hexdigest(): name for name, f in cfg["scripts"].items()}
REQ = b"GET /lease HTTP/1.1\r\nHost: bench\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n"

async def redis_cmd(reader, writer, *args):
    writer.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    line = await reader.readline()
    if line[:1] == b"$":
        data = await reader.readexactly(int(line[1:]) + 2)
        return data[:-2].decode()
    return line.decode().strip()

class Node:
    def __init__(self, name, port, rate, pid):
        self.name, self.port, self.rate, self.pid = name, port, rate, pid
        self.idle, self.status, self.lat = [], collections.Counter(), []

    async def one(self, measured):
        start = time.monotonic()
        try:
            r, w = self.idle.pop() if self.idle else await asyncio.open_connection("127.0.0.1", self.port)
            w.write(REQ)
            status = int((await r.readline()).split()[1])
            length = 0
            while (h := await r.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":")[1])
            await r.readexactly(length)
            self.idle.append((r, w))
        except Exception:
            status = "error"
        if measured():
            self.status[status] += 1
            self.lat.append(time.monotonic() - start)

    async def drive(self, t0, end, measured):
        tasks, t, rng = [], t0, random.Random(self.port)
        while t < end:
            await asyncio.sleep(max(0.0, t - time.monotonic()))
            tasks.append(asyncio.create_task(self.one(lambda s=t: measured(s))))
            t += rng.expovariate(self.rate) if cfg["arrivals"] == "poisson" else 1.0 / self.rate
        await asyncio.gather(*tasks)

def ports_of(pids):
    """Redis client port -> gateway name, from the established connections to Redis."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", "dport", "=", ":%d" % cfg["redis_port"]],
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:\d+.*pid=(\d+)", line)
        if m and int(m.group(2)) in pids:
            found[m.group(1)] = pids[int(m.group(2))]
    return found

async def main():
    nodes = [Node(n["name"], n["port"], n["rate"], n["pid"]) for n in cfg["nodes"]]
    pids = {n.pid: n.name for n in nodes}
    t0 = time.monotonic() + 0.2
    m0, m1 = t0 + cfg["warmup"], t0 + cfg["warmup"] + cfg["duration"]
    in_window = lambda s: m0 <= s < m1
    drivers = asyncio.gather(*(n.drive(t0, m1, in_window) for n in nodes))
    sr, sw = await asyncio.open_connection("127.0.0.1", cfg["redis_port"])
    mr, mw = await asyncio.open_connection("127.0.0.1", cfg["redis_port"])
    await asyncio.sleep(max(0.0, m0 - time.monotonic()))
    owners = ports_of(pids)
    await redis_cmd(sr, sw, b"CONFIG", b"RESETSTAT")
    await redis_cmd(mr, mw, b"MONITOR")
    calls = collections.Counter()  # (node, kind) -> commands
    while time.monotonic() < m1:
        try:
            line = await asyncio.wait_for(mr.readline(), max(0.01, m1 - time.monotonic()))
        except asyncio.TimeoutError:
            break
        m = re.match(rb'^\S+ \[\d+ ([^\]]+)\] "([^"]*)"(?: "([^"]*)")?', line)
        if not m or m.group(1) == b"lua":
            continue  # a command a script ran inside Redis: not a call
        addr, cmd = m.group(1).decode(), m.group(2).decode().lower()
        port = addr.rsplit(":", 1)[-1]
        if port not in owners:
            owners.update(ports_of(pids))
        kind = cmd
        if cmd in ("evalsha", "eval", "fcall"):
            body = (m.group(3) or b"").decode()
            sha = body if cmd == "evalsha" else hashlib.sha1(body.encode()).hexdigest()
            kind = "script:" + SHAS.get(sha, "other")
        calls[(owners.get(port, "?" + port), kind)] += 1
    stats = await redis_cmd(sr, sw, b"INFO", b"commandstats")
    mw.close()
    await drivers
    top = {m.group(1): int(m.group(2)) for m in re.finditer(r"cmdstat_(\w+):calls=(\d+)", stats)}
    json.dump({
        "nodes": [{"name": n.name, "rate": n.rate, "status": {str(k): v for k, v in n.status.items()},
                   "lat": sorted(n.lat)} for n in nodes],
        "calls": [[k[0], k[1], v] for k, v in sorted(calls.items())],
        "commandstats": top,
    }, sys.stdout)

asyncio.run(main())
PY

NODES_JSON=""
for i in 0 1 2; do
    NODES_JSON+="${NODES_JSON:+,}{\"name\":\"${NODES[$i]}\",\"port\":${PORTS[$i]},\"rate\":${RATE[$i]},\"pid\":${NODE_PIDS[$i]}}"
done
CFG="{\"nodes\":[$NODES_JSON],\"redis_port\":$REDIS_PORT,\"warmup\":$WARMUP,\"duration\":$DURATION,\"arrivals\":\"$ARRIVALS\",\"scripts\":{\"lease\":\"$ROOT/crates/tollgate-limit/src/site/lease/lease.lua\",\"membership\":\"$ROOT/crates/tollgate-limit/src/membership/membership.lua\",\"check\":\"$ROOT/crates/tollgate-limit/src/site/central/check.lua\"}}"
log "warm-up ${WARMUP}s, then ${DURATION}s at $RATES req/s to A, B, C ($ARRIVALS arrivals)"
python3 "$TMP/drive.py" "$CFG" >"$TMP/result.json"
for i in 0 1 2; do kill -0 "${NODE_PIDS[$i]}" 2>/dev/null || die "gateway ${NODES[$i]} died; see $TMP/${NODES[$i]}.log"; done

# The report.
echo "## tollgate lease fleet: store calls per request"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), nproc $(nproc), $(redis-server --version | awk '{ print $1, $2, $3 }')"
echo "- command: \`$COMMAND_LINE\`"
echo "- tollgate $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo '+dirty')${TOLLGATE_BIN:+ (TOLLGATE_BIN=$TOLLGATE_BIN)}"
echo "- policy: gcra $LIMIT/s, burst $BURST, site lease, lease_max $LEASE_MAX, lease_ttl $LEASE_TTL, lease_target ${LEASE_TARGET:-default}; [cluster] heartbeat $HEARTBEAT; one key (one X-Forwarded-For) on A, B and C"
echo
python3 - "$TMP/result.json" "$DURATION" <<'PY'
import json, sys
r, dur = json.load(open(sys.argv[1])), float(sys.argv[2])
calls = r["calls"]
def count(node, pred):
    return sum(v for n, k, v in calls if (node is None or n == node) and pred(k))
is_script = lambda k: k.startswith("script:")
rows = [(n["name"], n["rate"], n["status"], n["lat"]) for n in r["nodes"]]
total_status, total_lat = {}, []
for _, _, s, l in rows:
    for k, v in s.items():
        total_status[k] = total_status.get(k, 0) + v
    total_lat += l
rows.append(("total", sum(x[1] for x in rows), total_status, sorted(total_lat)))
print("| node | offered req/s | requests | 429 | other errors | p99 ms | lease calls | heartbeat calls | other commands | script calls / req | all commands / req |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, rate, status, lat in rows:
    node = None if name == "total" else name
    req = sum(status.values())
    bad = sum(v for k, v in status.items() if k not in ("200", "429"))
    lease = count(node, lambda k: k == "script:lease")
    beat = count(node, lambda k: k == "script:membership")
    scripts = count(node, is_script)
    other = count(node, lambda k: True) - lease - beat
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000 if lat else 0
    per = lambda x: "%.3f" % (x / req) if req else "n/a"
    print(f"| {name} | {rate} | {req} | {status.get('429', 0)} | {bad} | {p99:.1f} | {lease} | {beat} | {other} | {per(scripts)} | {per(scripts + other)} |")
print()
stray = [(n, k, v) for n, k, v in calls if n.startswith("?")]
cs = r["commandstats"]
top = sum(cs.get(c, 0) for c in ("evalsha", "eval", "fcall", "eval_ro", "evalsha_ro"))
kinds = sorted({k for _, k, _ in calls})
print("Commands seen by MONITOR during the measured %.0f s, by kind: %s." % (dur, ", ".join(
    "%s %d" % (k, count(None, lambda x, k=k: x == k)) for k in kinds) or "none"))
print("Cross-check: INFO commandstats counts %d EVALSHA/EVAL/FCALL (MONITOR: %d)%s." % (
    top, count(None, is_script), "; connections of no gateway: %s" % stray if stray else ""))
PY
echo
echo "lease calls: EVALSHA/EVAL of lease.lua; heartbeat calls: of membership.lua; other commands:"
echo "everything else a gateway sent (PING, SCRIPT LOAD after NOSCRIPT, other scripts such as"
echo "check.lua's debit). Script calls / req counts lease + heartbeat + other scripts; all"
echo "commands / req counts every command. 429: denied by the lease; other errors: 503 (store"
echo "error, on_store_error = \"closed\"), 5xx, or a failed connection. p99: the client's latency."
