//! The request path, top to bottom. Every request a listener accepts goes through
//! [`Gateway::handle`], which reads as the stack it is (ARCHITECTURE.md's "A request's walk"
//! numbers the steps the same, and the files of each step say which they do):
//!
//! 1. **client** — who is asking (trusted-proxy rules), needed by logs and limit keys;
//! 2. **canonical** — one path, one authority, one method (a method override is dropped or,
//!    in `route` mode, is the method: `method_override`): what is routed, keyed and
//!    forwarded is the same request, or it is refused with a 400 (`canonical`);
//! 3. **route** — which route takes the request, or 404 (nothing else is worth doing then);
//! 4. **limit** — the route's policies decide; a denial stops here, before any upstream
//!    work, so abusive traffic costs as little as possible;
//! 5. **forward** — rewrite headers, pick an upstream, send, stream the answer back, with
//!    the rate-limit headers added and concurrency permits riding in the body (or in the
//!    tunnel after a `101`); both bodies are watched for silence and the request body
//!    for size: the upstream side, `upstream/`;
//! 6. **respond** — any error of steps 2–5 becomes an HTTP answer in one place;
//! 7. **observe** — metrics and the access-log line, last, so they see the final status.

pub(crate) mod access;
mod canonical;
/// Step 1, who is asking (`tollgate_limit::layer::client_ip`: the layer reads it too).
pub use crate::limit::layer::client_ip;
mod decide;
pub mod headers;
mod key_body;
mod method_override;
pub mod metrics;
pub mod request_id;
pub mod trace;
pub mod upstream;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{Request, Response, header};
use hyper::body::Incoming;
use tracing::{info, warn};

use crate::body::ResponseBody;
use crate::config::Response as ResponseConfig;
use crate::config::{Config, MethodOverride, PathRules};
use crate::limit::Limiter;
use crate::limit::keys::canonical;
use crate::respond;
use crate::router::Router;
use access::{Access, access_log};
use client_ip::TrustedProxies;
use metrics::{RequestMetrics, RouteMetrics};
use request_id::RequestIds;
use trace::Tracing;
use upstream::forward::Forwarder;
use upstream::{Pool, UpstreamSlots};

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
            hop: Arc::new(headers::HopValues::new(canonical(peer.ip()), tls)),
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
    /// Step 1: the request id's header, kept from trusted peers, minted for the rest.
    request_ids: RequestIds,
    /// Step 2: how ambiguous paths are settled.
    paths: PathRules,
    /// Step 2: whether a method-override header is the method routed (or dropped).
    method_override: MethodOverride,
    /// Step 2: this fleet's `Via` name: a request already carrying it has looped.
    pseudonym: String,
    /// Step 3: routes, most specific first.
    router: Router,
    /// Step 4: every route's policies and their state.
    limiter: Arc<Limiter>,
    /// Steps 4–6: which rate-limit headers responses carry.
    response: ResponseConfig,
    /// Step 5: upstream pools, indexed like `Config::upstreams`.
    pools: Vec<Pool>,
    /// Step 5: the upstream client, its timeouts and the headers it rewrites.
    forwarder: Forwarder,
    /// Step 4: the longest a body read for `form:`/`json:` keys may wait for a frame.
    body_timeout: Duration,
    /// Step 7: per route (config order), then the no-route bucket last.
    route_metrics: Vec<RouteMetrics>,
    /// Steps 1–7: the request's spans (`[telemetry]`; `None`: tracing is off).
    tracing: Option<Tracing>,
}

/// The label used for requests no route took.
const NO_ROUTE: &str = "-";

impl Gateway {
    /// One worker's request path; `slots` are the process's, shared by every worker.
    pub fn new(
        config: &Config,
        limiter: Arc<Limiter>,
        metrics: Arc<RequestMetrics>,
        slots: &UpstreamSlots,
        tracing: Option<Tracing>,
    ) -> Self {
        let pools: Vec<Pool> = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| Pool::new(i, u, slots))
            .collect();
        let mut route_metrics: Vec<RouteMetrics> = config
            .routes
            .iter()
            .map(|r| metrics.route(&Arc::from(r.name.as_str()), Some(&pools[r.upstream].name)))
            .collect();
        route_metrics.push(metrics.route(&Arc::from(NO_ROUTE), None));
        Gateway {
            inner: Arc::new(Inner {
                trusted: TrustedProxies::new(
                    config.client_ip.trusted_proxies.clone(),
                    config.client_ip.forwarded_header,
                ),
                request_ids: RequestIds::new(config.server.request_id_header.clone()),
                paths: config.server.paths,
                method_override: config.server.method_override,
                pseudonym: config.server.via_pseudonym.clone(),
                router: Router::new(config),
                limiter,
                response: config.response,
                pools,
                forwarder: Forwarder::new(
                    config,
                    headers::names::of_config(config, tracing.is_some()),
                ),
                route_metrics,
                body_timeout: config.server.body_timeout,
                tracing,
            }),
        }
    }

    /// Handle one request; never fails, since every error is answered (step 6). Takes the
    /// gateway by value (one `Arc`), so the future owns it and can be boxed as it is.
    pub async fn handle(
        self,
        mut req: Request<Incoming>,
        conn: ConnInfo,
    ) -> Response<ResponseBody> {
        let started = Instant::now();
        let inner = &*self.inner;
        // 1. client, and the request's id (both believed only from a trusted peer)
        let peer_trusted = inner.trusted.contains(conn.peer.ip());
        let client = inner.trusted.client_ip(conn.peer.ip(), req.headers());
        let request_id = inner.request_ids.settle(req.headers_mut(), peer_trusted);
        let mut trace = (inner.tracing.as_ref())
            .map(|t| t.start(req.headers(), req.method(), peer_trusted, SystemTime::now()));
        // 2. canonical, 3. route
        let canonical = canonical::canonicalize(&mut req, inner.paths, &inner.pseudonym)
            .and_then(|()| method_override::apply(&mut req, inner.method_override));
        // The access log and the span need method and path after the request is gone (the
        // canonical path, or the raw one when it was refused), kept only for them: the URI's
        // clone shares the bytes hyper parsed it from (a `String` of the path was one of a
        // request's allocations, `benches/allocations.rs`).
        let logged = (trace.is_some()
            || tracing::enabled!(target: "tollgate::access", tracing::Level::INFO))
        .then(|| (req.method().clone(), req.uri().clone()));
        let routed = canonical.and_then(|()| decide::route(&inner.router, &req));
        let route = routed.as_ref().ok().cloned();
        let grpc = respond::is_grpc(&req);
        // 4–5. limit, forward (what the limit step decided, for the access log)
        let mut decision = None;
        let result = match routed {
            Err(e) => Err(e),
            Ok(entry) => {
                let asker = Asker {
                    conn,
                    client,
                    peer_trusted,
                };
                let routed = decide::Routed {
                    limiter: &inner.limiter,
                    body_timeout: inner.body_timeout,
                    pool: &inner.pools[entry.route.upstream],
                    forwarder: &inner.forwarder,
                    metrics: &inner.route_metrics[entry.index],
                    response: &inner.response,
                    tracing: inner.tracing.as_ref(),
                };
                routed
                    .limit_and_forward(&entry, req, asker, &mut decision, trace.as_mut())
                    .await
            }
        };
        // 6. respond (a gRPC request's errors as gRPC; metrics and the log keep the HTTP
        // status the error stands for, so a rate-limited gRPC call still counts as a 429)
        let mut observed = None;
        let mut resp = result.unwrap_or_else(|err| {
            // Only the upstream's failures are worth a WARN each. Refusals of the client's
            // request (4xx, 429) are in the access log and metrics, so an attacker cannot
            // flood the log; a store outage's 503s are logged by the limiter at most once
            // a second, with a suppressed count.
            let route = route.as_ref().map_or(NO_ROUTE, |r| &*r.name);
            // The id joins the line to its access-log line and its problem body.
            let id = request_id.to_str().unwrap_or("");
            if err.is_upstream_failure() {
                warn!(route, %client, request_id = id, error = %err, kind = err.kind(), "request failed");
            } else {
                tracing::debug!(route, %client, request_id = id, error = %err, kind = err.kind(), "request refused");
            }
            if grpc {
                observed = Some(err.status().as_u16());
            }
            respond::refusal(&err, grpc, &inner.response, request_id.to_str().ok())
        });
        // Returned on every answer, the upstream's and the gateway's own.
        resp.headers_mut()
            .insert(inner.request_ids.header().clone(), request_id.clone());
        // 7. observe
        let took = started.elapsed();
        let status = observed.unwrap_or_else(|| resp.status().as_u16());
        let index = route
            .as_ref()
            .map_or(inner.route_metrics.len() - 1, |r| r.index);
        inner.route_metrics[index].record_request(status, took);
        if let Some((method, uri)) = logged {
            let path = uri.path();
            let route = route.as_ref().map_or(NO_ROUTE, |r| &*r.name);
            let id = request_id.to_str().unwrap_or("-");
            if let Some(trace) = trace {
                trace.end(route, path, status, &client.to_string(), id);
            }
            access_log(&Access {
                route,
                method: &method,
                path,
                status,
                took,
                client,
                request_id: id,
                decision: decision.as_ref(),
            });
        }
        resp
    }
}

/// Who asks, as step 1 found: the connection, the client it speaks for, and whether the
/// peer is a trusted proxy (whose forwarding headers are passed on).
struct Asker {
    conn: ConnInfo,
    client: IpAddr,
    peer_trusted: bool,
}

impl Gateway {
    /// A request the HTTP layer answered itself before `handle` saw it (a head larger than
    /// `max_header_bytes`: 431; a malformed head: 400): counted and logged like any other.
    pub fn record_refused(&self, status: u16, peer: IpAddr) {
        let inner = &*self.inner;
        inner.route_metrics[inner.route_metrics.len() - 1].record_request(status, Duration::ZERO);
        info!(target: "tollgate::access", route = NO_ROUTE, status, client = %canonical(peer), "request refused before routing");
    }
}

/// The request's `Content-Length`, when it declares one.
fn declared_length<B>(req: &Request<B>) -> Option<u64> {
    declared_length_of(req.headers())
}

/// [`declared_length`] of a request's headers.
fn declared_length_of(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}
