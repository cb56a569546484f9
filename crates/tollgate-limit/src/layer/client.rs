//! Where a layer reads the client's TCP peer from. The gateway accepts its own sockets and
//! knows the peer; a layer sits behind the service's server, which says it (if at all) in
//! the request's extensions. From the peer, `[client_ip] trusted_proxies` decides as for the
//! gateway whether a forwarding header names the client instead.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::Extensions;

/// How a [`RateLimitLayer`](super::RateLimitLayer) finds the peer of a request. A request
/// whose peer it cannot find is answered 500 (nothing is asked of any policy): keying every
/// such request on one made-up address would make strangers share a budget.
#[derive(Clone)]
pub struct ClientAddr(Source);

#[derive(Clone)]
enum Source {
    /// axum's `ConnectInfo<SocketAddr>` (with the `axum` feature), else a `SocketAddr`
    /// extension (what a hand-written hyper accept loop can insert).
    Default,
    Fn(Arc<PeerFn>),
}

/// What [`ClientAddr::from_fn`] is given.
type PeerFn = dyn Fn(&Extensions) -> Option<IpAddr> + Send + Sync;

impl ClientAddr {
    /// The peer from `f`, given the request's extensions: for servers that put it elsewhere
    /// (tonic's `TcpConnectInfo`, a proxy protocol header already parsed, a test).
    pub fn from_fn<F>(f: F) -> ClientAddr
    where
        F: Fn(&Extensions) -> Option<IpAddr> + Send + Sync + 'static,
    {
        ClientAddr(Source::Fn(Arc::new(f)))
    }

    /// The peer of a request with these extensions.
    pub(super) fn peer(&self, ext: &Extensions) -> Option<IpAddr> {
        match &self.0 {
            Source::Default => {
                connect_info(ext).or_else(|| ext.get::<SocketAddr>().map(|a| a.ip()))
            }
            Source::Fn(f) => f(ext),
        }
    }
}

impl Default for ClientAddr {
    /// axum's `ConnectInfo<SocketAddr>` (serve the router with
    /// `into_make_service_with_connect_info::<SocketAddr>()`), else a `SocketAddr` extension.
    fn default() -> Self {
        ClientAddr(Source::Default)
    }
}

impl fmt::Debug for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Source::Default => "ClientAddr::default()",
            Source::Fn(_) => "ClientAddr::from_fn(..)",
        })
    }
}

#[cfg(feature = "axum")]
fn connect_info(ext: &Extensions) -> Option<IpAddr> {
    ext.get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

#[cfg(not(feature = "axum"))]
fn connect_info(_: &Extensions) -> Option<IpAddr> {
    None
}
