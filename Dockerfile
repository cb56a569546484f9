# tollgate container image.
#
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 -p 8443:8443 -p 9901:9901 tollgate
#   docker run --rm -v "$PWD/my.toml:/app/config.toml:ro" -p 8080:8080 tollgate   # own config
#
# The image ships the repository's config.toml with its listeners moved from 127.0.0.1 to
# 0.0.0.0 (a container's loopback is unreachable from outside it); its upstream,
# http://127.0.0.1:3000, is the container's own loopback, so mount a config whose upstreams
# the container can reach. certs/ holds the development certificate (see certs/README.md):
# mount real ones for anything but development.

# ---- build -----------------------------------------------------------------------------------
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
 && strip target/release/tollgate

# ---- runtime ---------------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --user-group --uid 10001 --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin tollgate
WORKDIR /app
COPY --from=build /src/target/release/tollgate /app/tollgate
COPY config.toml /app/config.toml
COPY certs/ /app/certs/
# Listen on every interface, same ports; fail the build if config.toml's listeners moved.
RUN sed -E -i 's/^([[:space:]]*(listen|tls_listen|admin_listen)[[:space:]]*=[[:space:]]*")127\.0\.0\.1:/\10.0.0.0:/' \
        /app/config.toml \
 && grep -Eq '^[[:space:]]*listen[[:space:]]*=[[:space:]]*"0\.0\.0\.0:8080"' /app/config.toml \
 && grep -Eq '^[[:space:]]*admin_listen[[:space:]]*=[[:space:]]*"0\.0\.0\.0:9901"' /app/config.toml \
 && chown -R root:tollgate /app/certs \
 && chmod 0755 /app/certs \
 && chmod 0644 /app/certs/localhost.pem \
 && chmod 0640 /app/certs/localhost-key.pem \
 && /app/tollgate check --config /app/config.toml
USER tollgate
EXPOSE 8080 8443 9901
# The slim image has no curl: bash's /dev/tcp asks the admin listener for /healthz.
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/app/tollgate"]
CMD ["serve", "--config", "/app/config.toml"]
