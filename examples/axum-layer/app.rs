//! The example's router, apart from `main` so that `tests/layer/` serves the very same app
//! (there behind layers built from `tollgate.toml` by the gateway's `tollgate::layer`).

use axum::Router;
use axum::routing::{get, post};
use tollgate_limit::layer::RateLimitLayer;

/// `GET /api/hello` behind `api`, `POST /login` behind `login`, and the limiter's metrics
/// (`metrics`: the Prometheus text) at `GET /metrics` (behind no layer).
pub fn router<M>(api: RateLimitLayer, login: RateLimitLayer, metrics: M) -> Router
where
    M: Fn() -> String + Clone + Send + Sync + 'static,
{
    let api = Router::new()
        .route("/api/hello", get(|| async { "hello\n" }))
        .layer(api);
    let login = Router::new()
        .route("/login", post(|| async { "welcome\n" }))
        .layer(login);
    Router::new()
        .merge(api)
        .merge(login)
        .route("/metrics", get(move || async move { metrics() }))
}
