//! The interim owner's fence (issue 47, `fleet/fence.rs`): once an owner back from a
//! quarantine has read the interim owner's count of a key, an ask for that key still in
//! flight to the interim owner (sent by a third node before it counted the owner in) is
//! passed on to the owner, not decided on the count the owner already took. Three real
//! gateways; the owner's hand-back is the real one of its start, and the test speaks the
//! peer protocol itself as the third node, so the race is laid out in order instead of
//! hoped for.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::{policy, route};
use crate::common::peers;
use crate::common::*;
use bytes::{BufMut, Bytes, BytesMut};
use http::StatusCode;
use prometheus_client::registry::Registry;
use tollgate::limit::fleet::ring::{node_hash, pick};
use tollgate::limit::peer::wire::{Op, Secret};
use tollgate::limit::peer::{PeerClient, PeerMetrics};

const IP: &str = "198.51.100.48";

/// An owner item as `fleet/codec.rs` encodes it; `spec` the policy's fingerprint there:
/// FNV-1a of its algorithm and numbers (a wrong one is answered `Unknown`, which the test
/// would see: the asks below must be admitted).
fn key_item(key: &str, cost: u32) -> Bytes {
    let numbers = format!("Gcra|2|{}|2|1|0", Duration::from_secs(3600).as_nanos());
    let mut b = BytesMut::new();
    b.put_u16(6);
    b.put_slice(b"per_ip");
    b.put_u64(node_hash(&numbers));
    b.put_u32(1);
    b.put_u32(cost);
    b.put_slice(key.as_bytes());
    b.freeze()
}

/// A peer client that signs as the fleet member `me`.
fn client_as(me: SocketAddr) -> PeerClient {
    let mut registry = Registry::default();
    let metrics = PeerMetrics::register(&mut registry);
    let secret = Secret::new(peers::SECRET.as_bytes()).unwrap();
    PeerClient::new(me, secret, Duration::from_secs(2), metrics)
}

/// The status byte of an owner's answer (`fleet/codec.rs`): 1 admitted, 2 denied, 3 unknown.
fn answer_status(reply: &[Bytes]) -> u8 {
    assert_eq!(reply.len(), 1, "one answer per item");
    assert_eq!(
        reply[0].len(),
        33,
        "an answer, not a failure: {:?}",
        reply[0]
    );
    reply[0][0]
}

async fn status(addr: SocketAddr) -> StatusCode {
    tokio::time::timeout(Duration::from_secs(5), get_as(addr, "/api", IP, None))
        .await
        .expect("a request hung on a peer")
        .status()
}

/// The fleet, and for `IP`'s key: its owner, its interim owner (the owner were it counted
/// out: the rendezvous pick among the others) and the third node.
async fn fleet(name: &str) -> (peers::PeerFleet, String, usize, usize, usize) {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy(
            "per_ip",
            &["ip"],
            "gcra",
            2,
            "1h",
            "site = \"owner\"\nburst = 2"
        ),
        route("api", &["per_ip"], "closed")
    );
    let fleet = peers::start(3, up, "heartbeat = \"100ms\"", &limits, name);
    fleet.settled().await;
    let key = format!("per_ip:ip:{IP}");
    let owner = fleet.owner_of(&key);
    let others = (0..3)
        .filter(|&i| i != owner)
        .map(|i| (i, node_hash(&fleet.peers[i].to_string())));
    let interim = pick(&key, others).unwrap();
    let third = 3 - owner - interim;
    (fleet, key, owner, interim, third)
}

/// Every node starts in quarantine (a restart is new to itself, not to its peers), so the
/// owner's first decision of the key takes the interim owner's count (the hand-back). Then a
/// third node's ask, sent before it counted the owner in, reaches the interim owner: it is
/// decided at the owner, so the owner's budget of 2 is spent by the two, and a third is 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_ask_at_the_interim_owner_is_decided_by_the_owner_that_took_the_key_back() {
    let (fleet, key, owner, interim, third) = fleet("owner-fence").await;
    let entry = fleet.nodes[owner].addr;
    assert_eq!(
        status(entry).await,
        StatusCode::OK,
        "the hand-back, and one spend"
    );
    let late = client_as(fleet.peers[third])
        .call(fleet.peers[interim], Op::Ask, vec![key_item(&key, 1)])
        .await
        .expect("the interim owner answers the ask");
    assert_eq!(answer_status(&late), 1, "admitted (by the owner)");
    assert_eq!(
        status(entry).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the late ask was decided at the interim owner, on a count the owner had already taken"
    );
}

/// An ask that reaches a node that is not the interim owner the owner read is still
/// decided there (ring views may differ for a moment; no count was handed back from it),
/// and the owner's budget is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_at_a_node_no_key_was_handed_back_from_is_decided_there() {
    let (fleet, key, owner, interim, third) = fleet("owner-nofence").await;
    let entry = fleet.nodes[owner].addr;
    assert_eq!(
        status(entry).await,
        StatusCode::OK,
        "the hand-back, and one spend"
    );
    let asked = client_as(fleet.peers[interim])
        .call(fleet.peers[third], Op::Ask, vec![key_item(&key, 1)])
        .await
        .expect("answered");
    assert_eq!(answer_status(&asked), 1, "admitted where it landed");
    assert_eq!(
        status(entry).await,
        StatusCode::OK,
        "the owner's budget was untouched"
    );
    assert_eq!(status(entry).await, StatusCode::TOO_MANY_REQUESTS);
}
