#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine with only the Rust toolchain.
# Installs what the tests need, then runs every test (unit, integration, property, doc).
set -euo pipefail
cd "$(dirname "$0")/.."

need() { # need BINARY DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "test.sh: installing $2 (for $1)" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$2" >/dev/null
  command -v "$1" >/dev/null 2>&1 || { echo "test.sh: $1 is still missing after installing $2" >&2; exit 1; }
}

command -v cargo >/dev/null || { echo "test.sh: cargo not found: install the Rust toolchain (rustup)" >&2; exit 1; }
need kill procps   # the SIGTERM test signals the gateway process
need redis-server redis-server
need redis-cli redis-tools
need chromium chromium   # the dashboard tests' headless browser (tests/admin/dashboard.rs)
need python3 python3   # the differential tests' real Python readers (tests/common/readers.py)
need promtool prometheus   # tests/admin/metrics_lint.rs: /metrics through Prometheus' own linter
need openssl openssl   # tests/proxy/upstream_pin.rs: upstream certificates made as the issue made them
python3 -c 'import jwt' 2>/dev/null || {
  echo "test.sh: installing PyJWT (the token differential test's Python reader)" >&2
  python3 -m pip install --quiet pyjwt 2>/dev/null || python3 -m pip install --quiet --break-system-packages pyjwt
  python3 -c 'import jwt' || { echo "test.sh: PyJWT is still missing after pip install" >&2; exit 1; }
}

python3 -c 'import werkzeug, multipart' 2>/dev/null || {
  echo "test.sh: installing Werkzeug and multipart (tests/common/readers.py: the body differential test's readers)" >&2
  python3 -m pip install --quiet werkzeug multipart 2>/dev/null || python3 -m pip install --quiet --break-system-packages werkzeug multipart
  python3 -c 'import werkzeug, multipart' || { echo "test.sh: Werkzeug or multipart is still missing after pip install" >&2; exit 1; }
}

python3 -c 'import grpc, opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc' 2>/dev/null || {
  echo "test.sh: installing grpcio and opentelemetry-proto (tests/common/otlp_receiver.py: the OTLP receiver of the tracing tests)" >&2
  python3 -m pip install --quiet grpcio opentelemetry-proto 2>/dev/null || python3 -m pip install --quiet --break-system-packages grpcio opentelemetry-proto
  python3 -c 'import grpc, opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc' || { echo "test.sh: grpcio or opentelemetry-proto is still missing after pip install" >&2; exit 1; }
}

# Envoy's rate limit service is tested with the protos Envoy publishes (PyPI xds-protos) and
# grpcio, in a virtual environment of their own: xds-protos ships opentelemetry.proto modules
# that shadow opentelemetry-proto's above (tests/common/xds.rs finds it). PyYAML: the book's
# Envoy YAML snippets are loaded and parsed into Envoy's messages (tests/common/envoy_yaml.py).
xds_venv=target/venv/xds
"$xds_venv/bin/python" -c 'import grpc, yaml, envoy.service.ratelimit.v3.rls_pb2_grpc' 2>/dev/null || {
  echo "test.sh: installing xds-protos, grpcio and PyYAML in $xds_venv (the Envoy rate limit service's tests)" >&2
  rm -rf "$xds_venv"
  python3 -m venv "$xds_venv" 2>/dev/null || {
    rm -rf "$xds_venv"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$xds_venv"
  }
  "$xds_venv/bin/pip" install --quiet xds-protos grpcio pyyaml
  "$xds_venv/bin/python" -c 'import grpc, yaml, envoy.service.ratelimit.v3.rls_pb2_grpc' || { echo "test.sh: xds-protos, grpcio or PyYAML is still missing in $xds_venv" >&2; exit 1; }
}

command -v kubernetes-validate >/dev/null 2>&1 || {
  echo "test.sh: installing kubernetes-validate (tests/examples/: the Kubernetes manifests; brings PyYAML)" >&2
  python3 -m pip install --quiet kubernetes-validate 2>/dev/null || python3 -m pip install --quiet --break-system-packages kubernetes-validate
  command -v kubernetes-validate >/dev/null || { echo "test.sh: kubernetes-validate is still missing after pip install" >&2; exit 1; }
}

# Benchmarks first, in test mode (each criterion function runs once): they must build and run.
cargo test --locked --workspace --benches
# Then every test: unit, integration (real sockets, real redis-server and Redis Cluster),
# property tests. The last line sums every runner's result line.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# --no-fail-fast: a failing area does not hide the others' results; the status is kept
# and returned after the sum.
status=0
cargo test --locked --no-fail-fast --workspace --lib --bins --tests 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f; if (p == 0) exit 1 }' "$log" || status=1
exit "$status"
