//! Step 3 of the request path: send the request to an upstream and bring its answer back,
//! streaming both bodies. Errors are returned, not answered: `respond` does that.

use std::net::IpAddr;

use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, Either, Empty};
use hyper::body::{Body, Incoming};
use tokio::time::Instant;

use super::headers::{self, Hop};
use super::upstream::Pool;
use super::{ConnInfo, Inner, ResponseBody, upgrade};
use crate::respond::GatewayError;
use crate::router::RouteEntry;

/// The body sent upstream: the client's stream, or nothing when a bodiless request is
/// retried on another URL (an empty body can be sent twice; a stream cannot).
pub type UpstreamBody = Either<Incoming, Empty<Bytes>>;

pub(super) async fn forward(
    inner: &Inner,
    entry: &RouteEntry,
    pool: &Pool,
    mut req: Request<Incoming>,
    conn: ConnInfo,
    client: IpAddr,
) -> Result<Response<ResponseBody>, GatewayError> {
    let upgrade_proto = headers::upgrade_request(req.headers());
    let client_upgrade = upgrade_proto.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let path_and_query = upstream_path(entry, &parts)?;
    let client_version = parts.version;
    prepare_headers(inner, &mut parts, conn, client, upgrade_proto.as_ref());
    parts.version = Version::HTTP_11;

    let deadline = Instant::now() + inner.upstream_timeout;
    let result =
        tokio::time::timeout_at(deadline, send(inner, pool, parts, body, &path_and_query)).await;
    let mut resp = match result {
        Ok(r) => r?,
        Err(_) => {
            return Err(GatewayError::UpstreamTimeout {
                upstream: pool.name.to_string(),
                timeout: inner.upstream_timeout,
            });
        }
    };

    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_side) = client_upgrade {
            let upstream_side = hyper::upgrade::on(&mut resp);
            tokio::spawn(upgrade::tunnel(client_side, upstream_side));
        }
    } else {
        headers::remove_hop_by_hop(resp.headers_mut(), None);
    }
    headers::add_via(resp.headers_mut(), client_version);
    Ok(resp.map(|b| b.boxed_unsync()))
}

/// Send with retries: a bodiless request whose connection failed is tried on the next URL;
/// a request with a body is sent once, since its stream cannot be replayed.
async fn send(
    inner: &Inner,
    pool: &Pool,
    parts: Parts,
    body: Incoming,
    path_and_query: &PathAndQuery,
) -> Result<Response<Incoming>, GatewayError> {
    let unavailable = |e: &dyn std::fmt::Display| GatewayError::UpstreamUnavailable {
        upstream: pool.name.to_string(),
        reason: e.to_string(),
    };
    let attempts = if body.is_end_stream() { pool.len() } else { 1 };
    if attempts <= 1 {
        let i = pool.pick();
        let mut req = Request::from_parts(parts, Either::Left(body));
        *req.uri_mut() = pool.uri(i, path_and_query).map_err(|e| unavailable(&e))?;
        return inner.client.request(req).await.map_err(|e| {
            if e.is_connect() {
                pool.mark_dead(i);
            }
            unavailable(&ErrorChain(&e))
        });
    }
    let mut last_error = None;
    for _ in 0..attempts {
        let i = pool.pick();
        let mut req = Request::new(Either::Right(Empty::new()));
        *req.method_mut() = parts.method.clone();
        *req.version_mut() = parts.version;
        *req.headers_mut() = parts.headers.clone();
        *req.uri_mut() = pool.uri(i, path_and_query).map_err(|e| unavailable(&e))?;
        match inner.client.request(req).await {
            Ok(resp) => return Ok(resp),
            Err(e) if e.is_connect() => {
                pool.mark_dead(i);
                last_error = Some(unavailable(&ErrorChain(&e)));
            }
            Err(e) => return Err(unavailable(&ErrorChain(&e))),
        }
    }
    Err(last_error.unwrap_or_else(|| unavailable(&"no upstream URL")))
}

/// The path (and query) to request upstream, after `strip_prefix`. Without a prefix to
/// strip this is the request's own (a cheap, shared clone): most requests pay no parsing.
fn upstream_path(entry: &RouteEntry, parts: &Parts) -> Result<PathAndQuery, GatewayError> {
    let original = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    if !entry.route.strip_prefix {
        return Ok(original);
    }
    let path = parts.uri.path();
    let rest = path
        .strip_prefix(entry.route.path_prefix.as_str())
        .unwrap_or(path);
    let slash = if rest.starts_with('/') { "" } else { "/" };
    let stripped = match parts.uri.query() {
        Some(q) => format!("{slash}{rest}?{q}"),
        None => format!("{slash}{rest}"),
    };
    PathAndQuery::try_from(stripped).map_err(|e| GatewayError::BadRequest(e.to_string()))
}

fn prepare_headers(
    inner: &Inner,
    parts: &mut Parts,
    conn: ConnInfo,
    client: IpAddr,
    upgrade: Option<&HeaderValue>,
) {
    // HTTP/2 clients send the host as :authority; HTTP/1.1 upstreams need it as Host.
    if !parts.headers.contains_key(header::HOST)
        && let Some(auth) = parts.uri.authority()
        && let Ok(v) = HeaderValue::from_str(auth.as_str())
    {
        parts.headers.insert(header::HOST, v);
    }
    headers::remove_hop_by_hop(&mut parts.headers, upgrade);
    let hop = Hop {
        peer: super::client_ip::canonical(conn.peer.ip()),
        tls: conn.tls,
        version: parts.version,
        peer_trusted: inner.trusted.contains(conn.peer.ip()),
    };
    headers::add_forwarding(&mut parts.headers, &hop, &conn.hop);
    headers::set_real_ip(&mut parts.headers, client, hop.peer, &conn.hop);
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
