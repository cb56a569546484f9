//! The receiving side: an h2c listener that authenticates each message before its handler
//! sees it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use super::metrics::PeerMetrics;
use super::replay::ReplayGuard;
use super::wire::{self, MAX_MESSAGE_BYTES, Secret, WireError};
use super::{PeerHandler, Request};

/// Open peer connections per process: a fleet needs one per peer; the rest of the bound
/// keeps a stray client from exhausting descriptors.
const MAX_CONNECTIONS: usize = 1024;

/// Streams per connection: one message in flight per sending client, with room to spare.
const MAX_STREAMS: u32 = 256;

/// Longest a message body may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A running peer listener; dropping it stops accepting and closes its connections.
pub struct PeerServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

struct Shared<H> {
    secret: Secret,
    /// This node's name in replies.
    me: String,
    handler: Arc<H>,
    metrics: PeerMetrics,
    replay: ReplayGuard,
}

impl PeerServer {
    /// Listen on `listen` (port 0 picks a free one) and serve `handler` there.
    pub async fn bind<H: PeerHandler>(
        listen: SocketAddr,
        secret: Secret,
        handler: Arc<H>,
        metrics: PeerMetrics,
    ) -> std::io::Result<PeerServer> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            secret,
            me: local_addr.to_string(),
            handler,
            metrics,
            replay: ReplayGuard::new(),
        });
        let task = tokio::spawn(accept(listener, shared));
        Ok(PeerServer { local_addr, task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        // The accept task owns the connections' JoinSet: aborting it aborts them all.
        self.task.abort();
    }
}

async fn accept<H: PeerHandler>(listener: TcpListener, shared: Arc<Shared<H>>) {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let Ok(place) = places.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors and the like: do not spin.
                tracing::warn!(error = %e, "peer listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        conns.spawn(async move {
            let _place = place;
            connection(stream, shared).await;
        });
    }
}

async fn connection<H: PeerHandler>(stream: TcpStream, shared: Arc<Shared<H>>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(serve(&shared, req).await) }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder.max_concurrent_streams(MAX_STREAMS);
    if let Err(e) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "peer connection ended");
    }
}

async fn serve<H: PeerHandler>(
    shared: &Shared<H>,
    req: http::Request<Incoming>,
) -> http::Response<Full<Bytes>> {
    if req.uri().path() != wire::PATH {
        return status(StatusCode::NOT_FOUND);
    }
    if req.method() != Method::POST {
        return status(StatusCode::METHOD_NOT_ALLOWED);
    }
    let body = Limited::new(req.into_body(), MAX_MESSAGE_BYTES);
    let message = match tokio::time::timeout(READ_TIMEOUT, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => return refuse(shared, WireError::Malformed),
    };
    let opened = match wire::open_request(&shared.secret, &message, wire::now_ms()) {
        Ok(opened) => opened,
        Err(e) => return refuse(shared, e),
    };
    if opened.to != shared.me {
        return refuse(shared, WireError::Misdirected);
    }
    // Only authenticated MACs are remembered: forgeries cannot fill the guard.
    if !shared.replay.first_time(&opened.mac) {
        return refuse(shared, WireError::Replayed);
    }
    let Ok(from) = opened.sender.parse::<SocketAddr>() else {
        return refuse(shared, WireError::Malformed);
    };
    let asked = opened.items.len();
    let request = Request {
        items: opened.items,
    };
    let response = shared.handler.handle(from, request).await;
    if response.items.len() != asked {
        tracing::error!(
            asked,
            answered = response.items.len(),
            "peer handler answered a different number of items"
        );
        return status(StatusCode::INTERNAL_SERVER_ERROR);
    }
    let reply = wire::seal_reply(
        &shared.secret,
        &shared.me,
        wire::now_ms(),
        &opened.mac,
        &response.items,
    );
    let mut res = http::Response::new(Full::new(reply));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    res
}

/// Count a refused message and answer without a word on why.
fn refuse<H>(shared: &Shared<H>, e: WireError) -> http::Response<Full<Bytes>> {
    shared.metrics.error(e.kind());
    tracing::debug!(error = %e, "peer message refused");
    status(match e.kind() {
        "auth" => StatusCode::UNAUTHORIZED,
        _ => StatusCode::BAD_REQUEST,
    })
}

fn status(code: StatusCode) -> http::Response<Full<Bytes>> {
    let mut res = http::Response::new(Full::new(Bytes::new()));
    *res.status_mut() = code;
    res
}
