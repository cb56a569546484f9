#!/usr/bin/env bash
# Start redis-server on a free loopback port and the three gateways of gw1.toml, gw2.toml
# and gw3.toml on it; stop them all (by pid) when this script exits (Ctrl-C, SIGTERM).
#
#   examples/three-gateways-redis/run.sh
#
# Environment (all optional):
#   TOLLGATE                   the binary (default: target/release/tollgate of this repo)
#   UPSTREAM                   the backend (default: http://127.0.0.1:3000, as in the files)
#   LISTEN_PORTS, ADMIN_PORTS  three ports each (default: "8081 8082 8083", "9911 9912 9913")
#   TOLLGATE_ACCOUNT_HASH_KEY  the account hash secret (default: a random one for this run)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tollgate="${TOLLGATE:-$here/../../target/release/tollgate}"
upstream="${UPSTREAM:-http://127.0.0.1:3000}"
read -r -a listen <<<"${LISTEN_PORTS:-8081 8082 8083}"
read -r -a admin <<<"${ADMIN_PORTS:-9911 9912 9913}"
[ -x "$tollgate" ] || { echo "run.sh: no $tollgate: cargo build --release, or set TOLLGATE" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "run.sh: redis-server not found" >&2; exit 1; }
export TOLLGATE_ACCOUNT_HASH_KEY="${TOLLGATE_ACCOUNT_HASH_KEY:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}"

work="$(mktemp -d)"
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Answers a TCP connection on 127.0.0.1:$1 within about 5 s.
wait_port() {
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# redis-server on a free port: pick one at random, and try another if it is taken.
redis_port=
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 20000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue   # someone listens there
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
  pid=$!
  if wait_port "$port" && kill -0 "$pid" 2>/dev/null; then
    pids+=("$pid"); redis_port=$port; break
  fi
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
done
[ -n "$redis_port" ] || { echo "run.sh: redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1; }
echo "redis-server pid ${pids[0]} on 127.0.0.1:$redis_port"

for i in 0 1 2; do
  n=$((i + 1))
  sed -e "s|redis://127.0.0.1:6379|redis://127.0.0.1:$redis_port|" \
      -e "s|\"127.0.0.1:808$n\"|\"127.0.0.1:${listen[$i]}\"|" \
      -e "s|\"127.0.0.1:991$n\"|\"127.0.0.1:${admin[$i]}\"|" \
      -e "s|\"http://127.0.0.1:3000\"|\"$upstream\"|" \
      "$here/gw$n.toml" >"$work/gw$n.toml"
  "$tollgate" serve -c "$work/gw$n.toml" 2>"$work/gw$n.log" &
  pids+=("$!")
done
for i in 0 1 2; do
  n=$((i + 1))
  wait_port "${admin[$i]}" || { echo "run.sh: gateway $n did not start:" >&2; cat "$work/gw$n.log" >&2; exit 1; }
  echo "gateway $n pid ${pids[$n]} on http://127.0.0.1:${listen[$i]} (admin 127.0.0.1:${admin[$i]}, log $work/gw$n.log)"
done
echo "ready: Ctrl-C stops redis-server and the three gateways"
wait -n "${pids[@]}" || true
echo "run.sh: a process exited; stopping the others" >&2
