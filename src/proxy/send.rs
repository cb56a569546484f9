//! Step 5's last leg: one request on its way to an upstream URL, on the worker's own
//! HTTP/1.1 connections ([`H1Pool`]) for plain `http://` URLs, on hyper-util's client for
//! the rest (TLS, HTTP/2); retried on the next URL while nothing could be sent.

use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Request, Response};
use http_body_util::{Either, Empty};
use hyper::body::{Body, Incoming};

use super::forward::{Forwarder, UpstreamBody};
use super::upstream::Pool;
use crate::respond::GatewayError;

/// A failed attempt: whether no connection could be made (the URL is then left out of
/// the rotation, and a bodiless request tries the next one), and the answer's error.
struct Failed {
    connect: bool,
    error: GatewayError,
}

/// Send with retries: a bodiless request whose connection failed is tried on the next URL;
/// a request with a body is sent once, since its stream cannot be replayed.
pub(super) async fn send(
    fwd: &Forwarder,
    pool: &Pool,
    parts: Parts,
    body: UpstreamBody,
    path_and_query: &PathAndQuery,
) -> Result<Response<Incoming>, GatewayError> {
    let attempts = if body.is_end_stream() { pool.len() } else { 1 };
    if attempts <= 1 {
        let i = pool.pick();
        return once(
            fwd,
            pool,
            i,
            Request::from_parts(parts, body),
            path_and_query,
        )
        .await
        .map_err(|f| f.error);
    }
    let mut last_error = None;
    for _ in 0..attempts {
        let i = pool.pick();
        let mut req = Request::new(Either::Right(Empty::new()));
        *req.method_mut() = parts.method.clone();
        *req.version_mut() = parts.version;
        *req.headers_mut() = parts.headers.clone();
        match once(fwd, pool, i, req, path_and_query).await {
            Ok(resp) => return Ok(resp),
            Err(f) if f.connect => last_error = Some(f.error),
            Err(f) => return Err(f.error),
        }
    }
    Err(last_error.unwrap_or_else(|| unavailable(pool, &"no upstream URL")))
}

/// One attempt on URL `i` of `pool`; a URL that could not be reached is marked dead.
async fn once(
    fwd: &Forwarder,
    pool: &Pool,
    i: usize,
    mut req: Request<UpstreamBody>,
    path_and_query: &PathAndQuery,
) -> Result<Response<Incoming>, Failed> {
    let failed = |connect: bool, e: &(dyn std::error::Error + 'static)| {
        if connect {
            pool.mark_dead(i);
        }
        Failed {
            connect,
            error: unavailable(pool, &ErrorChain(e)),
        }
    };
    let bad_uri = |e: http::Error| Failed {
        connect: false,
        error: unavailable(pool, &e),
    };
    if let Some((h1, authority)) = fwd.h1_for(pool, i) {
        // hyper's connection writes the URI as given: origin-form for an origin server.
        *req.uri_mut() = pool.origin(i, path_and_query).map_err(bad_uri)?;
        return Box::pin(h1.send(i, authority, req)).await.map_err(|e| {
            let connect = matches!(e, super::h1pool::H1Error::Connect(_));
            failed(connect, &e)
        });
    }
    *req.uri_mut() = pool.uri(i, path_and_query).map_err(bad_uri)?;
    fwd.client(pool)
        .request(req)
        .await
        .map_err(|e| failed(e.is_connect(), &e))
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
