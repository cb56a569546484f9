//! The request path, top to bottom. Every request a listener accepts goes through
//! [`Gateway::handle`], which reads as the stack it is:
//!
//! 1. **client** — who is asking (trusted-proxy rules), needed by logs and limit keys;
//! 2. **route** — which route takes the request, or 404 (nothing else is worth doing then);
//! 3. **limit** — the route's policies decide; a denial stops here, before any upstream
//!    work, so abusive traffic costs as little as possible;
//! 4. **forward** — rewrite headers, pick an upstream, send, stream the answer back, with
//!    the rate-limit headers added and concurrency permits riding in the body;
//! 5. **respond** — any error of steps 2–4 becomes an HTTP answer in one place;
//! 6. **observe** — metrics and the access-log line, last, so they see the final status.

mod body;
pub mod client_ip;
mod forward;
pub mod headers;
mod upgrade;
pub mod upstream;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tracing::{info, warn};

use crate::admin::{Metrics, RouteMetrics};
use crate::config::Config;
use crate::config::Response as ResponseConfig;
use crate::limit::Limiter;
use crate::respond::{self, GatewayError};
use crate::router::{RouteEntry, Router};
use client_ip::TrustedProxies;
use forward::UpstreamBody;
use upstream::Pool;

/// The body of every response tollgate sends: the upstream's stream or one of ours.
pub type ResponseBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// What the listener knows about the connection a request came on.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// TCP peer address.
    pub peer: SocketAddr,
    /// Whether the connection is TLS (for `X-Forwarded-Proto`).
    pub tls: bool,
    /// Forwarding header values of this hop, made once per connection.
    pub hop: Arc<headers::HopValues>,
}

impl ConnInfo {
    pub fn new(peer: SocketAddr, tls: bool) -> Self {
        ConnInfo {
            peer,
            tls,
            hop: Arc::new(headers::HopValues::new(
                client_ip::canonical(peer.ip()),
                tls,
            )),
        }
    }
}

/// The request path; cheap to clone (one `Arc`), one per process.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    /// Step 1: whose forwarding headers to believe.
    trusted: TrustedProxies,
    /// Step 2: routes, most specific first.
    router: Router,
    /// Step 3: every route's policies and their state.
    limiter: Arc<Limiter>,
    /// Steps 3–5: which rate-limit headers responses carry.
    response: ResponseConfig,
    /// Step 4: upstream pools, indexed like `Config::upstreams`.
    pools: Vec<Pool>,
    /// Step 4: pooled keep-alive connections to every upstream.
    client: Client<HttpConnector, UpstreamBody>,
    /// Step 4: longest wait for an upstream's response head.
    upstream_timeout: Duration,
    /// Step 6: per route (config order), then the no-route bucket last.
    route_metrics: Vec<RouteMetrics>,
}

/// The label used for requests no route took.
const NO_ROUTE: &str = "-";

impl Gateway {
    pub fn new(config: &Config, limiter: Arc<Limiter>, metrics: Arc<Metrics>) -> Self {
        let pools: Vec<Pool> = config.upstreams.iter().map(Pool::new).collect();
        let mut route_metrics: Vec<RouteMetrics> = config
            .routes
            .iter()
            .map(|r| metrics.route(&Arc::from(r.name.as_str()), Some(&pools[r.upstream].name)))
            .collect();
        route_metrics.push(metrics.route(&Arc::from(NO_ROUTE), None));
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.server.upstream_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Gateway {
            inner: Arc::new(Inner {
                trusted: TrustedProxies::new(
                    config.client_ip.trusted_proxies.clone(),
                    config.client_ip.forwarded_header,
                ),
                router: Router::new(config),
                limiter,
                response: config.response,
                pools,
                client,
                upstream_timeout: config.server.upstream_timeout,
                route_metrics,
            }),
        }
    }

    /// Handle one request; never fails, since every error is answered (step 5).
    pub async fn handle(&self, req: Request<Incoming>, conn: ConnInfo) -> Response<ResponseBody> {
        let started = Instant::now();
        let inner = &*self.inner;
        // The access log needs method and path after the request is gone; copy them only
        // when the log is on.
        let logged = tracing::enabled!(target: "tollgate::access", tracing::Level::INFO)
            .then(|| (req.method().clone(), req.uri().path().to_owned()));
        // 1. client
        let client = inner.trusted.client_ip(conn.peer.ip(), req.headers());
        // 2. route
        let route = inner.router.find(&req).cloned();
        // 3–4. limit, forward
        let result = match &route {
            None => Err(GatewayError::NoRoute {
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
            }),
            Some(entry) => self.limit_and_forward(entry, req, conn, client).await,
        };
        // 5. respond
        let resp = result.unwrap_or_else(|err| {
            if !matches!(err, GatewayError::RateLimited(_)) {
                let route = route.as_ref().map_or(NO_ROUTE, |r| &*r.name);
                warn!(route, %client, error = %err, kind = err.kind(), "request failed");
            }
            respond::error_response(&err, &inner.response)
        });
        // 6. observe
        let took = started.elapsed();
        let status = resp.status().as_u16();
        let index = route
            .as_ref()
            .map_or(inner.route_metrics.len() - 1, |r| r.index);
        inner.route_metrics[index].record_request(status, took);
        if let Some((method, path)) = logged {
            let route = route.as_ref().map_or(NO_ROUTE, |r| &*r.name);
            access_log(route, &method, &path, status, took, client);
        }
        resp
    }
}

impl Gateway {
    /// Steps 3 and 4 for a routed request.
    async fn limit_and_forward(
        &self,
        entry: &RouteEntry,
        req: Request<Incoming>,
        conn: ConnInfo,
        client: IpAddr,
    ) -> Result<Response<ResponseBody>, GatewayError> {
        let inner = &*self.inner;
        // 3. limit
        let admission = inner
            .limiter
            .check(
                entry.index,
                &entry.name,
                client,
                req.method(),
                req.headers(),
            )
            .await;
        if let Some(what) = admission.ambiguous {
            return Err(GatewayError::BadRequest(what));
        }
        if let Some(retry_after) = admission.unavailable {
            return Err(GatewayError::StoreUnavailable { retry_after });
        }
        if admission.denied {
            return Err(GatewayError::RateLimited(admission.report));
        }
        if admission.delay > 0 {
            // Leaky bucket: the slot is reserved; wait for it without blocking a thread.
            tokio::time::sleep(Duration::from_nanos(admission.delay)).await;
        }
        // 4. forward
        let pool = &inner.pools[entry.route.upstream];
        let sent = Instant::now();
        let result = forward::forward(inner, entry, pool, req, conn, client).await;
        inner.route_metrics[entry.index].record_upstream(sent.elapsed());
        let mut resp = result?;
        respond::ratelimit::add_headers(
            resp.headers_mut(),
            &admission.report,
            &inner.response,
            false,
        );
        Ok(body::hold_permits(resp, admission.permits))
    }
}

impl Gateway {
    /// A request the HTTP layer answered itself before `handle` saw it (a head larger than
    /// `max_header_bytes`: 431; a malformed head: 400): counted and logged like any other.
    pub fn record_refused(&self, status: u16, peer: IpAddr) {
        let inner = &*self.inner;
        inner.route_metrics[inner.route_metrics.len() - 1].record_request(status, Duration::ZERO);
        info!(target: "tollgate::access", route = NO_ROUTE, status, client = %client_ip::canonical(peer), "request refused before routing");
    }
}

fn access_log(
    route: &str,
    method: &http::Method,
    path: &str,
    status: u16,
    took: Duration,
    client: IpAddr,
) {
    info!(
        target: "tollgate::access",
        route,
        method = %method,
        path,
        status,
        duration_ms = took.as_secs_f64() * 1e3,
        client = %client,
    );
}
