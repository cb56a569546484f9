#!/bin/sh
# The image's entrypoint (Dockerfile): gives the TLS listener a certificate, then runs
# tollgate with the container's arguments.
#
# The image ships no private key: a key baked into a public image is everyone's key. When
# /app/certs holds no localhost.pem (nothing mounted there), this writes a fresh
# self-signed development pair with `tollgate certs` — once per container, since
# /app/certs is a volume. Where /app/certs cannot be written (a read-only root filesystem
# without a volume there, as in examples/kubernetes/) it writes nothing: a config with TLS
# then needs real certificates mounted, and `serve` names the missing file.
set -eu
certs=/app/certs
if [ ! -e "$certs/localhost.pem" ] && [ -d "$certs" ] && [ -w "$certs" ]; then
  # The key is readable by this user only.
  umask 077
  /app/tollgate certs --out "$certs" >/dev/null
  echo "docker-entrypoint: wrote a self-signed development certificate to $certs (mount real ones there for anything else)" >&2
  umask 022
fi
exec /app/tollgate "$@"
