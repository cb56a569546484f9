//! What one request goes through in a layer: its peer ([`ClientAddr`]) and client (the
//! trusted proxies' forwarding header), its canonical path, the limit step
//! (`Limiter::check_request`, the layer's route), then tollgate's answers ([`refused`]
//! turns the outcome into a refusal or an admission, `answer/` writes a refusal — 429, 400,
//! 401, 503, a gRPC call's as gRPC). An admitted request goes to the inner service, and its
//! response gets the `RateLimit` headers and carries the request's concurrency permits
//! until its body is done, as the gateway's responses do.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::Body;
use http_body_util::BodyExt;
use tower::{Layer, Service};
use tower_http::request_id::RequestId;

use super::ClientAddr;
use super::answer::{self, Refusal, ResponseHeaders, refused};
use super::body::{self, BoxError, ResponseBody};
use super::client_ip::TrustedProxies;
use super::path::{PathRules, normalize_path};
use crate::{Admitted, LimiterHandle};

/// The limiter in front of a service: one route of its spec, decided for every request the
/// service gets. Cheap to clone; every service it wraps decides on one limiter.
#[derive(Clone)]
pub struct RateLimitLayer {
    /// The limiter, reloaded or not, and how requests are read and answered.
    shared: Arc<Shared>,
    /// The route's index in the limiter's spec.
    route: usize,
    /// The route's name: what keys with `route` and decision counters carry.
    name: Arc<str>,
    client: ClientAddr,
}

/// What every service of one layer reads and answers with.
#[derive(Clone)]
struct Shared {
    limiter: Arc<LimiterHandle>,
    /// Which rate-limit headers answers carry.
    response: ResponseHeaders,
    /// Whose forwarding headers name the client.
    trusted: TrustedProxies,
    /// How the path `path` keys read is made canonical.
    paths: PathRules,
}

impl RateLimitLayer {
    /// The layer of route `route` (its index in the spec's `routes`), named `name` in keys
    /// and metrics, deciding on `limiter`. Clients are their TCP peer ([`ClientAddr`]), no
    /// proxy is trusted, paths follow the strict [`PathRules::default`], and every limited
    /// response carries the `RateLimit` headers; the builder methods below change that.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate_limit::layer::RateLimitLayer;
    /// use tollgate_limit::spec::{AlgorithmName, KeyPart, LimiterSpec, Policy};
    /// use tollgate_limit::{LimiterHandle, clock::SystemClock};
    ///
    /// let per_ip = Policy::new("per_ip", vec![KeyPart::Ip], AlgorithmName::Gcra, 10, Duration::from_secs(1))?;
    /// let spec = LimiterSpec::in_memory(vec![per_ip]).route("api", &["per_ip"])?;
    /// let registry = &mut prometheus_client::registry::Registry::default();
    /// let limiter = LimiterHandle::new(spec, Arc::new(SystemClock::new()), registry)?;
    /// let layer = RateLimitLayer::new(Arc::new(limiter), 0, "api"); // route 0: "api"
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(limiter: Arc<LimiterHandle>, route: usize, name: &str) -> Self {
        RateLimitLayer {
            shared: Arc::new(Shared {
                limiter,
                response: ResponseHeaders::default(),
                trusted: TrustedProxies::default(),
                paths: PathRules::default(),
            }),
            route,
            name: Arc::from(name),
            client: ClientAddr::default(),
        }
    }

    /// Read the peer with `client` instead of [`ClientAddr::default`].
    pub fn client_addr(mut self, client: ClientAddr) -> Self {
        self.client = client;
        self
    }

    /// Believe these proxies' forwarding header about who the client is.
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        Arc::make_mut(&mut self.shared).trusted = trusted;
        self
    }

    /// Make paths canonical by `rules` before `path` keys read them.
    pub fn path_rules(mut self, rules: PathRules) -> Self {
        Arc::make_mut(&mut self.shared).paths = rules;
        self
    }

    /// Which rate-limit headers answers carry.
    pub fn response_headers(mut self, response: ResponseHeaders) -> Self {
        Arc::make_mut(&mut self.shared).response = response;
        self
    }
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("layer", &self.name)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service behind the limiter (made by [`RateLimitLayer`]).
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    layer: RateLimitLayer,
}

impl<S, B, RB> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The service polled ready is the one that takes the request; a clone waits for
        // the next `poll_ready` (tower's rule for services that call out of a future).
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        Box::pin(self.layer.clone().serve(inner, req))
    }
}

impl RateLimitLayer {
    async fn serve<S, B, RB>(
        self,
        mut inner: S,
        req: Request<B>,
    ) -> Result<Response<ResponseBody>, S::Error>
    where
        S: Service<Request<B>, Response = Response<RB>>,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        let shared = &*self.shared;
        let grpc = answer::is_grpc(&req);
        // tower-http's `SetRequestIdLayer`, outside this one, names the request: its id is
        // the problem body's `request_id`, as the gateway's own id is.
        let request_id = req
            .extensions()
            .get::<RequestId>()
            .and_then(|id| id.header_value().to_str().ok())
            .map(str::to_owned);
        let refuse = |refusal: Refusal| {
            let answer = refusal.answer();
            if grpc {
                answer::grpc_response(&answer, &shared.response)
            } else {
                answer::problem_response(&answer, &shared.response, request_id.as_deref())
            }
        };
        let Some(peer) = self.client.peer(req.extensions()) else {
            return Ok(no_peer(&self.name, &shared.response));
        };
        let client = shared.trusted.client_ip(peer, req.headers());
        // Keys on `path` read the canonical path, as the gateway's do (the service still
        // sees the request as it came); a path that has none is the gateway's 400.
        let uri = match limited_uri(req.uri(), shared) {
            Ok(uri) => uri,
            Err(why) => return Ok(refuse(Refusal::BadRequest(why))),
        };
        // The limiter that decides now: a reload swaps it whole.
        let limiter = shared.limiter.current();
        let admission = limiter
            .check_request(
                self.route,
                &self.name,
                client,
                req.method(),
                Some(&uri),
                req.headers(),
            )
            .await;
        let Admitted {
            report,
            delay,
            permits,
            counted,
            ..
        } = match refused(admission.answer) {
            Ok(admitted) => admitted,
            Err(err) => return Ok(refuse(err)),
        };
        if let Some(delay) = delay {
            // Leaky bucket: the slot is reserved; wait for it without blocking a thread.
            tokio::time::sleep(Duration::from_nanos(delay.get())).await;
        }
        let resp = inner.call(req).await?;
        // The head settles `count` and `response_cost_header` policies.
        counted.settle(resp.status().as_u16(), resp.headers());
        let mut resp = resp.map(|b| b.map_err(Into::into).boxed_unsync());
        answer::headers::add_headers(resp.headers_mut(), &report, &shared.response, false);
        // Concurrency permits are given back once the body is sent (or dropped).
        Ok(body::hold(resp, permits))
    }
}

/// The request's target with its canonical path, for the limiter's keys.
fn limited_uri(uri: &Uri, shared: &Shared) -> Result<Uri, String> {
    let path = match normalize_path(uri.path(), shared.paths) {
        Ok(Cow::Borrowed(_)) => return Ok(uri.clone()),
        Ok(Cow::Owned(path)) => path,
        Err(e) => return Err(e.to_string()),
    };
    let target = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    target
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())
}

/// 500: the layer cannot tell who is asking, so no policy can be asked fairly. A wiring
/// mistake (the app is served without `ConnectInfo`), said in the body and logged. Problem
/// details without a `request_id`, to a gRPC call too, as this answer has always been.
fn no_peer(layer: &str, response: &ResponseHeaders) -> Response<ResponseBody> {
    tracing::error!(
        layer,
        "rate-limit layer: the request carries no peer address (serve the router with `into_make_service_with_connect_info::<SocketAddr>()`, or give the layer a `ClientAddr`)"
    );
    answer::problem_response(&Refusal::NoClientAddress.answer(), response, None)
}
