//! Malformed, truncated, oversized and stalled frames, and denial of service without the
//! secret (stalled length claims, every connection place taken).

use super::*;

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
