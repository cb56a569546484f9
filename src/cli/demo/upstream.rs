//! The demo's sample backend: a tiny in-process HTTP server standing in for the user's app.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// Start the sample upstream on a free loopback port; it runs until the runtime stops.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let http = auto::Builder::new(TokioExecutor::new());
        while let Ok((stream, _)) = listener.accept().await {
            let http = http.clone();
            tokio::spawn(async move {
                let svc = service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                    let body = format!(
                        "hello from the sample upstream: {} {}\n",
                        req.method(),
                        req.uri().path()
                    );
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                });
                let _ = http.serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(addr)
}
