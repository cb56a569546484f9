//! Config reload tests' gateway: served from a file (a reload re-reads it) on a manual
//! clock, and the TOML pieces and admin calls the reload tests share.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use serde_json::Value;
use tollgate::limit::clock::ManualClock;

use super::{get_as, metric_sum, metrics_text, process, send_h1, text};

/// A gateway serving a config file (reload re-reads it), on a manual clock.
pub struct Served {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub path: PathBuf,
    /// `/activity`'s sampler, when the test ticks it ([`serve_sampled_by_hand`]).
    pub sampler: Option<tollgate::server::Sampler>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn serve_with(toml: &str, clock: &ManualClock, workers: usize) -> Served {
    serve_as(toml, clock, workers, false).await
}

/// [`serve`] with `/activity`'s sampler ticked by the test only (`Served::sampler`).
pub async fn serve_sampled_by_hand(toml: &str, clock: &ManualClock) -> Served {
    serve_as(toml, clock, 2, true).await
}

async fn serve_as(toml: &str, clock: &ManualClock, workers: usize, by_hand: bool) -> Served {
    let path = process::temp_file("reload.toml", toml);
    let cfg = tollgate::config::load_file(&path).expect("valid test config");
    let mut server = tollgate::server::Server::bind_with_clock(cfg, Arc::new(clock.clone()))
        .await
        .expect("binds")
        .workers(workers);
    let mut sampler = None;
    if by_hand {
        let (s, by_hand) = server.sample_by_hand();
        (server, sampler) = (s, Some(by_hand));
    }
    let addrs = server.addrs();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Served {
        addr: addrs.listen,
        admin: addrs.admin_listen.unwrap(),
        path,
        sampler,
        _stop: stop,
    }
}

pub async fn serve(toml: &str, clock: &ManualClock) -> Served {
    serve_with(toml, clock, 2).await
}

/// `[server]` with loopback trusted, one upstream, then `rest`.
pub fn file(up: SocketAddr, rest: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n{rest}"
    )
}

pub fn policy(name: &str, algorithm: &str, limit: u32, extra: &str) -> String {
    let period = match algorithm {
        "concurrency" => "",
        _ => "period = \"1h\"\n",
    };
    format!(
        "[policies.{name}]\nkey = [\"ip\"]\nalgorithm = \"{algorithm}\"\nlimit = {limit}\n{period}{extra}\n"
    )
}

pub fn route(name: &str, prefix: &str, policies: &[&str]) -> String {
    let list: Vec<String> = policies.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"app\"\npolicies = [{}]\n",
        list.join(", ")
    )
}

pub async fn admin(addr: SocketAddr, method: Method, path: &str) -> (StatusCode, Value) {
    admin_with(addr, method, path, None).await
}

pub async fn admin_with(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await;
    let status = resp.status();
    let body = text(resp).await;
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

pub async fn reload(s: &Served, toml: &str) -> (StatusCode, Value) {
    std::fs::write(&s.path, toml).unwrap();
    admin(s.admin, Method::POST, "/reload").await
}

/// Statuses of `n` requests to `path` as client `ip`.
pub async fn statuses(addr: SocketAddr, path: &str, ip: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get_as(addr, path, ip, None).await.status().as_u16());
    }
    out
}

pub fn keys_gauge(metrics: &str, policy: &str) -> f64 {
    metric_sum(
        metrics,
        &format!("tollgate_limiter_keys{{policy=\"{policy}\"}}"),
    )
}

/// `tollgate_limiter_keys{policy}` once it equals `want`, or its last value after `within`
/// (as `common::eventually`, a bounded wait on a condition another task changes, but the
/// failure says the value).
pub async fn keys_gauge_settles(
    admin: SocketAddr,
    policy: &str,
    want: f64,
    within: Duration,
) -> f64 {
    let started = std::time::Instant::now();
    loop {
        let got = keys_gauge(&metrics_text(admin).await, policy);
        if got == want || started.elapsed() >= within {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
