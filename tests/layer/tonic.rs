//! `tollgate::layer` in a real tonic server (`tonic::transport::Server::layer`, the way a
//! tonic app adds tower middleware), called by tonic's own client: a call over the limit is
//! answered as gRPC (RESOURCE_EXHAUSTED, `Retry-After` and `RateLimit` in its metadata), and
//! the peer comes from tonic's `TcpConnectInfo` through `ClientAddr::from_fn`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tollgate::layer::{ClientAddr, Limits};
use tonic::Code;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};

use crate::common::grpc::{Echo, Raw, call};

/// The echo service as tonic's generated code would be: a named tower service.
#[derive(Clone)]
struct EchoServer;

impl NamedService for EchoServer {
    const NAME: &'static str = "echo.Echo";
}

impl tower::Service<http::Request<Body>> for EchoServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        Box::pin(async move { Ok(tonic::server::Grpc::new(Raw).unary(Echo, req).await) })
    }
}

/// A tonic server on a free loopback port, every call through `[layers.calls]`.
async fn tonic_server(limits: &Limits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = ClientAddr::from_fn(|ext| {
        let info = ext.get::<TcpConnectInfo>()?;
        info.remote_addr().map(|a| a.ip())
    });
    let layer = limits.layer("calls").unwrap().client_addr(peer);
    let server = tonic::transport::Server::builder()
        .layer(layer)
        .add_service(EchoServer)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(async move { server.await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_server_answers_calls_over_the_limit_as_resource_exhausted() {
    let limits = Limits::from_toml(
        r#"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 2
period = "1h"

[layers.calls]
policies = ["per_ip"]
"#,
    )
    .unwrap();
    let addr = tonic_server(&limits).await;
    let ok = call(addr, b"world").await.expect("a call under the limit");
    assert_eq!(&ok.get_ref()[..], b"hello: world");
    // The limiter keys on the peer tonic saw: 127.0.0.1 (a missing peer would be refused).
    let meta = ok.metadata();
    assert_eq!(meta.get("ratelimit").unwrap(), "\"per_ip\";r=1;t=1800");
    assert!(call(addr, b"again").await.is_ok());

    let limited = call(addr, b"one more").await.unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert!(limited.message().contains("rate limit"), "{limited:?}");
    let meta = limited.metadata();
    assert_eq!(meta.get("retry-after").unwrap(), "1800", "{meta:?}");
    assert_eq!(meta.get("ratelimit").unwrap(), "\"per_ip\";r=0;t=1800");
    let metrics = limits.metrics_text();
    assert!(
        metrics.contains("policy=\"per_ip\"") && metrics.contains("deny"),
        "{metrics}"
    );
}
