//! Step 5 of the request path: send the request to an upstream and bring its answer back,
//! streaming both bodies (each watched for silence, the request's for size). Errors are
//! returned, not answered: `respond` does that.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, Version, header};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;

use crate::proxy::key_body::ClientBody;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::h1pool::H1Pool;
use super::outgoing::{self, Outgoing};
use super::pool::Pool;
use super::upgrade;
use super::watchdog::{BodyWatch, Watchdog};
use crate::config::{Config, Upstream, UpstreamProtocol};
use crate::proxy::Asker;
use crate::proxy::headers::names::Protected;
use crate::proxy::headers::{self, ViaValues};
use crate::respond::GatewayError;
use crate::router::RouteEntry;

/// The body sent upstream: the client's stream (watched), or nothing for a bodiless request,
/// which may then be retried on another URL (an empty body can be sent twice; a stream
/// cannot).
pub type UpstreamBody = Either<Watchdog<ClientBody>, Empty<Bytes>>;

/// The upstream's answer and the connection slot it holds until its body ends, or — after
/// a protocol switch — until the tunnel ends.
pub(in crate::proxy) struct Forwarded {
    pub response: Response<Watchdog<Incoming>>,
    pub slot: OwnedSemaphorePermit,
    /// The answering URL's in-flight mark (what least-request balancing reads), held as
    /// long as the slot.
    pub url: super::outlier::InFlight,
    /// Set after a `101`: the tunnel to start, holding what the request holds.
    pub tunnel: Option<upgrade::Tunnel>,
}

/// The client of one upstream: plain HTTP, or TLS for `https://` URLs.
pub(super) type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpstreamBody>;

/// A pooled client for upstream `up` (its TLS settings for https URLs), connecting within
/// `connect_timeout`; the health checks use one too.
pub(super) fn upstream_client(up: &Upstream, connect_timeout: Duration) -> UpstreamClient {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    // https URLs need the TCP connector to pass them on to TLS.
    http.enforce_http(false);
    let tls = HttpsConnectorBuilder::new()
        .with_tls_config(super::tls::client_config(up))
        .https_or_http();
    let mut client = Client::builder(TokioExecutor::new());
    client
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(up.max_connections.get());
    match up.protocol {
        UpstreamProtocol::Http1 => client.build(tls.enable_http1().wrap_connector(http)),
        // HTTP/2 only: h2c with prior knowledge on http://, ALPN `h2` on https://. One
        // connection carries many streams, which gRPC expects.
        UpstreamProtocol::H2 => {
            client.http2_only(true);
            client.build(tls.enable_http2().wrap_connector(http))
        }
    }
}

/// Everything step 5 needs besides the request: made once per worker from the config.
pub(in crate::proxy) struct Forwarder {
    /// Pooled keep-alive connections, one client per upstream (config order): each has
    /// its own TLS roots and client certificate. Used for `https://` URLs and HTTP/2.
    clients: Vec<UpstreamClient>,
    /// Per upstream speaking HTTP/1.1: this worker's own connections to its `http://`
    /// URLs (`h1pool`), cheaper per request than the client's shared pool.
    h1: Vec<Option<Arc<H1Pool>>>,
    /// Longest wait for an upstream's response head (and for a free connection).
    upstream_timeout: Duration,
    /// Longest silence inside a request or response body.
    body_timeout: Duration,
    /// Longest silence inside an upgraded (WebSocket) tunnel.
    idle_timeout: Duration,
    /// Headers a client may not strip by naming them in `Connection`, because they carry
    /// identity the gateway keyed on or the upstream relies on.
    protected: Vec<HeaderName>,
    /// Every protected name (identity headers, forwarding claims, method overrides), by
    /// which a header in any `_`/`-` spelling is kept or removed.
    names: Protected,
    /// This hop's `Via` entries, per client HTTP version.
    via: ViaValues,
}

impl Forwarder {
    pub fn new(config: &Config, protected: Vec<HeaderName>) -> Self {
        let s = &config.server;
        let clients = config
            .upstreams
            .iter()
            .map(|u| upstream_client(u, s.upstream_timeout))
            .collect();
        let h1 = config
            .upstreams
            .iter()
            .map(|u| {
                (u.protocol == UpstreamProtocol::Http1)
                    .then(|| H1Pool::new(u.urls.len(), u.max_connections.get(), s.upstream_timeout))
            })
            .collect();
        Forwarder {
            clients,
            h1,
            upstream_timeout: s.upstream_timeout,
            body_timeout: s.body_timeout,
            idle_timeout: s.idle_timeout,
            names: Protected::new(&protected),
            protected,
            via: ViaValues::new(&s.via_pseudonym),
        }
    }

    /// Send `req` (from `asker`: the connection, the client it speaks for, whether its
    /// peer is a trusted proxy) to `pool` and bring the answer back; `now` is the caller's
    /// clock reading as it hands the request over (one read serves both).
    ///
    /// The request is made ready for its upstream before anything is awaited
    /// (`outgoing.rs`), and the call is one boxed future (`send.rs`): this future, which
    /// its callers nest and move, keeps little more than the request while it waits.
    pub async fn forward(
        &self,
        entry: &RouteEntry,
        pool: &Pool,
        req: Request<ClientBody>,
        asker: Asker,
        now: std::time::Instant,
    ) -> Result<Forwarded, GatewayError> {
        let out = outgoing::prepare(self, entry, pool, req, &asker)?;
        let now = Instant::from_std(now);
        let timed_out = || GatewayError::UpstreamTimeout {
            upstream: pool.name.to_string(),
            timeout: self.upstream_timeout,
        };
        let (slot, waited) =
            (self.slot(pool, now + self.upstream_timeout).await).ok_or_else(timed_out)?;
        // The answer is awaited from when the request leaves: after the slot, when waited
        // for; else from `now`, read once (a clock read costs ~20 ns here, a few a request).
        let leaves = if waited { Instant::now() } else { now };
        let timeout = self.upstream_timeout;
        let Outgoing {
            req,
            path_and_query,
            client_version,
            upgrade_proto,
            client_upgrade,
            watch,
        } = out;
        let watch = watch.as_deref();
        let sent = super::send::send(self, pool, req, &path_and_query, leaves + timeout, watch);
        let (mut resp, url) = match await_answer(sent, watch, leaves, timeout).await {
            Some(r) => r.map_err(|e| client_fault(watch).unwrap_or(e))?,
            None => return Err(client_fault(watch).unwrap_or_else(timed_out)),
        };

        let mut tunnel = None;
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            check_switch(&resp, upgrade_proto.as_ref(), entry, pool)?;
            // The upgraded connection stays open as long as the tunnel: so does its slot
            // (the caller starts it with the slot and the request's permits).
            tunnel = client_upgrade.map(|client_side| upgrade::Tunnel {
                client: client_side,
                upstream: hyper::upgrade::on(&mut resp),
                idle: self.idle_timeout,
            });
        } else {
            headers::remove_hop_by_hop(resp.headers_mut(), None, &[]);
        }
        headers::add_via(resp.headers_mut(), client_version, &self.via);
        // An intermediary sends its own HTTP version, not the upstream's (RFC 9110 §2.5):
        // an HTTP/1.0 upstream's answer, passed on as HTTP/1.0, would end the client's
        // keep-alive connection. HTTP/1.1 on an HTTP/1.x connection, as the gateway's own
        // answers are: hyper writes HTTP/1.0 to an HTTP/1.0 client, keeping its connection
        // open when it asked to. HTTP/2 sends no version line.
        *resp.version_mut() = match client_version {
            Version::HTTP_2 | Version::HTTP_3 => client_version,
            _ => Version::HTTP_11,
        };
        let upstream = pool.name.clone();
        let response =
            resp.map(|b| Watchdog::new(b, self.body_timeout, None, None).on_stall(upstream));
        Ok(Forwarded {
            response,
            slot,
            url,
            tunnel,
        })
    }
}

impl Forwarder {
    /// Longest silence inside a request or response body.
    pub(super) fn body_timeout(&self) -> Duration {
        self.body_timeout
    }

    /// Names a client may not strip by listing them in `Connection`.
    pub(super) fn protected(&self) -> &[HeaderName] {
        &self.protected
    }

    /// Every protected name, in any `_`/`-` spelling.
    pub(super) fn names(&self) -> &Protected {
        &self.names
    }

    /// This hop's `Via` entries.
    pub(super) fn via(&self) -> &ViaValues {
        &self.via
    }

    /// The worker's own HTTP/1.1 connections for URL `i` of `pool`, and its authority,
    /// when that URL is plain `http://` on an HTTP/1.1 upstream.
    pub(super) fn h1_for<'a>(
        &'a self,
        pool: &'a Pool,
        i: usize,
    ) -> Option<(&'a Arc<H1Pool>, &'a Authority)> {
        let h1 = self.h1.get(pool.index)?.as_ref()?;
        Some((h1, pool.plain_authority(i)?))
    }

    /// The pooled client of `pool` (TLS or HTTP/2 URLs).
    pub(super) fn client(&self, pool: &Pool) -> &UpstreamClient {
        &self.clients[pool.index]
    }

    /// One of `pool`'s `max_connections` slots, waiting until `deadline` (`None`: it came
    /// too late), and whether it was waited for. The usual free slot is taken without
    /// building a timer; the wait is boxed, so its timer does not enlarge every request's
    /// future (which is moved by value into its box).
    async fn slot(&self, pool: &Pool, deadline: Instant) -> Option<(OwnedSemaphorePermit, bool)> {
        if let Ok(slot) = pool.slots.clone().try_acquire_owned() {
            return Some((slot, false));
        }
        let wait = tokio::time::timeout_at(deadline, pool.slots.clone().acquire_owned());
        Some((Box::pin(wait).await.ok()?.ok()?, true))
    }
}

/// The upstream's answer, or `None` when it took longer than `timeout` counted from the
/// last moment the request body moved (from `leaves`, when the request left, for a
/// bodiless request): a slow but steady upload is not the upstream's delay. Nor is a
/// silent one: while the body waits for the client's next byte the upstream has not had
/// the whole request, and the body's watchdog ends it within `body_timeout` (the client's
/// 408, whichever timeout is shorter). An upstream that stops taking the body (the body
/// waits on it, not on the client) is late as ever.
async fn await_answer<F: Future + Unpin>(
    mut sent: F,
    watch: Option<&BodyWatch>,
    leaves: Instant,
    timeout: Duration,
) -> Option<F::Output> {
    let mut deadline = leaves + timeout;
    loop {
        tokio::select! {
            answer = &mut sent => return Some(answer),
            () = tokio::time::sleep_until(deadline) => {
                let w = watch?;
                let now = Instant::now();
                deadline = match w.last_moved() + timeout {
                    later if later > now => later,
                    _ if w.on_the_client() => now + timeout,
                    _ => return None,
                };
            }
        }
    }
}

/// The client's own failure, when its body is why the upstream call failed (see
/// [`super::watchdog::BodyFault::client_error`]).
fn client_fault(watch: Option<&BodyWatch>) -> Option<GatewayError> {
    Some(watch?.fault()?.client_error())
}

/// A `101` is only passed on when the client asked for an upgrade the route allows, and
/// the upstream switched to one of the protocols offered.
fn check_switch(
    resp: &Response<Incoming>,
    offered: Option<&HeaderValue>,
    entry: &RouteEntry,
    pool: &Pool,
) -> Result<(), GatewayError> {
    let unexpected = |what: &str| GatewayError::UnexpectedUpgrade {
        upstream: pool.name.to_string(),
        what: what.to_owned(),
    };
    let Some(offered) = offered.and_then(|v| v.to_str().ok()) else {
        return Err(unexpected("an upgrade"));
    };
    let chosen = resp
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let name = |p: &str| {
        p.split('/')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let fits = headers::upgrade_allowed(chosen, &entry.route.upgrades)
        && offered.split(',').any(|o| name(o) == name(chosen));
    if fits {
        Ok(())
    } else {
        Err(unexpected(&format!("`{}`", chosen.trim())))
    }
}
