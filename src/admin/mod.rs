//! The admin listener: health, readiness and metrics, apart from public traffic so a flood
//! on the public port never hides the gateway's own state from its operators.

mod metrics;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tracing::debug;

pub use metrics::{Metrics, RouteMetrics};

use crate::proxy::ResponseBody;
use crate::respond::full;
use crate::server::shutdown::Shutdown;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct State {
    /// Everything `/metrics` exports.
    pub metrics: Arc<Metrics>,
    /// Listeners bound and config loaded; false again while shutting down so balancers drain.
    pub ready: Arc<AtomicBool>,
}

/// Serve the admin endpoints until shutdown. Admin requests are short, so no draining.
pub async fn run(listener: TcpListener, state: State, mut shutdown: Shutdown) {
    let http = auto::Builder::new(TokioExecutor::new());
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => { debug!(error = %e, "admin accept failed"); continue; }
            },
            _ = shutdown.recv() => return,
        };
        let state = state.clone();
        let http = http.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req)) }
            });
            let _ = http.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

fn handle(state: &State, req: Request<Incoming>) -> Response<ResponseBody> {
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
            state.metrics.encode(),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<ResponseBody> {
    let mut resp = Response::new(full(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
