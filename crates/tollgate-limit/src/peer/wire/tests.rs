//! Unit tests of the peer wire format (a child of `wire.rs`, which they test from inside).
use super::*;

fn secret(fill: u8) -> Secret {
    Secret::new(&[fill; 32]).expect("32 bytes")
}

fn items() -> Vec<Item> {
    vec![
        Item {
            op: Op::Ask,
            data: Bytes::from_static(b"key-1"),
        },
        Item {
            op: Op::Gossip,
            data: Bytes::new(),
        },
    ]
}

#[test]
fn a_request_and_its_reply_round_trip() {
    let s = secret(7);
    let (mac, msg) = seal_request(
        &s,
        "127.0.0.1:7946",
        "127.0.0.1:7947",
        1_000_000,
        9,
        &items(),
    );
    let opened = open_request(&s, &msg, 1_000_000 + 4_999).expect("opens");
    assert_eq!(opened.items, items());
    assert_eq!(opened.sender, "127.0.0.1:7946");
    assert_eq!(opened.to, "127.0.0.1:7947");
    assert_eq!(opened.mac, mac);
    let replies = vec![Bytes::from_static(b"ok"), Bytes::new()];
    let reply = seal_reply(&s, 1_000_001, &mac, &replies);
    assert_eq!(
        open_reply(&s, BytesMut::from(&reply[..]), &mac),
        Ok(replies)
    );
}

#[test]
fn wrong_secret_stale_time_and_altered_bytes_are_refused() {
    let s = secret(7);
    let (mac, msg) = seal_request(&s, "a", "b", 1_000_000, 1, &items());
    assert_eq!(
        open_request(&secret(8), &msg, 1_000_000).err(),
        Some(WireError::BadMac)
    );
    assert_eq!(
        open_request(&s, &msg, 1_000_000 + 5_001).err(),
        Some(WireError::Stale)
    );
    assert_eq!(
        open_request(&s, &msg, 1_000_000 - 5_001).err(),
        Some(WireError::Stale)
    );
    let mut altered = msg.to_vec();
    *altered.last_mut().expect("not empty") ^= 1;
    assert_eq!(
        open_request(&s, &Bytes::from(altered), 1_000_000).err(),
        Some(WireError::BadMac)
    );
    let reply = seal_reply(&s, 1_000_000, &mac, &[]);
    let (other, _) = seal_request(&s, "a", "b", 1_000_000, 2, &items());
    assert_eq!(
        open_reply(&s, BytesMut::from(&reply[..]), &other).err(),
        Some(WireError::BadMac),
        "a reply answers one request only"
    );
}

#[test]
fn truncated_messages_are_malformed_not_panics() {
    let s = secret(7);
    let (_, msg) = seal_request(&s, "a", "b", 1_000_000, 1, &items());
    for len in 0..msg.len() {
        assert!(
            open_request(&s, &msg.slice(..len), 1_000_000).is_err(),
            "{len}"
        );
    }
    assert!(Secret::new(&[1; 31]).is_none());
}
