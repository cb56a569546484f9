//! Red-team attempts on the peer transport (wire version 7, keyed BLAKE3), on real loopback
//! sockets against the library's own `PeerServer` and `PeerClient`: replays (same and other
//! peer, across the replay guard's windows, at the clock-skew edges, after a restart),
//! reflection, reply splicing and forgery, malformed and stalled frames, version and key
//! confusion, and denial of service without the secret. Each test asserts the safe
//! behaviour: a failing test is a break. Cases that turned out safe are named `held`.
//!
//! Where a test needs a "captured" message it either taps a genuine `PeerClient` (a
//! listener at the recipient's address that records the frame and never answers) or seals
//! one with `wire::seal_request`, the function the client itself seals with: both are the
//! bytes an eavesdropper on the peer network would see.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::limit::peer::frame;
use tollgate::limit::peer::wire::{self, Item, MAX_MESSAGE_BYTES, Op, Secret};
use tollgate::limit::peer::{
    PeerClient, PeerError, PeerHandler, PeerMetrics, PeerServer, Request, Response,
};

const SECRET: &[u8] = b"the red team's fleet secret, 32+ bytes long";
const TIMEOUT: Duration = Duration::from_millis(500);
/// `derive_key`'s context, as `mac.rs` documents it (fixed: a node that derived another key
/// could not talk to the fleet).
const KEY_CONTEXT: &str = "tollgate 2026-12-01 peer wire v6 message MAC";

fn secret() -> Secret {
    Secret::new(SECRET).expect("long enough")
}

/// Answers each item with `ok:data`; remembers every item it was handed.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Bytes>>,
}

impl PeerHandler for Recorder {
    async fn handle(&self, _from: SocketAddr, request: Request) -> Response {
        let mut seen = self.seen.lock().unwrap();
        let items = request
            .items
            .into_iter()
            .map(|i| {
                seen.push(i.data.clone());
                let mut r = b"ok:".to_vec();
                r.extend_from_slice(&i.data);
                Bytes::from(r)
            })
            .collect();
        Response { items }
    }
}

impl Recorder {
    /// How many times the handler was handed `data`.
    fn times(&self, data: &[u8]) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|d| &d[..] == data)
            .count()
    }

    fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

struct Node {
    server: PeerServer,
    handler: Arc<Recorder>,
    registry: Registry,
}

impl Node {
    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    fn errors(&self, kind: &str) -> f64 {
        sample(
            &self.registry,
            &format!("tollgate_peer_errors_total{{kind=\"{kind}\"}}"),
        )
    }
}

async fn try_node(at: SocketAddr) -> std::io::Result<Node> {
    let mut registry = Registry::default();
    let metrics = PeerMetrics::register(&mut registry);
    let handler = Arc::new(Recorder::default());
    let server = PeerServer::bind(at, secret(), handler.clone(), metrics).await?;
    Ok(Node {
        server,
        handler,
        registry,
    })
}

async fn node() -> Node {
    try_node("127.0.0.1:0".parse().unwrap())
        .await
        .expect("a free loopback port")
}

/// A node on `at` (a port just released: a dropped server's accept task goes away on its
/// next poll, so binding is retried for a bounded time).
async fn node_at(at: SocketAddr) -> Node {
    let started = Instant::now();
    loop {
        match try_node(at).await {
            Ok(n) => return n,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "cannot bind {at}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    }
}

fn client_with(me: SocketAddr, secret: Secret) -> (PeerClient, Registry) {
    let mut registry = Registry::default();
    let metrics = PeerMetrics::register(&mut registry);
    (PeerClient::new(me, secret, TIMEOUT, metrics), registry)
}

fn client() -> PeerClient {
    client_with(me(), secret()).0
}

/// A genuine client whose calls may take `timeout` (tests whose failure is a timeout, on a
/// loaded machine: a miss is then not the machine's slowness).
fn patient_client(timeout: Duration) -> PeerClient {
    let mut registry = Registry::default();
    PeerClient::new(
        me(),
        secret(),
        timeout,
        PeerMetrics::register(&mut registry),
    )
}

fn me() -> SocketAddr {
    "127.0.0.1:7946".parse().unwrap()
}

/// The value of one exported sample, 0 when absent.
fn sample(registry: &Registry, series: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

fn ask(data: &str) -> Vec<Item> {
    vec![Item {
        op: Op::Ask,
        data: Bytes::from(data.to_string()),
    }]
}

/// A genuine request from `me()` to `to`, stamped `offset_ms` from now.
fn sealed(to: SocketAddr, offset_ms: i64, nonce: u64, data: &str) -> ([u8; 32], Bytes) {
    let ts = wire::now_ms().saturating_add_signed(offset_ms);
    wire::seal_request(
        &secret(),
        &me().to_string(),
        &to.to_string(),
        ts,
        nonce,
        &ask(data),
    )
}

/// Write `body` as one frame on `stream` and read the reply's status as HTTP would say it;
/// `None` when the connection is closed (or broken) instead.
async fn exchange_on(stream: &mut TcpStream, body: &[u8]) -> Option<u16> {
    frame::write(stream, None, body).await.ok()?;
    read_status(stream).await
}

async fn read_status(stream: &mut TcpStream) -> Option<u16> {
    let read = async {
        let len = frame::read_len(stream).await.ok()?;
        let reply = frame::read_body(stream, len).await.ok()?;
        Some(frame::status_code(*reply.first()?))
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a reply or a close within 10 s")
}

/// One frame on a fresh connection: the reply's status.
async fn post(addr: SocketAddr, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    exchange_on(&mut s, body).await.expect("a reply")
}

/// Raw bytes (not necessarily a frame) on a fresh connection from `source`.
async fn connect_from(source: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse().unwrap())?;
    socket.connect(addr).await
}

/// Whether the server closes `stream` within `within` (whatever it writes first).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// What a genuine `PeerClient` puts on the wire for one ask to `at`: a tap listening there
/// records the frame and never answers (the client's call fails; nothing reached a node).
async fn capture_at(at: SocketAddr, data: &str) -> Bytes {
    let tap = {
        let started = Instant::now();
        loop {
            match TcpListener::bind(at).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(started.elapsed() < Duration::from_secs(5), "{at}: {e}");
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        }
    };
    let c = client();
    let data = Bytes::from(data.to_string());
    let call = tokio::spawn(async move { c.call(at, Op::Ask, vec![data]).await });
    let (mut s, _) = tap.accept().await.unwrap();
    let len = frame::read_len(&mut s).await.unwrap();
    let body = frame::read_body(&mut s, len).await.unwrap();
    drop(s);
    drop(tap);
    assert!(call.await.unwrap().is_err(), "the tap never answers");
    body
}

/// A released loopback port for a node to bind later.
fn free_port() -> SocketAddr {
    crate::common::peers::free_ports(1)[0]
}

/// The stalled-length attack (`frames.rs`, `replies.rs`), running until `stop` is set: 31 connections from 127.0.0.3 to `at`,
/// each announcing a largest message and then silent, opened again as each is closed.
fn stalled_claims(at: SocketAddr) -> (Arc<AtomicBool>, tokio::task::JoinSet<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut attack = tokio::task::JoinSet::new();
    for _ in 0..31 {
        let stop = stop.clone();
        attack.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let opened = Instant::now();
                if let Ok(mut s) = connect_from("127.0.0.3", at).await {
                    let _ = s.write_all(&(MAX_MESSAGE_BYTES as u32).to_be_bytes()).await;
                    closed_within(&mut s, Duration::from_secs(12)).await;
                }
                if opened.elapsed() < Duration::from_millis(100) {
                    // Refused at once (its place not yet given back): do not spin.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
    }
    (stop, attack)
}

mod frames;
mod replays;
mod replies;
