//! The admin listener: health, readiness and metrics, apart from public traffic so a flood
//! on the public port never hides the gateway's own state from its operators.

mod metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::debug;

pub use metrics::{Metrics, RouteMetrics};

use crate::proxy::ResponseBody;
use crate::respond::full;
use crate::server::activity::{Activity, Timeouts};
use crate::server::conn::drive;
use crate::server::listener::AcceptErrors;
use crate::server::shutdown::Shutdown;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct State {
    /// Everything `/metrics` exports.
    pub metrics: Arc<Metrics>,
    /// Listeners bound and config loaded; false again while shutting down so balancers drain.
    pub ready: Arc<AtomicBool>,
}

/// Serve the admin endpoints until shutdown. Connections are held to the public
/// listeners' `header_timeout` and `idle_timeout` (a silent socket must not pin a file
/// descriptor here either) and are closed gracefully at shutdown; nothing waits for them.
pub(crate) async fn run(
    listener: TcpListener,
    state: State,
    timeouts: Timeouts,
    mut shutdown: Shutdown,
) {
    let http = Arc::new(auto::Builder::new(TokioExecutor::new()));
    let (stop, _) = watch::channel(false);
    let mut errors = AcceptErrors::new("admin accept failed");
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    if let Some(wait) = errors.failed(e) {
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = shutdown.recv() => break,
                        }
                    }
                    continue;
                }
            },
            () = shutdown.recv() => break,
        };
        errors.succeeded();
        let activity = Activity::new(Instant::now());
        let (state, http, mut stop) = (state.clone(), http.clone(), stop.subscribe());
        tokio::spawn(async move {
            let handler = move |req| std::future::ready(handle(&state, req));
            let ended = drive(stream, &http, activity, &timeouts, handler, &mut stop).await;
            debug!(%peer, ?ended, "admin connection ended");
        });
    }
    let _ = stop.send(true);
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
