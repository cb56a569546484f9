//! `tollgate demo`: the newcomer's first command. It runs the shipped `config.toml` (embedded
//! in the binary) on ephemeral loopback ports in front of a sample upstream started in the
//! same process, sends a short burst of real HTTP requests through it as a few clients, and
//! prints what each client saw. Nothing outside the process is needed.

mod report;
mod upstream;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::{self, ConfigError};
use crate::server::{Server, ServerError};
use report::{ClientReport, print_table};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("sample upstream: {0}")]
    Io(#[from] std::io::Error),
}

/// One simulated client: who it claims to be and how it behaves.
struct Persona {
    /// Shown in the table.
    name: &'static str,
    /// Sent as `X-Forwarded-For` (the demo's gateway trusts loopback as a proxy).
    ip: &'static str,
    /// Requests to send.
    requests: usize,
    /// Pause between requests; zero means as fast as possible.
    pace: Duration,
    /// What the row shows.
    note: &'static str,
}

/// Against the shipped `per_ip` policy (GCRA, 20/s, burst 10) on `/api`.
const PERSONAS: &[Persona] = &[
    Persona {
        name: "polite client",
        ip: "198.51.100.7",
        requests: 10,
        pace: Duration::from_millis(100),
        note: "10/s, under the limit",
    },
    Persona {
        name: "abusive client",
        ip: "203.0.113.9",
        requests: 60,
        pace: Duration::ZERO,
        note: "burst of 60: 429 + Retry-After",
    },
    Persona {
        name: "ipv6 laptop",
        ip: "2001:db8:1:2::10",
        requests: 10,
        pace: Duration::ZERO,
        note: "shares one /64 budget...",
    },
    Persona {
        name: "ipv6 phone",
        ip: "2001:db8:1:2::20",
        requests: 10,
        pace: Duration::ZERO,
        note: "...with the laptop",
    },
    Persona {
        name: "behind CGNAT",
        ip: "100.64.12.34",
        requests: 40,
        pace: Duration::ZERO,
        note: "100.64/10: limits x4",
    },
];

/// Run the demo and print its table to stdout.
pub async fn run() -> Result<(), DemoError> {
    let upstream = upstream::start().await?;
    let mut raw = config::parse_str(config::SAMPLE, Path::new("config.toml (embedded)"))?;
    // The shipped config names fixed ports and a certificate on disk; the demo must run
    // anywhere, so it binds ephemeral loopback ports and points every upstream at its sample.
    let mut server = raw.server().clone();
    server.listen = Some("127.0.0.1:0".into());
    server.admin_listen = Some("127.0.0.1:0".into());
    server.tls_listen = None;
    server.tls_cert = None;
    server.tls_key = None;
    raw.server = Some(server);
    for up in raw.upstreams.values_mut() {
        up.urls = vec![format!("http://{upstream}").into()];
    }
    let cfg = config::validate(raw, Path::new("config.toml (embedded)"))?;
    let server = Server::bind(cfg).await?;
    let addrs = server.addrs();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));

    println!(
        "tollgate demo: gateway on http://{}, sample upstream on http://{upstream}",
        addrs.listen
    );
    println!("sending requests as {} clients…\n", PERSONAS.len());
    let reports = futures_join_all(addrs.listen).await;
    print_table(&reports);
    println!(
        "\nPolicies come from config.toml: `per_ip` is GCRA at 20/s with a burst of 10. Denied requests\n\
         got 429 with Retry-After and RateLimit headers; IPv6 clients are keyed by /64, and clients in\n\
         100.64.0.0/10 (carrier-grade NAT) get `cgnat_headroom` times the limit."
    );

    let _ = stop.send(());
    let _ = running.await;
    Ok(())
}

/// Run every persona concurrently against the gateway.
async fn futures_join_all(gateway: SocketAddr) -> Vec<ClientReport> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, p) in PERSONAS.iter().enumerate() {
        let client = client.clone();
        tasks.spawn(async move { (i, drive(&client, gateway, p).await) });
    }
    let mut out: Vec<(usize, ClientReport)> = Vec::new();
    while let Some(Ok(r)) = tasks.join_next().await {
        out.push(r);
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

type DemoClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

async fn drive(client: &DemoClient, gateway: SocketAddr, p: &Persona) -> ClientReport {
    let mut report = ClientReport::new(p.name, p.ip, p.note);
    for _ in 0..p.requests {
        let req = http::Request::get(format!("http://{gateway}/api/hello"))
            .header("x-forwarded-for", p.ip)
            .body(Empty::new())
            .expect("static request is valid");
        let started = Instant::now();
        let (status, retry_after) = match client.request(req).await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                let _ = resp.into_body().collect().await;
                (status, retry_after)
            }
            Err(_) => (0, None),
        };
        report.record(status, retry_after, started.elapsed());
        if !p.pace.is_zero() {
            tokio::time::sleep(p.pace).await;
        }
    }
    report
}
