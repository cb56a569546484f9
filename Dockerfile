# tollgate container image.
#
#   docker build -t tollgate .
#   export TOLLGATE_ADMIN_TOKEN="$(openssl rand -hex 32)"
#   docker run --rm -e TOLLGATE_ADMIN_TOKEN -p 8080:8080 -p 8443:8443 -p 127.0.0.1:9901:9901 tollgate
#   docker run --rm -e TOLLGATE_ADMIN_TOKEN -v "$PWD/my.toml:/app/config.toml:ro" -p 8080:8080 tollgate   # own config
#
# The image ships the repository's config.toml with its listeners moved from 127.0.0.1 to
# 0.0.0.0 (a container's loopback is unreachable from outside it). An admin listener off
# loopback must ask for a bearer token (`tollgate check` refuses it otherwise), so the
# image's config reads it from TOLLGATE_ADMIN_TOKEN: `docker run -e` it, or the container
# exits naming the variable. /healthz and /readyz stay open (the HEALTHCHECK below).
# Its upstream, http://127.0.0.1:3000, is the container's own loopback, so mount a config
# whose upstreams the container can reach.
#
# No private key is in the image: at start, scripts/docker-entrypoint.sh writes a fresh
# self-signed development certificate into the volume /app/certs unless one is mounted
# there (localhost.pem and localhost-key.pem; see certs/README.md). Mount real ones for
# anything but development. tests/examples/docker.rs checks what can be checked without a
# Docker daemon: this file's config step, its base image tags, that it copies no key.

# ---- build -----------------------------------------------------------------------------------
# Exact tags: the toolchain is Cargo.toml's rust-version, and a rebuild months later gets
# the same compiler and the same Debian. Move both deliberately (no registry digests here:
# the repository's machines build without network access to look them up).
FROM rust:1.95.0-bookworm AS build
WORKDIR /src
# Dependencies in a layer of their own, rebuilt only when a manifest or Cargo.lock changes:
# the workspace's manifests with stand-in sources (every target Cargo.toml names must
# exist, or cargo refuses the manifest), built once.
COPY Cargo.toml Cargo.lock build.rs ./
COPY crates/tollgate-limit/Cargo.toml crates/tollgate-limit/
COPY examples/axum-layer/Cargo.toml examples/axum-layer/
RUN mkdir -p src crates/tollgate-limit/src benches examples/axum-layer \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs crates/tollgate-limit/src/lib.rs \
 && for f in benches/allocations.rs benches/key_body.rs benches/key_memory.rs benches/limiter.rs benches/normalize.rs benches/replay.rs benches/top_keys.rs \
        examples/axum-layer/main.rs; do echo 'fn main() {}' > "$f"; done \
 && cargo build --release --locked \
 && rm -rf src crates/tollgate-limit/src benches examples
COPY . .
# COPY keeps the files' own times, which can be older than the stand-ins' build: touch the
# crate roots so cargo rebuilds both crates from the real sources.
RUN touch src/main.rs src/lib.rs crates/tollgate-limit/src/lib.rs build.rs \
 && cargo build --release --locked \
 && strip target/release/tollgate

# ---- runtime ---------------------------------------------------------------------------------
FROM debian:bookworm-20251229-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --user-group --uid 10001 --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin tollgate \
 && install -d -o tollgate -g tollgate -m 0700 /app/certs
WORKDIR /app
COPY --from=build /src/target/release/tollgate /app/tollgate
COPY scripts/docker-entrypoint.sh /app/docker-entrypoint.sh
COPY config.toml /app/config.toml
# The config step (tests/examples/docker.rs runs this very RUN against the real binary):
# listen on every interface, same ports; the admin API asks for TOLLGATE_ADMIN_TOKEN; fail
# the build if config.toml's listeners moved; `tollgate check` it against a throwaway
# certificate, removed in the same layer, and a stand-in token.
RUN sed -E -i \
        -e 's/^([[:space:]]*(listen|tls_listen|admin_listen)[[:space:]]*=[[:space:]]*")127\.0\.0\.1:/\10.0.0.0:/' \
        -e 's/^([[:space:]]*admin_listen[[:space:]]*=.*)$/\1\nadmin_token_env = "TOLLGATE_ADMIN_TOKEN"   # the image: admin on 0.0.0.0 needs a token/' \
        /app/config.toml \
 && grep -Eq '^[[:space:]]*listen[[:space:]]*=[[:space:]]*"0\.0\.0\.0:8080"' /app/config.toml \
 && grep -Eq '^[[:space:]]*admin_listen[[:space:]]*=[[:space:]]*"0\.0\.0\.0:9901"' /app/config.toml \
 && grep -Eq '^[[:space:]]*tls_cert[[:space:]]*=[[:space:]]*"certs/localhost\.pem"' /app/config.toml \
 && grep -Eq '^[[:space:]]*tls_key[[:space:]]*=[[:space:]]*"certs/localhost-key\.pem"' /app/config.toml \
 && mkdir -p /app/certs \
 && /app/tollgate certs --out /app/certs >/dev/null \
 && TOLLGATE_ADMIN_TOKEN=build-time-check-only-not-a-secret /app/tollgate check --config /app/config.toml \
 && rm -f /app/certs/localhost.pem /app/certs/localhost-key.pem
# A volume, so the entrypoint can write the certificate under `docker run --read-only` too.
VOLUME ["/app/certs"]
USER tollgate
EXPOSE 8080 8443 9901
# The slim image has no curl: bash's /dev/tcp asks the admin listener for /healthz (open
# without the token).
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/app/docker-entrypoint.sh"]
CMD ["serve", "--config", "/app/config.toml"]
