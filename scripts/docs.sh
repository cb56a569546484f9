#!/usr/bin/env bash
# Build the book (docs/) into docs/book with mdBook, installing mdBook when missing.
#
#   scripts/docs.sh           # build; open docs/book/index.html
#   scripts/docs.sh serve     # rebuild on every change, served on http://127.0.0.1:3001
#                             (3000 is the docs' example backend)
#
# CI runs it (.ci/run), and `cargo test --test config docs` checks every link, anchor and ```toml
# block, so a broken link fails CI either way. SUMMARY.md naming a missing chapter fails the
# build (book.toml: create-missing = false).
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
if ! command -v mdbook >/dev/null 2>&1 || [ "$(mdbook --version)" != "mdbook v$MDBOOK_VERSION" ]; then
  echo "docs.sh: installing mdbook $MDBOOK_VERSION (cargo install, a few minutes once)" >&2
  cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION"
fi
if [ "${1:-}" = serve ]; then
  exec mdbook serve docs --port 3001
fi
mdbook build docs 2>&1 | tee /dev/stderr | { ! grep -E '(ERROR|WARN)'; } || {
  echo "docs.sh: mdbook reported a problem (above)" >&2
  exit 1
}
echo "docs.sh: built docs/book/index.html" >&2
