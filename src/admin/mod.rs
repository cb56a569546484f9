//! The admin endpoints: health, readiness and metrics, served on their own listener
//! (`server/admin.rs`), apart from public traffic so a flood on the public port never hides
//! the gateway's own state from its operators.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use prometheus_client::registry::Registry;

use crate::body::{ResponseBody, full};

/// What the admin endpoints read.
#[derive(Clone)]
pub struct State {
    /// Every metric of the process (request path, limits, store): what `/metrics` exports.
    pub registry: Arc<Registry>,
    /// Listeners bound and config loaded; false again while shutting down so balancers drain.
    pub ready: Arc<AtomicBool>,
}

/// Answer one admin request.
pub fn handle<B>(state: &State, req: Request<B>) -> Response<ResponseBody> {
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" if state.ready.load(Ordering::Acquire) => {
            text(StatusCode::OK, "ready\n".into(), "text/plain")
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready\n".into(),
            "text/plain",
        ),
        "/metrics" => text(
            StatusCode::OK,
            encode(&state.registry),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

/// Prometheus text exposition of everything registered.
fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<ResponseBody> {
    let mut resp = Response::new(full(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
