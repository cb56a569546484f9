#!/usr/bin/env bash
# The request path's futures, by size: what every request moves by value.
#
#   benches/future_sizes.sh            # the proxy's and server's futures, largest first
#   PATTERN='of server::conn' TOP=5 benches/future_sizes.sh   # an extended regex
#
# Why: hyper moves the service's future into its box, and each `.await` of an async
# function moves the callee's future into the caller's: a request's future of 16 000 bytes
# cost ~5 600 instructions of memcpy a request (callgrind, issue 37). rustc lays out an async
# function's arguments twice (as captured and as locals) and keeps a moved-from local's
# place across later awaits, so a future grows quietly; this lists what it is now.
#
# rustc's `-Zprint-type-sizes` on the stable toolchain (RUSTC_BOOTSTRAP=1, for this one
# command only), on the library in release mode; rebuilds the library (~1.5 min).
set -euo pipefail
cd "$(dirname "$0")/.."
PATTERN="${PATTERN:-(of (proxy|server)::|@src/(proxy|server)/)}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
RUSTC_BOOTSTRAP=1 cargo rustc --quiet --release --lib -- -Zprint-type-sizes >"$out" 2>/dev/null
grep -E "^print-type-size type: \`\{async (fn body|block)@?[^}]*\}\`: [0-9]+ bytes" "$out" |
    grep -E "$PATTERN" |
    sed -E 's/^print-type-size type: `\{(.*)\}`: ([0-9]+) bytes.*/\2\t\1/' |
    sort -t$'\t' -k1,1nr -u | head -n "${TOP:-25}" |
    awk -F'\t' 'BEGIN { print "| bytes | future |"; print "| ---: | --- |" } { printf "| %d | `%s` |\n", $1, $2 }'
