//! `site = "gossip"` on three real gateway processes: each counts locally and pushes its
//! deltas every `gossip_interval`; at 2× overload the fleet stays within the documented
//! bound (README, "Gossip counters"), and a forged gossip message changes nothing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::{policy, route};
use crate::common::peers;
use crate::common::*;
use bytes::{BufMut, BytesMut};
use futures_util::future::join_all;
use http::StatusCode;
use tollgate::limit::peer::wire::{self, Item, Op, Secret};

const LIMIT: f64 = 100.0;
const BURST: f64 = 10.0;

/// One node's share of the load: `per_second` requests of one client for `for_`,
/// paced; how many passed.
async fn load(addr: SocketAddr, ip: &str, per_second: u32, for_: Duration) -> (usize, usize) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let until = Instant::now() + for_;
    let (mut sent, mut ok) = (0, 0);
    while Instant::now() < until {
        tick.tick().await;
        sent += 1;
        match get_as(addr, "/api", ip, None).await.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    (sent, ok)
}

/// 100 per second with bursts of 10, offered 200 per second (each node a third) for two
/// seconds. The bound over the run's length D is `burst + 100·D` plus the gossip excess
/// `U ≤ (N − 1)·(burst + r·S)`, S = interval + delivery; with 20 ms and a generous 50 ms
/// for delivery on a loaded test machine, U ≤ 2·(10 + 7) = 34. The fleet must also not
/// starve: at least 90 % of 100·D.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_stays_within_its_bound_at_twice_the_limit() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy(
            "shared",
            &["ip"],
            "gcra",
            100,
            "1s",
            "burst = 10\nsite = \"gossip\""
        ),
        route("api", &["shared"], "closed")
    );
    let cluster = "heartbeat = \"100ms\"\ngossip_interval = \"20ms\"";
    let fleet = peers::start(3, up, cluster, &limits, "gossip-bound");
    fleet.settled().await;
    let started = Instant::now();
    let runs = join_all(
        fleet
            .nodes
            .iter()
            .map(|n| load(n.addr, "198.51.100.1", 67, Duration::from_secs(2))),
    )
    .await;
    let d = started.elapsed().as_secs_f64();
    let (sent, ok): (usize, usize) = runs
        .iter()
        .fold((0, 0), |(s, o), (s1, o1)| (s + s1, o + o1));
    let bound = BURST + LIMIT * d;
    let excess = 2.0 * (BURST + LIMIT * 0.07);
    assert!(
        sent as f64 >= 1.6 * LIMIT * d,
        "the load was not an overload: {sent} in {d:.2}s"
    );
    eprintln!("gossip at 2x: admitted {ok} of {sent} in {d:.2}s (bound {bound:.0}, + {excess:.0})");
    assert!(
        (ok as f64) <= bound + excess,
        "admitted {ok} of {sent} in {d:.2}s: bound {bound:.0} + gossip excess {excess:.0}"
    );
    assert!(
        (ok as f64) >= 0.9 * LIMIT * d,
        "admitted only {ok} of {sent} in {d:.2}s"
    );
    let gossip = fleet
        .metric("tollgate_peer_calls_total{op=\"gossip\"}")
        .await;
    assert!(gossip > 0.0, "no gossip was sent");
}

/// A gossip item claiming 1000 spent cells, sealed with the wrong secret, is refused and
/// counted; the key still admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_gossip_message_spends_nothing() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy("shared", &["ip"], "gcra", 5, "1h", "site = \"gossip\""),
        route("api", &["shared"], "closed")
    );
    let fleet = peers::start(3, up, "heartbeat = \"100ms\"", &limits, "gossip-forged");
    fleet.settled().await;
    let ip = "192.0.2.44";
    let mut data = BytesMut::new();
    data.put_u16(6);
    data.put_slice(b"shared");
    data.put_u64(0);
    data.put_u32(1);
    data.put_u32(1000);
    data.put_slice(format!("shared:ip:{ip}").as_bytes());
    let item = Item {
        op: Op::Gossip,
        data: data.freeze(),
    };
    let wrong = Secret::new(b"not the fleet's secret but 32+ bytes long").unwrap();
    let sender = fleet.peers[1].to_string();
    let (_, message) = wire::seal_request(
        &wrong,
        &sender,
        &fleet.peers[0].to_string(),
        wire::now_ms(),
        7,
        &[item],
    );
    assert_eq!(peers::post_raw(fleet.peers[0], &message).await, 401);
    assert_eq!(
        fleet
            .metric("tollgate_peer_errors_total{kind=\"auth\"}")
            .await,
        1.0
    );
    assert_eq!(
        get_as(fleet.nodes[0].addr, "/api", ip, None).await.status(),
        StatusCode::OK,
        "the forged delta spent nothing"
    );
}

/// What one node admits is counted by the others once gossiped: a client that spent its
/// 5 on node 0 is denied on nodes 1 and 2 (hourly limit: nothing refills meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spends_on_one_node_deny_on_the_others() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy("shared", &["ip"], "gcra", 5, "1h", "site = \"gossip\""),
        route("api", &["shared"], "closed")
    );
    let cluster = "heartbeat = \"100ms\"\ngossip_interval = \"10ms\"";
    let fleet = peers::start(3, up, cluster, &limits, "gossip-spread");
    fleet.settled().await;
    let ip = "192.0.2.45";
    for _ in 0..5 {
        assert_eq!(
            get_as(fleet.nodes[0].addr, "/api", ip, None).await.status(),
            StatusCode::OK
        );
    }
    // Node 0 has pushed its 5 cells to both peers and every push has answered.
    let admin = fleet.nodes[0].admin.unwrap();
    eventually(
        "node 0's gossip delivered",
        Duration::from_secs(5),
        || async move {
            let m = metrics_text(admin).await;
            let calls = metric_sum(&m, "tollgate_peer_calls_total");
            let done = metric_sum(&m, "tollgate_peer_latency_seconds_count")
                + metric_sum(&m, "tollgate_peer_errors_total");
            metric_sum(&m, "tollgate_gossip_sent_cells_total") >= 10.0 && calls == done
        },
    )
    .await;
    for n in &fleet.nodes[1..] {
        assert_eq!(
            get_as(n.addr, "/api", ip, None).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "node 0's spends count here"
        );
    }
}
