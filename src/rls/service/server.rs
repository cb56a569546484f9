//! The service on its socket: tonic over cleartext HTTP/2 on `[rls] listen`, answering
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` and `grpc.health.v1.Health`
//! (SERVING for both the whole server, `""`, and the rate limit service's name) until
//! `shutdown`, which the gateway's listeners share.

use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::RlsState;

/// The tonic service over the shared state.
struct Service(Arc<RlsState>);

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = std::time::Instant::now();
        let (answer, decision) = self.0.decide(request.get_ref()).await;
        let request_id = request.metadata().get("x-request-id");
        super::log::log(&super::log::Call {
            domain: &request.get_ref().domain,
            path: super::log::GRPC_PATH,
            status: 200,
            started,
            client: request.remote_addr(),
            request_id: request_id.and_then(|v| v.to_str().ok()).unwrap_or(""),
            decision: decision.as_ref(),
        });
        answer.map(Response::new)
    }
}

/// Serve `state` on `listener` (over TLS with `tls`) until `shutdown` resolves (calls in
/// flight finish).
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: Arc<RlsState>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    let max = state.served.load().bounds.max_message_bytes();
    let rls = RateLimitServiceServer::new(Service(state)).max_decoding_message_size(max);
    let router = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(rls);
    match tls {
        Some(acceptor) => {
            let incoming = super::tls::incoming(listener, acceptor);
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        None => (router.serve_with_incoming_shutdown(TcpIncoming::from(listener), shutdown)).await,
    }
}
