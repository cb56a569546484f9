//! Peers that fail: a dead peer within the timeout, a hung message, the observer, and
//! silent connections that must not lock peers out.

use super::*;

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
