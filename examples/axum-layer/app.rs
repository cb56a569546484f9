//! The example's router, apart from `main` so that `tests/layer/` serves the very same app.

use axum::Router;
use axum::routing::{get, post};
use tollgate::layer::{LayerError, Limits};

/// `GET /api/hello` behind `[layers.api]`, `POST /login` behind `[layers.login]`, and the
/// limiter's metrics at `GET /metrics` (behind no layer).
pub fn router(limits: &Limits) -> Result<Router, LayerError> {
    let api = Router::new()
        .route("/api/hello", get(|| async { "hello\n" }))
        .layer(limits.layer("api")?);
    let login = Router::new()
        .route("/login", post(|| async { "welcome\n" }))
        .layer(limits.layer("login")?);
    let metrics = limits.clone();
    Ok(Router::new().merge(api).merge(login).route(
        "/metrics",
        get(move || async move { metrics.metrics_text() }),
    ))
}
