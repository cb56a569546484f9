//! The peer transport on real loopback sockets: a round trip, coalescing of concurrent calls,
//! refusal of forged, stale and replayed messages, and a dead peer failing within the timeout.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus_client::registry::Registry;
use tollgate::limit::peer::wire::{self, Item, Op, Secret};
use tollgate::limit::peer::{
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_answers_each_item_in_order() {
    let peer = node(Duration::ZERO).await;
    let (client, registry) = client(me(), secret());
    let items = vec![Bytes::from_static(b"a"), Bytes::from_static(b"bb")];
    let replies = client
        .call(peer.server.local_addr(), Op::Ask, items)
        .await
        .expect("answered");
    assert_eq!(replies, vec![Bytes::from("ask:a"), Bytes::from("ask:bb")]);
    let seen = peer.handler.messages();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, me(), "the handler learns the signed sender");
    assert_eq!(
        sample(&registry, "tollgate_peer_calls_total{op=\"ask\"}"),
        1.0
    );
    assert_eq!(
        sample(&registry, "tollgate_peer_latency_seconds_count"),
        1.0
    );
    // A second call reuses the connection and still answers.
    let replies = client
        .call(peer.server.local_addr(), Op::Ping, vec![Bytes::new()])
        .await
        .expect("answered");
    assert_eq!(replies, vec![Bytes::from("ping:")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_to_one_peer_share_messages() {
    let peer = node(Duration::from_millis(5)).await;
    let (client, registry) = client(me(), secret());
    let addr = peer.server.local_addr();
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let reply = client
                    .call(addr, Op::Ask, vec![Bytes::from(format!("k{i}"))])
                    .await;
                (i, reply)
            })
        })
        .collect();
    for call in calls {
        let (i, reply) = call.await.unwrap();
        // Each caller gets its own item's answer, not a neighbour's.
        assert_eq!(reply, Ok(vec![Bytes::from(format!("ask:k{i}"))]));
    }
    let messages = peer.handler.messages();
    eprintln!("100 concurrent calls in {} messages", messages.len());
    let items: usize = messages.iter().map(|(_, r)| r.items.len()).sum();
    assert_eq!(items, 100);
    assert!(
        messages.len() < 20,
        "100 concurrent calls took {} messages",
        messages.len()
    );
    assert_eq!(
        sample(&registry, "tollgate_peer_calls_total{op=\"ask\"}"),
        100.0
    );
}

/// Send one framed message to a peer, as an attacker on the peer network could.
async fn post(addr: SocketAddr, message: Bytes) -> u16 {
    use tollgate::limit::peer::frame;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    frame::write(&mut stream, None, &message).await.unwrap();
    let len = frame::read_len(&mut stream).await.unwrap();
    let reply = frame::read_body(&mut stream, len).await.unwrap();
    frame::status_code(reply[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_stale_and_replayed_messages_are_refused_and_counted() {
    let peer = node(Duration::ZERO).await;
    let addr = peer.server.local_addr();
    let item = |s: &'static str| {
        vec![Item {
            op: Op::Gossip,
            data: Bytes::from_static(s.as_bytes()),
        }]
    };
    let sender = me().to_string();
    let to = addr.to_string();
    let now = wire::now_ms();

    let wrong = Secret::new(&[b'x'; 32]).unwrap();
    let (_, forged) = wire::seal_request(&wrong, &sender, &to, now, 1, &item("forged"));
    assert_eq!(post(addr, forged).await, 401, "wrong secret");

    let (_, stale) = wire::seal_request(&secret(), &sender, &to, now - 10_000, 2, &item("stale"));
    assert_eq!(post(addr, stale).await, 401, "ten seconds old");

    let (_, future) = wire::seal_request(&secret(), &sender, &to, now + 10_000, 3, &item("future"));
    assert_eq!(post(addr, future).await, 401, "ten seconds ahead");

    let (_, fresh) = wire::seal_request(&secret(), &sender, &to, now, 4, &item("fresh"));
    assert_eq!(post(addr, fresh.clone()).await, 200, "the genuine message");
    assert_eq!(post(addr, fresh).await, 401, "the same message again");

    // Sealed for another peer (captured on its way there): refused here.
    let (_, elsewhere) = wire::seal_request(
        &secret(),
        &sender,
        "127.0.0.1:1",
        now,
        5,
        &item("elsewhere"),
    );
    assert_eq!(
        post(addr, elsewhere).await,
        401,
        "addressed to another peer"
    );

    // A client configured with the wrong secret is refused the same way.
    let (bad_client, _) = client(me(), wrong);
    let err = bad_client
        .call(addr, Op::Gossip, vec![Bytes::from_static(b"client")])
        .await;
    assert_eq!(err, Err(PeerError::Status(401)));

    let seen: Vec<Bytes> = peer
        .handler
        .messages()
        .into_iter()
        .flat_map(|(_, r)| r.items.into_iter().map(|i| i.data))
        .collect();
    assert_eq!(
        seen,
        vec![Bytes::from_static(b"fresh")],
        "only the genuine one"
    );
    assert_eq!(
        sample(&peer.registry, "tollgate_peer_errors_total{kind=\"auth\"}"),
        6.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_peer_fails_within_the_timeout() {
    let (client, registry) = client(me(), secret());

    // Nobody listens: refused at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let t = Instant::now();
    let err = client.call(closed, Op::Ask, vec![Bytes::new()]).await;
    assert!(matches!(err, Err(PeerError::Connect(_))), "{err:?}");
    assert!(t.elapsed() < TIMEOUT, "{:?}", t.elapsed());

    // Accepts connections and never answers (a hung process): the timeout, not longer.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    let acceptor = tokio::spawn(async move {
        while let Ok((s, _)) = silent.accept().await {
            keep.lock().unwrap().push(s);
        }
    });
    for attempt in 0..2 {
        let t = Instant::now();
        // The outer bound turns a call that would hang into a failure.
        let call = client.call(silent_addr, Op::Ask, vec![Bytes::new()]);
        let err = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the call returned by itself");
        let took = t.elapsed();
        assert_eq!(err, Err(PeerError::Timeout), "attempt {attempt}");
        // Slack for a loaded machine's timers; the bound is the client's own timeout.
        assert!(
            took >= TIMEOUT && took < TIMEOUT + Duration::from_secs(1),
            "attempt {attempt} took {took:?}"
        );
    }
    acceptor.abort();
    assert_eq!(
        sample(&registry, "tollgate_peer_errors_total{kind=\"connect\"}"),
        1.0
    );
    assert_eq!(
        sample(&registry, "tollgate_peer_errors_total{kind=\"timeout\"}"),
        2.0
    );
}

/// One message that never gets its answer must not hold up the calls queued behind it for
/// longer than the timeout: the message is abandoned and the next one goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_message_does_not_block_the_next_one() {
    let peer = node_with(Echo {
        hang_first: Duration::from_secs(3),
        ..Echo::default()
    })
    .await;
    let addr = peer.server.local_addr();
    let (client, _) = client(me(), secret());
    let first = client.call(addr, Op::Ask, vec![Bytes::from("a")]).await;
    assert_eq!(first, Err(PeerError::Timeout));
    let t = Instant::now();
    let second = client.call(addr, Op::Ask, vec![Bytes::from("b")]).await;
    assert_eq!(
        second,
        Ok(vec![Bytes::from("ask:b")]),
        "after {:?}",
        t.elapsed()
    );
}

/// The client's observer hears once per message: three calls that one hung message
/// carried are one failure of the peer (the owner ring counts these: one lost message
/// must not move a peer's keys), and the next message is one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_hears_each_message_once() {
    let peer = node_with(Echo {
        hang_first: Duration::from_secs(3),
        delay: Duration::from_millis(50),
        ..Echo::default()
    })
    .await;
    let addr = peer.server.local_addr();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let log = heard.clone();
    let mut registry = Registry::default();
    let client = PeerClient::observed(
        me(),
        secret(),
        TIMEOUT,
        PeerMetrics::register(&mut registry),
        Some(Box::new(move |p, ok| log.lock().unwrap().push((p, ok)))),
    );
    // The first message goes out alone and hangs; two more calls queue behind it.
    let first = client.call(addr, Op::Ask, vec![Bytes::from("a")]);
    let (a, b, c) = tokio::join!(
        first,
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.call(addr, Op::Ask, vec![Bytes::from("b")]).await
        },
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.call(addr, Op::Ask, vec![Bytes::from("c")]).await
        },
    );
    assert_eq!(a, Err(PeerError::Timeout));
    // b and c leave in the next message once the hung one has failed; whether they still
    // wait for it by then is timing, and does not matter here.
    let _ = (b, c);
    client
        .call(addr, Op::Ask, vec![Bytes::from("d")])
        .await
        .unwrap();
    let heard = heard.lock().unwrap().clone();
    let failed = heard.iter().filter(|(_, ok)| !ok).count();
    assert_eq!(failed, 1, "one failed message: {heard:?}");
    assert_eq!(heard.last(), Some(&(addr, true)), "{heard:?}");
}

/// Whoever can reach the peer port without the secret cannot lock the fleet out: one
/// source address keeps at most 32 connections (the rest are closed at once), a connection
/// that delivers no authentic message is closed after 5 s, and a genuine peer gets in
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_cannot_lock_peers_out() {
    use tokio::io::AsyncReadExt;
    let peer = node(Duration::ZERO).await;
    let addr = peer.server.local_addr();
    let mut silent = Vec::new();
    for _ in 0..40 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        silent.push(socket.connect(addr).await.unwrap());
    }
    let (client, _) = client(me(), secret());
    let answer = client.call(addr, Op::Ping, vec![Bytes::new()]).await;
    assert!(answer.is_ok(), "{answer:?}");
    // Read each silent connection to its end; note when it came.
    let started = Instant::now();
    let closed_at = futures_util::future::join_all(silent.into_iter().map(|mut s| async move {
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(Duration::from_secs(8), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(Instant::now()),
                Ok(Ok(_)) => continue,
                Err(_) => return None,
            }
        }
    }))
    .await;
    let at_once = closed_at
        .iter()
        .filter(|t| t.is_some_and(|t| t - started < Duration::from_secs(2)))
        .count();
    assert_eq!(at_once, 8, "40 from one address, 32 kept");
    assert!(
        closed_at.iter().all(Option::is_some),
        "every silent connection is closed within 8 s"
    );
}
