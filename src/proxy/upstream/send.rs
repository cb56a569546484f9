//! Step 5's last leg: one request on its way to an upstream URL, on the worker's own
//! HTTP/1.1 connections ([`H1Pool`]) for plain `http://` URLs, on hyper-util's client for
//! the rest (TLS, HTTP/2); sent again by the rules of `retry.rs`, each attempt's outcome
//! told to the URL's outlier state (`outlier.rs`).
//!
//! Only what the upstream did is told: an attempt that failed because the client's own
//! request body failed first (malformed framing, a client gone mid-body, silence past
//! `body_timeout`, bytes past `max_body_bytes`: the body's watchdog saw it, `watchdog.rs`)
//! is the client's fault. It counts no failure against the URL, ejects nothing, is never
//! retried, and is counted apart in `tollgate_client_body_errors_total`.
//!
//! [`H1Pool`]: super::h1pool::H1Pool

use std::future::Future;
use std::pin::Pin;

use http::uri::PathAndQuery;
use http::{HeaderMap, Method, Request, Response, Version};
use http_body_util::{Either, Empty};
use hyper::body::{Body, Incoming};
use tokio::time::Instant;

use super::forward::{Forwarder, UpstreamBody};
use super::outlier::{InFlight, Outcome};
use super::pool::{Pool, Tried};
use super::retry;
use super::watchdog::BodyWatch;
use crate::respond::GatewayError;

/// A failed attempt.
enum Failed {
    /// No connection could be made: nothing was sent. The request comes back when the
    /// connection pool could return it (so even a body can go to the next URL).
    Unsent(GatewayError, Option<Box<Request<UpstreamBody>>>),
    /// The connection failed after the request left, before the answer's head.
    Broken(GatewayError),
    /// The request could not be made (a bad URI): no URL would do better.
    Refused(GatewayError),
    /// The client's request body failed (its watch says why) and took the attempt with
    /// it: not the URL's failure, and no other URL would do better.
    Client(GatewayError),
}

/// What a bodiless request is rebuilt from for another attempt.
struct Template {
    method: Method,
    version: Version,
    headers: HeaderMap,
}

impl Template {
    fn request(&self) -> Request<UpstreamBody> {
        let mut req = Request::new(Either::Right(Empty::new()));
        *req.method_mut() = self.method.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// An upstream call in flight: the answer, with the in-flight mark of the URL that gave it
/// (held until its body ends).
pub(super) type Sending<'a> =
    Pin<Box<dyn Future<Output = Result<(Response<Incoming>, InFlight), GatewayError>> + Send + 'a>>;

/// Send `req` to `pool`, retrying as `retry.rs` allows until `deadline` (the upstream
/// timeout); `watch` is the request body's, when it has one. Boxed, once: the attempt's state (the request, hyper's send) lives in the
/// box, so the caller's future, moved by value into its own box and through its parents,
/// carries a pointer instead of kilobytes.
pub(super) fn send<'a>(
    fwd: &'a Forwarder,
    pool: &'a Pool,
    req: Request<UpstreamBody>,
    path_and_query: &'a PathAndQuery,
    deadline: Instant,
    watch: Option<&'a BodyWatch>,
) -> Sending<'a> {
    let replayable = req.body().is_end_stream();
    let resend = replayable && pool.retry.retries > 0 && retry::idempotent(req.method());
    if resend {
        pool.backends.deposit();
    }
    if pool.len() == 1 && !resend {
        // The usual case: one URL, nothing to retry; a refused connection has nowhere else
        // to go, and no copy of the request is made.
        return Box::pin(async move {
            once(fwd, pool, 0, req, path_and_query, watch)
                .await
                .map_err(Failed::into_error)
        });
    }
    let attempt = Attempt {
        fwd,
        pool,
        path_and_query,
        watch,
    };
    Box::pin(retrying(attempt, req, deadline, resend))
}

/// What every attempt of one request shares.
struct Attempt<'a> {
    fwd: &'a Forwarder,
    pool: &'a Pool,
    path_and_query: &'a PathAndQuery,
    watch: Option<&'a BodyWatch>,
}

/// [`send`] with more than one URL or with retries: the attempts, until one answers or
/// the rules of `retry.rs` say to stop.
async fn retrying(
    a: Attempt<'_>,
    req: Request<UpstreamBody>,
    deadline: Instant,
    resend: bool,
) -> Result<(Response<Incoming>, InFlight), GatewayError> {
    let pool = a.pool;
    let replayable = req.body().is_end_stream();
    let template = replayable.then(|| Template {
        method: req.method().clone(),
        version: req.version(),
        headers: req.headers().clone(),
    });
    let mut next = Some(req);
    let mut tried = Tried::default();
    let mut retries = 0;
    let m = &pool.backends.retry_metrics;
    loop {
        // A request goes again only with its body back or a template to rebuild it from
        // (the arms below see to that): the `else` is never taken.
        let Some(req) = next
            .take()
            .or_else(|| template.as_ref().map(Template::request))
        else {
            return Err(unavailable(pool, &"the request cannot be sent again"));
        };
        let i = pool.pick(tried);
        tried.add(i);
        let (wait, error) = match once(a.fwd, pool, i, req, a.path_and_query, a.watch).await {
            Ok((resp, held)) => {
                let status = resp.status().as_u16();
                let again = resend
                    && retries < pool.retry.retries
                    && pool.retry.on_status.contains(&status);
                if !again {
                    return Ok((resp, held));
                }
                let wait = retry::wait(&pool.retry, retries, Some(resp.headers()));
                // A Retry-After past the upstream timeout: the answer, as it is.
                if Instant::now() + wait >= deadline {
                    m.refused_deadline.inc();
                    return Ok((resp, held));
                }
                if !pool.backends.withdraw() {
                    m.refused_status.inc();
                    return Ok((resp, held));
                }
                m.status.inc();
                (wait, None)
            }
            Err(Failed::Unsent(error, back)) => {
                if tried.all(pool.len()) || (back.is_none() && template.is_none()) {
                    return Err(error);
                }
                m.connect.inc();
                next = back.map(|b| *b);
                continue;
            }
            Err(Failed::Broken(error)) => {
                if !(resend && retries < pool.retry.retries) {
                    return Err(error);
                }
                if !pool.backends.withdraw() {
                    m.refused_broken.inc();
                    return Err(error);
                }
                m.broken.inc();
                (retry::wait(&pool.retry, retries, None), Some(error))
            }
            // The client's body failed: no URL would do better, and sending it elsewhere
            // would spend the budget (and another URL's slot) on the client's fault.
            Err(f @ (Failed::Refused(_) | Failed::Client(_))) => return Err(f.into_error()),
        };
        retries += 1;
        if Instant::now() + wait >= deadline {
            m.refused_deadline.inc();
            return Err(error.unwrap_or_else(|| unavailable(pool, &"no time left to retry")));
        }
        tokio::time::sleep(wait).await;
    }
}

impl Failed {
    fn into_error(self) -> GatewayError {
        match self {
            Failed::Unsent(e, _) | Failed::Broken(e) | Failed::Refused(e) | Failed::Client(e) => e,
        }
    }
}

/// One attempt on URL `i` of `pool`, its outcome recorded for outlier detection — unless
/// the request body's `watch` says the client's body failed first, which is no outcome of
/// the URL's.
async fn once(
    fwd: &Forwarder,
    pool: &Pool,
    i: usize,
    mut req: Request<UpstreamBody>,
    path_and_query: &PathAndQuery,
    watch: Option<&BodyWatch>,
) -> Result<(Response<Incoming>, InFlight), Failed> {
    let held = pool.backends.start(i);
    // Read after the send failed: the watchdog sets the fault before it hands hyper the
    // error that ends the send, so a failure the body caused always finds it set.
    let failed = |unsent: bool,
                  e: &(dyn std::error::Error + 'static),
                  back: Option<Request<UpstreamBody>>| {
        if let Some(fault) = watch.and_then(BodyWatch::fault) {
            pool.backends.client_body_error(fault);
            tracing::debug!(upstream = %pool.name, error = %ErrorChain(e), %fault, "upstream call ended by the client's request body");
            return Failed::Client(fault.client_error());
        }
        let error = unavailable(pool, &ErrorChain(e));
        if unsent {
            pool.backends.record(i, Outcome::Unreachable);
            Failed::Unsent(error, back.map(Box::new))
        } else {
            pool.backends.record(i, Outcome::Broken);
            Failed::Broken(error)
        }
    };
    let refused = |e: http::Error| Failed::Refused(unavailable(pool, &e));
    let answer = if let Some((h1, authority)) = fwd.h1_for(pool, i) {
        // hyper's connection writes the URI as given: origin-form for an origin server.
        *req.uri_mut() = pool.origin(i, path_and_query).map_err(refused)?;
        // In place: `send` boxed the attempt once, this with it.
        h1.send(i, authority, req)
            .await
            .map_err(|(e, back)| match e {
                super::h1pool::H1Error::Connect(_) => failed(true, &e, back),
                _ => failed(false, &e, None),
            })?
    } else {
        *req.uri_mut() = pool.uri(i, path_and_query).map_err(refused)?;
        (fwd.client(pool).request(req).await).map_err(|e| failed(e.is_connect(), &e, None))?
    };
    pool.backends
        .record(i, Outcome::Answered(answer.status().as_u16()));
    Ok((answer, held))
}

fn unavailable(pool: &Pool, e: &dyn std::fmt::Display) -> GatewayError {
    GatewayError::UpstreamUnavailable {
        upstream: pool.name.to_string(),
        reason: e.to_string(),
    }
}

/// hyper's errors hide their cause behind `source()`; logs and problem bodies want it.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}
