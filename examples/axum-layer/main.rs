//! An axum app whose routes are rate limited by tollgate's limiter, in-process, built in
//! code with `tollgate-limit` alone: `cargo run -p axum-layer`, listening on `$LISTEN`
//! (default `127.0.0.1:3000`). The same limits as a file are `tollgate.toml` beside this
//! one (for the gateway's `tollgate::layer::Limits`). See README.md beside this file.

mod app;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tollgate_limit::LimiterHandle;
use tollgate_limit::clock::SystemClock;
use tollgate_limit::layer::RateLimitLayer;
use tollgate_limit::spec::{AlgorithmName, KeyPart, LimiterSpec, OnStoreError, Policy, Site};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `[policies.api_per_ip]` and `[policies.login_per_ip]` of tollgate.toml.
    let mut api = Policy::new(
        "api_per_ip",
        vec![KeyPart::Ip],
        AlgorithmName::Gcra,
        10,
        Duration::from_secs(1),
    )?;
    api.burst = 20.try_into()?;
    let mut login = Policy::new(
        "login_per_ip",
        vec![KeyPart::Ip],
        AlgorithmName::TokenBucket,
        3,
        Duration::from_secs(60),
    )?;
    // `central`: in Redis when the spec's store is Redis; in memory, decided here.
    login.site = Site::Central;
    let mut spec = LimiterSpec::in_memory(vec![api, login])
        .route("api", &["api_per_ip"])?
        .route("login", &["login_per_ip"])?;
    // `[layers.login] on_store_error = "closed"`: with a store, an outage refuses logins.
    spec.routes[1].on_store_error = OnStoreError::Closed;
    let mut registry = Registry::default();
    let limiter = Arc::new(LimiterHandle::new(
        spec,
        Arc::new(SystemClock::new()),
        &mut registry,
    )?);
    let registry = Arc::new(registry);
    let metrics = move || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .map(|()| text)
            .unwrap_or_default()
    };
    let app = app::router(
        RateLimitLayer::new(limiter.clone(), 0, "api"),
        RateLimitLayer::new(limiter, 1, "login"),
        metrics,
    );
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("axum-layer: listening on http://{}", listener.local_addr()?);
    // `ConnectInfo<SocketAddr>`: the peer address the layer keys `ip` policies on.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
