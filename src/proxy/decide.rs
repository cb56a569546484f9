//! Steps 3 to 5 of a request (as `proxy/mod.rs` numbers them), after `Gateway::handle` has
//! made it canonical and found who asks: its route ([`route`], from the router alone), then
//! for a routed request the limiter's decision on it and forwarding what is admitted
//! ([`Routed`]: the limiter, and the one pool and the one route's metrics the request can
//! reach). Each reads only what its arguments name; `Gateway::handle` hands them out of the
//! worker's request path.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{Request, Response};
use hyper::body::Incoming;

use super::key_body::{self, ClientBody};
use super::metrics::RouteMetrics;
use super::trace::{RequestTrace, Tracing};
use super::{Asker, Forwarder, Pool, canonical, declared_length};
use crate::body::{self, ResponseBody};
use crate::config::Response as ResponseConfig;
use crate::limit::keys::Target;
use crate::limit::{Admitted, At, Checked, Decision, Limiter};
use crate::respond::{self, GatewayError};
use crate::router::{RouteEntry, Router};

/// Step 3: the route of a canonical request, or 404.
pub(super) fn route<B>(router: &Router, req: &Request<B>) -> Result<Arc<RouteEntry>, GatewayError> {
    let host = canonical::host_of(req.headers());
    router
        .find(host, req.uri().path(), req.method())
        .cloned()
        .ok_or_else(|| GatewayError::NoRoute {
            method: req.method().clone(),
            path: req.uri().path().to_owned(),
        })
}

/// Steps 4 and 5 for a request of one route: what they read of the worker's request path.
pub(super) struct Routed<'a> {
    /// Step 4: every route's policies and their state.
    pub limiter: &'a Limiter,
    /// Step 4: the longest a body read for `form:`/`json:` keys may wait for a frame.
    pub body_timeout: Duration,
    /// Step 5: the route's upstream pool.
    pub pool: &'a Pool,
    /// Step 5: the upstream client, its timeouts and the headers it rewrites.
    pub forwarder: &'a Forwarder,
    /// Step 5: the route's metrics (the upstream's time).
    pub metrics: &'a RouteMetrics,
    /// Step 5: which rate-limit headers an admitted request's response carries.
    pub response: &'a ResponseConfig,
    /// The request's spans, when `[telemetry]` traces.
    pub tracing: Option<&'a Tracing>,
}

impl Routed<'_> {
    /// Steps 4 and 5: limit `req` (`decision` gets what the limit step decided, for the
    /// access log), then forward it if admitted.
    pub(super) async fn limit_and_forward(
        self,
        entry: &RouteEntry,
        req: Request<Incoming>,
        asker: Asker,
        decision: &mut Option<Decision>,
        trace: Option<&mut RequestTrace>,
    ) -> Result<Response<ResponseBody>, GatewayError> {
        let client = asker.client;
        if let Some(limit) = entry.route.max_body_bytes
            && declared_length(&req).is_some_and(|n| n > limit)
        {
            // Refused before the limit step: an oversized body spends no budget.
            return Err(GatewayError::PayloadTooLarge { limit });
        }
        // 4. limit (after reading the body, when a policy keys on it)
        let (parts, body) = req.into_parts();
        let (body, keyed) = match entry.route.key_body {
            None => (ClientBody::from(body), None),
            // Boxed, so that routes without body keys do not carry the reader's state.
            Some(rules) => {
                Box::pin(key_body::read(
                    &parts.headers,
                    body,
                    rules,
                    self.body_timeout,
                ))
                .await?
            }
        };
        let mut req = Request::from_parts(parts, body);
        let at = At {
            route: entry.index,
            route_name: &entry.name,
            client,
            method: req.method(),
        };
        let target = Target {
            body: keyed.as_ref(),
            ..Target::of(req.uri())
        };
        let traced = trace.as_ref().zip(self.tracing);
        let began = traced.map(|_| SystemTime::now());
        // Decided here, without a future, unless a policy's site answers later (the store,
        // a lease, an owner, gossip peers): that walk comes boxed.
        let (admission, store) = match self.limiter.check_now(at, target, req.headers()) {
            Checked::Now(admission) => (admission, Duration::ZERO),
            Checked::Later(check) if traced.is_some() => {
                crate::limit::store_time::measured(check).await
            }
            Checked::Later(check) => (check.await, Duration::ZERO),
        };
        if let (Some((span, tracing)), Some(began)) = (traced, began) {
            span.limit(tracing, began, &admission.decision, store);
        }
        *decision = Some(admission.decision);
        let Admitted {
            report,
            delay,
            permits,
            counted,
            ..
        } = respond::admitted(admission.answer)?;
        if let Some(delay) = delay {
            // Leaky bucket: the slot is reserved; wait for it without blocking a thread.
            tokio::time::sleep(Duration::from_nanos(delay.get())).await;
        }
        // 5. forward (a streamed body's bytes counted for `request_bytes` policies)
        if let Some(sent) = counted.sent_bytes() {
            req.extensions_mut().insert(sent);
        }
        let pool = self.pool;
        let call = match (&trace, self.tracing) {
            (Some(span), Some(tracing)) => {
                Some(span.upstream(tracing, &pool.name, req.headers_mut()))
            }
            _ => None,
        };
        let sent = Instant::now();
        let result = self.forwarder.forward(entry, pool, req, asker, sent).await;
        self.metrics.record_upstream(sent.elapsed());
        if let Some(call) = call {
            call.end(result.as_ref().ok().map(|f| f.response.status().as_u16()));
        }
        // The head's status settles `count` policies (an upstream that failed: ours).
        match &result {
            Ok(f) => counted.settle(f.response.status().as_u16(), f.response.headers()),
            Err(e) => counted.settle(e.status().as_u16(), &http::HeaderMap::new()),
        }
        let forwarded = result?;
        let mut resp = forwarded.response;
        respond::ratelimit::add_headers(resp.headers_mut(), &report, self.response, false);
        // Permits, then the upstream slot, are released once the body is done — or, after
        // a protocol switch, once the tunnel is closed (the `101`'s body is empty).
        let held = (permits, forwarded.slot, forwarded.url);
        match forwarded.tunnel {
            Some(tunnel) => {
                tunnel.spawn(held);
                Ok(body::hold(resp, ()))
            }
            None => Ok(body::hold(resp, held)),
        }
    }
}
