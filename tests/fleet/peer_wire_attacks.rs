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

// ---------------------------------------------------------------------------------------
// Replays
// ---------------------------------------------------------------------------------------

/// A genuine request tapped off the wire is served once; replayed on a new connection, on
/// the same connection, or on eight connections at once, it is refused every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_captured_request_is_refused_on_every_connection_held() {
    let at = free_port();
    let captured = capture_at(at, "tapped").await;
    let peer = node_at(at).await;

    let mut first = TcpStream::connect(at).await.unwrap();
    assert_eq!(exchange_on(&mut first, &captured).await, Some(200));
    // The same bytes again on the connection that carried them: refused, then closed.
    assert_eq!(exchange_on(&mut first, &captured).await, Some(401));
    assert!(closed_within(&mut first, Duration::from_secs(2)).await);
    assert_eq!(post(at, &captured).await, 401, "on a new connection");

    // A second tapped message raced on eight connections: one wins, seven are replays.
    drop(peer);
    let raced = capture_at(at, "raced").await;
    let peer = node_at(at).await;
    let answers = futures_util::future::join_all((0..8).map(|_| post(at, &raced))).await;
    assert_eq!(
        answers.iter().filter(|&&s| s == 200).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|&&s| s == 401).count(),
        7,
        "{answers:?}"
    );
    assert_eq!(peer.handler.times(b"raced"), 1);
    assert_eq!(peer.errors("auth"), 7.0, "the 7 raced replays");
}

/// The replay guard keeps a MAC for two 10 s generations; a request is fresh for 10 s of
/// receiver time (±5 s). A message accepted just before the guard's first rotation with its
/// timestamp at the far edge (sender 4.95 s ahead) stays fresh until after that rotation:
/// replayed every 20 ms over its whole life, it is never served twice. The near edges of
/// the skew window: 4.9 s either way is accepted, 5.3 s is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_across_both_nonce_windows_and_skew_edges_are_refused_held() {
    let bound_at = tokio::time::Instant::now();
    let peer = node().await;
    let at = peer.addr();

    let (_, late) = sealed(at, -5_300, 1, "late");
    let (_, early) = sealed(at, 5_300, 2, "early");
    assert_eq!(post(at, &late).await, 401, "5.3 s old");
    assert_eq!(post(at, &early).await, 401, "5.3 s ahead");
    let (_, old_edge) = sealed(at, -4_900, 3, "old-edge");
    assert_eq!(post(at, &old_edge).await, 200, "4.9 s old");
    assert_eq!(post(at, &old_edge).await, 401);

    // Keep the guard busy (it rotates lazily, on traffic) until just before its first
    // rotation, ROTATE = 10 s after the server was bound.
    let mut n = 100;
    while bound_at.elapsed() < Duration::from_millis(9_900) {
        n += 1;
        let (_, filler) = sealed(at, 0, n, "filler");
        assert_eq!(post(at, &filler).await, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mac, far_edge) = sealed(at, 4_950, 4, "far-edge");
    let stamped = wire::now_ms() + 4_950;
    assert_eq!(post(at, &far_edge).await, 200, "4.95 s ahead");
    let mut replays = 0;
    while wire::now_ms() <= stamped + 5_300 {
        assert_eq!(post(at, &far_edge).await, 401, "replay {replays}");
        replays += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "far-edge message {:02x?}… replayed {replays} times",
        &mac[..4]
    );
    assert!(
        bound_at.elapsed() > Duration::from_secs(20),
        "spanned the rotations"
    );
    assert_eq!(peer.handler.times(b"far-edge"), 1);
    assert_eq!(peer.handler.times(b"old-edge"), 1);
    assert_eq!(
        peer.handler.times(b"late") + peer.handler.times(b"early"),
        0
    );
}

/// Documented limitation (README, "Why this transport"): the replay guard lives in memory,
/// so a node restarted while a captured message is still fresh accepts it once more. This
/// asserts the documented bound: at most once more, and not once it is more than 5 s old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_receiver_restart_is_bounded_as_documented() {
    let at = free_port();
    let captured = capture_at(at, "before-restart").await;
    let (_, old) = sealed(at, -5_500, 1, "captured-5.5s-ago");
    let first = node_at(at).await;
    assert_eq!(post(at, &captured).await, 200);
    assert_eq!(post(at, &captured).await, 401);
    drop(first);

    let restarted = node_at(at).await;
    let after = post(at, &captured).await;
    eprintln!("a fresh captured message replayed to the restarted node: {after}");
    assert!(after == 200 || after == 401);
    assert_eq!(post(at, &captured).await, 401, "at most once more");
    assert_eq!(post(at, &old).await, 401, "5.5 s old: stale");
    assert!(restarted.handler.times(b"before-restart") <= 1);
    assert_eq!(restarted.handler.times(b"captured-5.5s-ago"), 0);
}

/// A request sealed for B is refused by A (its sender: reflection) and by C (another
/// peer), and their refusals do not burn it: B still serves it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflected_and_misdirected_requests_are_refused_held() {
    let (a, b, c) = (node().await, node().await, node().await);
    let (_, to_b) = wire::seal_request(
        &secret(),
        &a.addr().to_string(),
        &b.addr().to_string(),
        wire::now_ms(),
        7,
        &ask("for-b"),
    );
    assert_eq!(post(a.addr(), &to_b).await, 401, "reflected to its sender");
    assert_eq!(post(c.addr(), &to_b).await, 401, "sent to another peer");
    assert_eq!(post(b.addr(), &to_b).await, 200, "its recipient");
    assert_eq!(post(b.addr(), &to_b).await, 401);
    assert_eq!(a.handler.total() + c.handler.total(), 0);
    assert_eq!(b.handler.times(b"for-b"), 1);
    assert_eq!(a.errors("auth") + c.errors("auth"), 2.0);

    // The recipient's address in another spelling is another recipient.
    let port = b.addr().port();
    for spelling in [format!("localhost:{port}"), format!("127.0.0.01:{port}")] {
        let (_, m) = wire::seal_request(
            &secret(),
            &a.addr().to_string(),
            &spelling,
            wire::now_ms(),
            8,
            &ask(&spelling),
        );
        assert_eq!(post(b.addr(), &m).await, 401, "{spelling}");
    }
}

// ---------------------------------------------------------------------------------------
// Kind, version and key confusion
// ---------------------------------------------------------------------------------------

/// Set `message`'s MAC to `mac` of its bytes after the MAC.
fn remac(message: &Bytes, mac: impl Fn(&[u8]) -> [u8; 32]) -> Bytes {
    let mut m = BytesMut::from(&message[..]);
    let tag = mac(&m[32..]);
    m[..32].copy_from_slice(&tag);
    m.freeze()
}

/// A reply (genuine, for a request this node accepted) sent as a request, and a request of
/// another wire version (the HMAC-SHA256 v5, v6 without `sync`, or a future v8) correctly
/// re-MACed, are not messages here: 400, the connection closed, the handler never called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_as_requests_and_other_versions_are_refused_held() {
    let peer = node().await;
    let at = peer.addr();
    let (mac, req) = sealed(at, 0, 1, "real");
    let reply = wire::seal_reply(&secret(), wire::now_ms(), &mac, &[Bytes::from("ok:real")]);
    assert_eq!(post(at, &req).await, 200);
    assert_eq!(post(at, &reply).await, 400, "a reply is not a request");

    let key = blake3::derive_key(KEY_CONTEXT, SECRET);
    for version in [5u8, 6, 8, 0] {
        let (_, m) = sealed(at, 0, 10 + u64::from(version), "downgrade");
        let mut m = BytesMut::from(&m[..]);
        m[32] = version;
        let m = remac(&m.freeze(), |b| *blake3::keyed_hash(&key, b).as_bytes());
        let mut s = TcpStream::connect(at).await.unwrap();
        assert_eq!(
            exchange_on(&mut s, &m).await,
            Some(400),
            "version {version}"
        );
        assert!(closed_within(&mut s, Duration::from_secs(2)).await);
    }
    assert_eq!(peer.handler.times(b"downgrade"), 0);
    assert_eq!(peer.handler.total(), 1);
}

/// The MAC key is `derive_key(KEY_CONTEXT, secret)` and nothing else: a message MACed with
/// the raw secret as the key, with an unkeyed hash, with another context, or with the key of
/// a secret that differs by a trailing newline (an operator's `echo` into the variable) is
/// refused; the documented derivation is accepted. Secrets under 32 bytes make no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_derived_key_authenticates_held() {
    let peer = node().await;
    let at = peer.addr();
    assert!(Secret::new(&SECRET[..31]).is_none(), "31 bytes");
    assert!(Secret::new(&[0u8; 0]).is_none(), "empty");
    assert!(Secret::new(&SECRET[..32]).is_some(), "32 bytes");

    let raw: [u8; 32] = SECRET[..32].try_into().unwrap();
    let other_context = blake3::derive_key("tollgate peer wire v5 message MAC", SECRET);
    let with_newline = blake3::derive_key(KEY_CONTEXT, &[SECRET, b"\n"].concat());
    type Mac = Box<dyn Fn(&[u8]) -> [u8; 32]>;
    let wrong: Vec<(&str, Mac)> = vec![
        (
            "raw secret as key",
            Box::new(move |b| *blake3::keyed_hash(&raw, b).as_bytes()),
        ),
        ("unkeyed", Box::new(|b| *blake3::hash(b).as_bytes())),
        (
            "unkeyed over secret||message",
            Box::new(|b| *blake3::hash(&[SECRET, b].concat()).as_bytes()),
        ),
        (
            "another context",
            Box::new(move |b| *blake3::keyed_hash(&other_context, b).as_bytes()),
        ),
        (
            "secret with a newline",
            Box::new(move |b| *blake3::keyed_hash(&with_newline, b).as_bytes()),
        ),
        ("all zero", Box::new(|_| [0u8; 32])),
    ];
    for (i, (what, mac)) in wrong.iter().enumerate() {
        let (_, m) = sealed(at, 0, i as u64, what);
        assert_eq!(post(at, &remac(&m, mac)).await, 401, "{what}");
    }
    let key = blake3::derive_key(KEY_CONTEXT, SECRET);
    let (_, m) = sealed(at, 0, 99, "derived");
    let m = remac(&m, |b| *blake3::keyed_hash(&key, b).as_bytes());
    assert_eq!(post(at, &m).await, 200, "the documented derivation");
    assert_eq!(peer.handler.total(), 1);
    assert_eq!(peer.errors("auth"), wrong.len() as f64);
}

// ---------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------

/// On a connection that has proved the secret, a forged message is refused (401), counted,
/// and closes the connection: the genuine message written after it is never read there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgery_mid_connection_closes_it_and_is_counted_held() {
    let peer = node().await;
    let at = peer.addr();
    let (_, one) = sealed(at, 0, 1, "one");
    let (_, two) = sealed(at, 0, 2, "two");
    let (_, three) = sealed(at, 0, 3, "three");
    let mut forged = BytesMut::from(&two[..]);
    let last = forged.len() - 1;
    forged[last] ^= 1; // "two" → "twn"
    let mut s = TcpStream::connect(at).await.unwrap();
    assert_eq!(exchange_on(&mut s, &one).await, Some(200));
    assert_eq!(exchange_on(&mut s, &forged).await, Some(401));
    // The genuine one after it: the connection is gone (no reply, or a write error).
    assert_eq!(exchange_on(&mut s, &three).await, None);
    assert_eq!(peer.errors("auth"), 1.0);
    assert_eq!(peer.handler.times(b"two") + peer.handler.times(b"twn"), 0);
    assert_eq!(peer.handler.times(b"three"), 0);
    // Neither was burned by the refusal.
    assert_eq!(post(at, &two).await, 200);
    assert_eq!(post(at, &three).await, 200);
}

/// A genuine message in a frame one byte short (its tail read as the next frame), in a
/// frame with trailing junk, an empty frame, and junk: refused, connection closed, nothing
/// handled, and the genuine message still good afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_padded_empty_and_junk_frames_are_refused_held() {
    let peer = node().await;
    let at = peer.addr();
    let (_, m) = sealed(at, 0, 1, "genuine");
    let padded = [&m[..], b"junk!"].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("one byte short", m[..m.len() - 1].to_vec()),
        ("trailing junk inside the frame", padded),
        ("empty", Vec::new()),
        ("junk", vec![0xAB; 200]),
        ("header only", m[..40].to_vec()),
    ];
    for (what, body) in &cases {
        let mut s = TcpStream::connect(at).await.unwrap();
        let mut wire = (body.len() as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(body);
        if *what == "one byte short" {
            wire.push(m[m.len() - 1]); // the cut-off byte follows, as the next "frame"
        }
        s.write_all(&wire).await.unwrap();
        let status = read_status(&mut s).await;
        assert!(matches!(status, Some(400 | 401)), "{what}: {status:?}");
        assert!(
            closed_within(&mut s, Duration::from_secs(2)).await,
            "{what}: closed"
        );
    }
    assert_eq!(peer.handler.total(), 0);
    assert_eq!(post(at, &m).await, 200, "the genuine message is still good");
}

/// A length past the 16 MiB limit (up to u32::MAX) is refused at once: 400 within a second,
/// no wait for bytes that never come, the connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_lengths_are_refused_at_once_held() {
    let peer = node().await;
    for len in [MAX_MESSAGE_BYTES as u32 + 1, u32::MAX] {
        let mut s = TcpStream::connect(peer.addr()).await.unwrap();
        s.write_all(&len.to_be_bytes()).await.unwrap();
        let t = Instant::now();
        assert_eq!(read_status(&mut s).await, Some(400), "length {len}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(closed_within(&mut s, Duration::from_secs(2)).await);
    }
}

/// Half a length, and a length with half its bytes, then silence: each connection is
/// closed by the server within its 5 s read timeout (not held open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_frame_then_silence_is_closed_held() {
    let peer = node().await;
    let at = peer.addr();
    let (_, m) = sealed(at, 0, 1, "half");
    let mut half_len = TcpStream::connect(at).await.unwrap();
    half_len.write_all(&[0, 0]).await.unwrap();
    let mut half_body = TcpStream::connect(at).await.unwrap();
    let mut wire = (m.len() as u32).to_be_bytes().to_vec();
    wire.extend_from_slice(&m[..m.len() / 2]);
    half_body.write_all(&wire).await.unwrap();
    let t = Instant::now();
    let (a, b) = tokio::join!(
        closed_within(&mut half_len, Duration::from_secs(8)),
        closed_within(&mut half_body, Duration::from_secs(8)),
    );
    assert!(a && b, "half length closed: {a}, half body closed: {b}");
    eprintln!("closed after {:?}", t.elapsed());
    assert_eq!(peer.handler.total(), 0);
}

/// Every refused incoming message is counted (`tollgate_peer_errors_total`, README: "refused
/// incoming messages (`auth` …; `decode`)"): an oversized length and a body that never
/// arrives are refused with 400 like a malformed message, so they count as `decode` too
/// (otherwise the stalled-length attack below leaves no trace in the metrics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_stalled_frames_are_counted() {
    let peer = node().await;
    let at = peer.addr();
    let mut big = TcpStream::connect(at).await.unwrap();
    big.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    assert_eq!(read_status(&mut big).await, Some(400));
    let mut stalled = TcpStream::connect(at).await.unwrap();
    stalled.write_all(&100u32.to_be_bytes()).await.unwrap();
    assert!(closed_within(&mut stalled, Duration::from_secs(8)).await);
    assert_eq!(peer.errors("decode"), 2.0, "refused frames are counted");
}

// ---------------------------------------------------------------------------------------
// Denial of service without the secret
// ---------------------------------------------------------------------------------------

/// The attack below, running until `stop` is set: 31 connections from 127.0.0.3 to `at`,
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

/// One host without the secret announces 16 MiB messages on 31 connections and sends
/// nothing more, reconnecting as each is closed. Its claims are taken from the 64 MiB read
/// budget before any byte arrives (4 claims fill it; the rest queue, FIFO), so a genuine
/// peer's message waits behind them. Safe: a genuine peer's calls keep being answered
/// within its timeout while this runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_length_claims_cannot_starve_honest_peers() {
    let peer = node().await;
    let at = peer.addr();
    let c = client();
    let before = c.call(at, Op::Ping, vec![Bytes::new()]).await;
    assert!(before.is_ok(), "before the attack: {before:?}");
    let (stop, mut attack) = stalled_claims(at);
    let started = Instant::now();
    let (mut ok, mut failed) = (0, Vec::new());
    while started.elapsed() < Duration::from_secs(8) {
        match c.call(at, Op::Ping, vec![Bytes::new()]).await {
            Ok(_) => ok += 1,
            Err(e) => failed.push(e),
        }
    }
    stop.store(true, Ordering::Relaxed);
    attack.abort_all();
    eprintln!("during the attack: {ok} answered, {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "an unauthenticated host starved a genuine peer: {ok} answered, {} failed ({:?})",
        failed.len(),
        failed.first()
    );
}

/// 33 source addresses without the secret (127.0.0.10–42), 32 silent connections each,
/// take every one of the listener's 1024 places; a genuine peer's new connection is then
/// not accepted until one of them times out. Safe: its call is still answered in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sources_cannot_take_every_connection_place() {
    let peer = node().await;
    let at = peer.addr();
    let c = patient_client(Duration::from_secs(2));
    let before = c.call(at, Op::Ping, vec![Bytes::new()]).await;
    assert!(before.is_ok(), "before the attack: {before:?}");
    let mut held = Vec::new();
    for host in 10..43 {
        for _ in 0..32 {
            if let Ok(s) = connect_from(&format!("127.0.0.{host}"), at).await {
                held.push(s);
            }
        }
    }
    // A genuine client that has no connection open yet (a restarted peer, a new worker).
    let fresh = patient_client(Duration::from_secs(2));
    let answer = fresh.call(at, Op::Ping, vec![Bytes::new()]).await;
    eprintln!(
        "{} silent connections; genuine call: {answer:?}",
        held.len()
    );
    drop(held);
    assert!(answer.is_ok(), "{answer:?}");
}

// ---------------------------------------------------------------------------------------
// The reply path: a peer (or whoever answers on its address) that does not hold the secret
// ---------------------------------------------------------------------------------------

/// A fake peer at `tap` answering the genuine client's calls: each call's request frame
/// goes to `answer`, which returns the raw bytes to write back (or none: stay silent).
struct FakePeer {
    tap: TcpListener,
    conn: Option<TcpStream>,
}

impl FakePeer {
    async fn new() -> FakePeer {
        FakePeer {
            tap: TcpListener::bind("127.0.0.1:0").await.unwrap(),
            conn: None,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.tap.local_addr().unwrap()
    }

    /// Serve one call: read its request (on the open connection, or a new one when the
    /// client opened one), answer with `answer(request)`.
    async fn answer(&mut self, answer: impl FnOnce(&Bytes) -> Vec<u8>) -> Bytes {
        tokio::time::timeout(Duration::from_secs(10), self.serve(answer))
            .await
            .expect("the client sent its request within 10 s")
    }

    async fn serve(&mut self, answer: impl FnOnce(&Bytes) -> Vec<u8>) -> Bytes {
        let mut s = match self.conn.take() {
            Some(s) => s,
            None => self.tap.accept().await.unwrap().0,
        };
        let request = match frame::read_len(&mut s).await {
            Ok(len) => frame::read_body(&mut s, len).await.unwrap(),
            // The client closed the connection we kept (it dropped it after a failure).
            Err(_) => {
                s = self.tap.accept().await.unwrap().0;
                let len = frame::read_len(&mut s).await.unwrap();
                frame::read_body(&mut s, len).await.unwrap()
            }
        };
        s.write_all(&answer(&request)).await.unwrap();
        self.conn = Some(s);
        request
    }
}

fn mac_of(request: &[u8]) -> [u8; 32] {
    request[..32].try_into().unwrap()
}

/// `status` then `body`, framed.
fn reply_frame(status: u8, body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 1) as u32).to_be_bytes().to_vec();
    v.push(status);
    v.extend_from_slice(body);
    v
}

fn genuine_reply(request: &[u8], items: &[&'static str]) -> Bytes {
    let items: Vec<Bytes> = items
        .iter()
        .map(|i| Bytes::from_static(i.as_bytes()))
        .collect();
    wire::seal_reply(&secret(), wire::now_ms(), &mac_of(request), &items)
}

/// Whoever answers on a peer's address without the secret cannot make the client accept
/// an answer: a reply sealed with another secret, a genuine reply captured for an earlier
/// request, a genuine reply bound to another MAC, a genuine reply with a flipped bit or a
/// trailing byte or one item too many, the request reflected back as its own reply, and
/// huge or stalled lengths all fail the call (`Auth`, `Decode`, `Timeout`); the genuine
/// reply is accepted. One runtime thread: the client keeps a link per worker thread, and
/// the fake peer serves one connection at a time, so every call must take the same link.
#[tokio::test(flavor = "current_thread")]
async fn forged_spliced_and_replayed_replies_are_not_accepted_held() {
    let mut fake = FakePeer::new().await;
    let at = fake.addr();
    let limit = Duration::from_secs(2);
    let c = patient_client(limit);
    let call = |data: &'static str| {
        let c = c.clone();
        tokio::spawn(async move {
            c.call(at, Op::Ask, vec![Bytes::from_static(data.as_bytes())])
                .await
        })
    };

    // 1. The genuine reply: accepted (and the connection kept for the next call).
    let pending = call("first");
    let first = fake
        .answer(|r| reply_frame(frame::OK, &genuine_reply(r, &["allow"])))
        .await;
    assert_eq!(pending.await.unwrap(), Ok(vec![Bytes::from("allow")]));
    let captured = genuine_reply(&first, &["allow"]);

    type Forge = Box<dyn FnOnce(&Bytes) -> Vec<u8>>;
    let wrong = Secret::new(b"not the fleet's secret, but 32+ bytes").unwrap();
    let cases: Vec<(&str, Forge, PeerError)> = vec![
        (
            "the earlier request's genuine reply, replayed",
            Box::new(move |_| reply_frame(frame::OK, &captured)),
            PeerError::Auth,
        ),
        (
            "sealed with another secret",
            Box::new(move |r| {
                let m =
                    wire::seal_reply(&wrong, wire::now_ms(), &mac_of(r), &[Bytes::from("allow")]);
                reply_frame(frame::OK, &m)
            }),
            PeerError::Auth,
        ),
        (
            "genuine but bound to another MAC",
            Box::new(|_| {
                let m =
                    wire::seal_reply(&secret(), wire::now_ms(), &[0; 32], &[Bytes::from("allow")]);
                reply_frame(frame::OK, &m)
            }),
            PeerError::Auth,
        ),
        (
            "genuine with a flipped bit (deny → allow)",
            Box::new(|r| {
                let mut m = BytesMut::from(&genuine_reply(r, &["deny!"])[..]);
                let n = m.len();
                m[n - 5..].copy_from_slice(b"allow");
                reply_frame(frame::OK, &m)
            }),
            PeerError::Auth,
        ),
        (
            "genuine then a trailing byte",
            Box::new(|r| {
                let mut v = reply_frame(frame::OK, &genuine_reply(r, &["allow"]));
                v.push(0);
                v
            }),
            PeerError::Decode,
        ),
        (
            "genuine with one item too many",
            Box::new(|r| reply_frame(frame::OK, &genuine_reply(r, &["allow", "allow"]))),
            PeerError::Decode,
        ),
        (
            "the request reflected as its reply",
            Box::new(|r| reply_frame(frame::OK, r)),
            PeerError::Decode,
        ),
        (
            "a length of u32::MAX",
            Box::new(|_| u32::MAX.to_be_bytes().to_vec()),
            PeerError::Decode,
        ),
        (
            "a 16 MiB length, then nothing",
            Box::new(|_| ((MAX_MESSAGE_BYTES + 1) as u32).to_be_bytes().to_vec()),
            PeerError::Timeout,
        ),
        (
            "an unauthenticated refusal",
            Box::new(|_| reply_frame(frame::REFUSED, b"")),
            PeerError::Status(401),
        ),
    ];
    for (what, forge, want) in cases {
        let pending = call("again");
        let t = Instant::now();
        fake.answer(forge).await;
        let got = pending.await.unwrap();
        assert_eq!(got, Err(want), "{what}");
        assert!(
            t.elapsed() < limit + Duration::from_secs(1),
            "{what}: {:?}",
            t.elapsed()
        );
    }

    // After all that, a genuine reply is accepted again (the client resynchronised: no
    // forged bytes were left on a reused connection).
    let pending = call("last");
    fake.answer(|r| reply_frame(frame::OK, &genuine_reply(r, &["allow"])))
        .await;
    assert_eq!(pending.await.unwrap(), Ok(vec![Bytes::from("allow")]));
}

/// The stalled-length attack on real gateways (`site = "owner"`, `on_store_error =
/// "closed"`): a client has spent 1 of its limit of 2 per hour at its owner; while one host
/// without the secret holds the owner's read budget, the client's requests through another
/// node must see at most one more 200 and then 429s. Unsafe outcomes: 503 (the owner cannot
/// be asked) or more 200s (the owner dropped out of the live set, the key moved and started
/// full at its new owner: the attacker reset the limit). (A client already denied would not
/// show it: the entry node remembers an owner's denial and asks no one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_length_claims_cannot_reset_an_owner_key_in_a_fleet() {
    use crate::common::config::{policy, route};
    let up = crate::common::echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy("per_ip", &["ip"], "gcra", 2, "1h", "site = \"owner\""),
        route("api", &["per_ip"], "closed")
    );
    let fleet = crate::common::peers::start(3, up, "heartbeat = \"100ms\"", &limits, "wire-starve");
    fleet.settled().await;
    let ip = "192.0.2.77";
    let owner = fleet.owner_of(&format!("per_ip:ip:{ip}"));
    let entry = fleet.nodes[(owner + 1) % 3].addr;
    let status = |ip: &'static str| async move {
        tokio::time::timeout(
            Duration::from_secs(5),
            crate::common::get_as(entry, "/api", ip, None),
        )
        .await
        .expect("a request hung on a peer")
        .status()
        .as_u16()
    };
    assert_eq!(status(ip).await, 200, "before the attack: 1 of 2 spent");

    let (stop, mut attack) = stalled_claims(fleet.peers[owner]);
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < Duration::from_secs(6) {
        seen.push(status(ip).await);
    }
    stop.store(true, Ordering::Relaxed);
    attack.abort_all();
    let count = |s: u16| seen.iter().filter(|&&x| x == s).count();
    eprintln!(
        "during the attack: {} denied (429), {} refused (503), {} ADMITTED (200) of {}",
        count(429),
        count(503),
        count(200),
        seen.len()
    );
    assert!(
        count(200) <= 1 && count(503) == 0,
        "limit 2, 1 spent before: 429×{} 503×{} 200×{}",
        count(429),
        count(503),
        count(200)
    );
}
