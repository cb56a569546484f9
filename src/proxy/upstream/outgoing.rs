//! Step 5's first leg: the client's request made ready for its upstream, with nothing
//! awaited — the path after `strip_prefix`, the headers (hop-by-hop out, protected names
//! kept or dropped, forwarding claims in), the HTTP version the upstream speaks, the
//! client's side of an upgrade, and the request body under its watchdog. `forward.rs`
//! then takes a connection slot and sends it.
//!
//! Why apart from the send: everything here is synchronous, and a value made in an async
//! function that lives across an `.await` is a field of its future, which every caller
//! nests and moves by value; made here, the forward future holds only what the send needs.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Version, header};
use http_body_util::{Either, Empty};
use hyper::body::Body;

use super::forward::{Forwarder, UpstreamBody};
use super::pool::Pool;
use super::watchdog::{BodyWatch, Watchdog};
use crate::config::UpstreamProtocol;
use crate::limit::SentBytes;
use crate::limit::keys::canonical;
use crate::proxy::headers::{self, Hop};
use crate::proxy::key_body::ClientBody;
use crate::proxy::{Asker, ConnInfo};
use crate::respond::GatewayError;
use crate::router::RouteEntry;

/// A request ready to leave, and what the answer's handling needs of the original.
pub(super) struct Outgoing {
    /// Headers, version and body as the upstream gets them (the URI is set per URL).
    pub req: Request<UpstreamBody>,
    /// The path and query to ask for, after `strip_prefix`.
    pub path_and_query: PathAndQuery,
    /// The client's HTTP version: the answer's `Via` and version line follow it.
    pub client_version: Version,
    /// The protocols the client asked to upgrade to, when the route allows it.
    pub upgrade_proto: Option<HeaderValue>,
    /// The client's side of that upgrade, taken before the request was split.
    pub client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// The request body's watch (silence, size), when it has a body.
    pub watch: Option<Arc<BodyWatch>>,
}

/// Make `req` (from `asker`) ready for `pool`, or refuse it (a path left as a dot segment).
pub(super) fn prepare(
    fwd: &Forwarder,
    entry: &RouteEntry,
    pool: &Pool,
    mut req: Request<ClientBody>,
    asker: &Asker,
) -> Result<Outgoing, GatewayError> {
    let conn = &asker.conn;
    let upgrade_proto = headers::upgrade_request(req.headers(), &entry.route.upgrades);
    let client_upgrade = upgrade_proto.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let path_and_query = upstream_path(entry, &parts)?;
    let client_version = parts.version;
    // `TE: trailers` is hop-by-hop on HTTP/1.1, but on HTTP/2 it is the one TE value a
    // request may carry, and gRPC servers expect it: passed on to an h2 upstream.
    let trailers = !headers::surely_absent(&parts.headers, &header::TE)
        && parts
            .headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    let hop = Hop {
        peer: canonical(conn.peer.ip()),
        tls: conn.tls,
        version: parts.version,
        peer_trusted: asker.peer_trusted,
    };
    prepare_headers(
        fwd,
        &mut parts,
        &hop,
        conn,
        asker.client,
        upgrade_proto.as_ref(),
    );
    parts.version = match pool.protocol {
        UpstreamProtocol::Http1 => Version::HTTP_11,
        UpstreamProtocol::H2 => {
            if trailers {
                parts
                    .headers
                    .insert(header::TE, HeaderValue::from_static("trailers"));
            }
            Version::HTTP_2
        }
    };
    // `request_bytes` policies count the body (the proxy put their counter here).
    let sent = parts.extensions.remove::<SentBytes>().map(|s| s.0);
    let watch = (!body.is_end_stream()).then(|| BodyWatch::new(sent));
    let body = match &watch {
        None => Either::Right(Empty::<Bytes>::new()),
        Some(w) => Either::Left(Watchdog::new(
            body,
            fwd.body_timeout(),
            entry.route.max_body_bytes,
            Some(w.clone()),
        )),
    };
    Ok(Outgoing {
        req: Request::from_parts(parts, body),
        path_and_query,
        client_version,
        upgrade_proto,
        client_upgrade,
        watch,
    })
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
    // The router matched the prefix (in any case on a `case_insensitive` route): cut its
    // length. A prefix may end inside a segment (`/pub` matches `/pub..`): what is left
    // then starts a segment of its own upstream, which must not be a dot segment, or the
    // upstream would resolve `/public/../private/x` outside the base path.
    let path = parts.uri.path();
    let rest = path.get(entry.route.path_prefix.len()..).unwrap_or(path);
    let slash = if rest.starts_with('/') { "" } else { "/" };
    if slash == "/" && matches!(rest.split('/').next(), Some("." | "..")) {
        return Err(GatewayError::BadRequest(
            "the path left after the route's prefix is a dot segment".into(),
        ));
    }
    let stripped = match parts.uri.query() {
        Some(q) => format!("{slash}{rest}?{q}"),
        None => format!("{slash}{rest}"),
    };
    PathAndQuery::try_from(stripped).map_err(|e| GatewayError::BadRequest(e.to_string()))
}

fn prepare_headers(
    fwd: &Forwarder,
    parts: &mut Parts,
    hop: &Hop,
    conn: &ConnInfo,
    client: IpAddr,
    upgrade: Option<&HeaderValue>,
) {
    // The canonical step already wrote the one authority (HTTP/2 :authority, absolute-form
    // target or Host) as `Host`, which is what an HTTP/1.1 upstream needs.
    headers::remove_hop_by_hop(&mut parts.headers, upgrade, fwd.protected());
    // Room for the five forwarding headers added below: the map of a small request (wrk's
    // has one header) otherwise grows, rehashing, while they go in.
    parts.headers.reserve(5);
    fwd.names().strip(&mut parts.headers, hop.peer_trusted);
    headers::add_forwarding(&mut parts.headers, hop, &conn.hop, fwd.via());
    headers::set_real_ip(&mut parts.headers, client, hop.peer, &conn.hop);
}
