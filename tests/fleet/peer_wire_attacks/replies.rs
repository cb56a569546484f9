//! The reply path: forged, spliced and replayed replies from whoever answers on a peer's
//! address, and the stalled-length attack on a real owner fleet.

use super::*;

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
