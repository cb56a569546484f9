//! `tollgate reload -c FILE`: ask the gateway running FILE to reload it, through its admin
//! listener's `POST /reload` (the answer says what happened, which a signal cannot); and the
//! one admin request [`ask`] that `tollgate shadow-report` uses too.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::Config;

/// Why the running gateway could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error(
        "{0}: [server] admin_listen is not set, so there is no admin listener to ask; send the running process SIGHUP instead (kill -HUP <pid>)"
    )]
    NoAdmin(String),
    #[error(
        "{0}: [server] admin_listen has port 0 (the port is chosen at start), so it does not say where to ask; give it a fixed port, or send the running process SIGHUP (kill -HUP <pid>)"
    )]
    AnyPort(String),
    #[error("admin listener {addr}: {reason} (is the gateway running there?)")]
    Unreachable { addr: SocketAddr, reason: String },
}

/// How long the whole exchange may take (a reload reads a file and swaps a few pointers).
const TIMEOUT: Duration = Duration::from_secs(10);

/// `POST /reload` to `config`'s admin listener (with its bearer token when set); the
/// answer's status and body.
pub async fn request_reload(config: &Config) -> Result<(u16, String), AskError> {
    let Some(mut addr) = config.server.admin_listen else {
        return Err(AskError::NoAdmin(config.origin.display().to_string()));
    };
    if addr.port() == 0 {
        return Err(AskError::AnyPort(config.origin.display().to_string()));
    }
    // A wildcard listener is reached on loopback.
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    let token = config.server.admin_token.as_ref().map(|t| t.secret());
    ask(addr, Method::POST, "/reload", token).await
}

/// One request to an admin listener at `addr` (with `token` as its bearer token): the
/// answer's status and body. `tollgate reload` and `tollgate shadow-report` ask with it.
pub(super) async fn ask(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), AskError> {
    let failed = |reason: String| AskError::Unreachable { addr, reason };
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, addr.to_string());
        if let Some(token) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        ))
    };
    match tokio::time::timeout(TIMEOUT, exchange).await {
        Ok(r) => r.map_err(failed),
        Err(_) => Err(failed(format!("no answer within {TIMEOUT:?}"))),
    }
}
