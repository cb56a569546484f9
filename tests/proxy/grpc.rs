//! gRPC end to end through the gateway, with a real gRPC client and server (tonic, bytes
//! for messages): the upstream is `protocol = "h2"` (h2c), trailers travel both ways (a
//! unary call only completes when the client gets the `grpc-status` trailer), and a
//! rate-limited call is answered as gRPC: RESOURCE_EXHAUSTED with the rate-limit headers.

use std::convert::Infallible;
use std::net::SocketAddr;

use crate::common::grpc::{Echo, Raw, call};
use crate::common::*;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tonic::Code;

/// A gRPC server over h2c (HTTP/2 with prior knowledge).
async fn grpc_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(|req| async move {
                    let mut grpc = tonic::server::Grpc::new(Raw);
                    Ok::<_, Infallible>(grpc.unary(Echo, req).await)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_pass_with_their_trailers_and_limits_answer_as_grpc() {
    let up = grpc_server().await;
    let gw = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [upstreams.grpc]\nurls = [\"http://{up}\"]\nprotocol = \"h2\"\n\
         [policies.calls]\nkey = [\"route\"]\nalgorithm = \"gcra\"\nlimit = 3\nperiod = \"1h\"\n\
         [[routes]]\nname = \"echo\"\nmatch = {{ path_prefix = \"/echo.Echo/\" }}\nupstream = \"grpc\"\npolicies = [\"calls\"]\n"
    ))
    .await;
    let addr = gw.addrs.listen;
    // A reply only completes with the grpc-status trailer: it crossed the gateway.
    let ok = call(addr, b"world")
        .await
        .expect("a call through the gateway");
    assert_eq!(&ok.get_ref()[..], b"hello: world");
    // An error status from the server (in its trailers) arrives as sent.
    let err = call(addr, b"missing").await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::NotFound, "no such thing")
    );
    assert!(call(addr, b"again").await.is_ok());
    // The fourth call is over the limit: RESOURCE_EXHAUSTED, not a protocol error.
    let limited = call(addr, b"one more").await.unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert!(limited.message().contains("rate limit"), "{limited:?}");
    let meta = limited.metadata();
    assert!(meta.get("retry-after").is_some(), "{meta:?}");
    assert!(meta.get("ratelimit").is_some(), "{meta:?}");
}
