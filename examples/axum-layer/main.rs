//! An axum app whose routes are rate limited by tollgate's policies, in-process:
//! `cargo run --example axum-layer [CONFIG]` (default: `tollgate.toml` beside this file),
//! listening on `$LISTEN` (default `127.0.0.1:3000`). See README.md beside this file.

mod app;

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = std::env::args().nth(1).unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/axum-layer/tollgate.toml"
        )
        .into()
    });
    let limits = tollgate::layer::Limits::from_file(&config)?;
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("axum-layer: listening on http://{}", listener.local_addr()?);
    // `ConnectInfo<SocketAddr>`: the peer address the layer keys `ip` policies on.
    let app = app::router(&limits)?.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
