//! The peer transport on real loopback sockets: a round trip, coalescing of concurrent calls,
//! refusal of forged, stale and replayed messages, and a dead peer failing within the timeout.
//! The limiter's own test (moved from the gateway's `tests/fleet/`): nothing of the gateway,
//! only `peer/` (its wire and frames are exported with `test-util`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus_client::registry::Registry;
use tollgate_limit::peer::wire::{self, Item, Op, Secret};
use tollgate_limit::peer::{
    PeerClient, PeerError, PeerHandler, PeerMetrics, PeerServer, Request, Response,
};

const SECRET: &[u8] = b"the fleet's shared secret, 32+ bytes long";
const TIMEOUT: Duration = Duration::from_millis(300);

fn secret() -> Secret {
    Secret::new(SECRET).expect("long enough")
}

/// Answers each item with `op:data`; remembers every message it was handed.
#[derive(Default)]
struct Echo {
    seen: Mutex<Vec<(SocketAddr, Request)>>,
    /// Time each message takes, so calls arriving meanwhile must queue.
    delay: Duration,
    /// Extra time the first message takes (a peer that hangs once).
    hang_first: Duration,
}

impl PeerHandler for Echo {
    async fn handle(&self, from: SocketAddr, request: Request) -> Response {
        let items = request
            .items
            .iter()
            .map(|i| {
                let mut r = format!("{}:", i.op.label()).into_bytes();
                r.extend_from_slice(&i.data);
                Bytes::from(r)
            })
            .collect();
        let first = {
            let mut seen = self.seen.lock().unwrap();
            seen.push((from, request));
            seen.len() == 1
        };
        tokio::time::sleep(self.delay).await;
        if first {
            tokio::time::sleep(self.hang_first).await;
        }
        Response { items }
    }
}

impl Echo {
    fn messages(&self) -> Vec<(SocketAddr, Request)> {
        self.seen.lock().unwrap().clone()
    }
}

struct Node {
    server: PeerServer,
    handler: Arc<Echo>,
    registry: Registry,
}

async fn node(delay: Duration) -> Node {
    node_with(Echo {
        delay,
        ..Echo::default()
    })
    .await
}

async fn node_with(handler: Echo) -> Node {
    let mut registry = Registry::default();
    let metrics = PeerMetrics::register(&mut registry);
    let handler = Arc::new(handler);
    let server = PeerServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        secret(),
        handler.clone(),
        metrics,
    )
    .await
    .expect("a free loopback port");
    Node {
        server,
        handler,
        registry,
    }
}

/// A client signing as `me`, with its own registry.
fn client(me: SocketAddr, secret: Secret) -> (PeerClient, Registry) {
    let mut registry = Registry::default();
    let metrics = PeerMetrics::register(&mut registry);
    (PeerClient::new(me, secret, TIMEOUT, metrics), registry)
}

/// The value of one exported sample, 0 when absent.
fn sample(registry: &Registry, series: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

fn me() -> SocketAddr {
    "127.0.0.1:7946".parse().unwrap()
}

mod calls;
mod failures;
