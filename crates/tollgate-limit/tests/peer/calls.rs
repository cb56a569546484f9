//! Calls that succeed or are refused: round trips, coalesced concurrent calls, forged,
//! stale and replayed messages.

use super::*;

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
    use tollgate_limit::peer::frame;
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
