//! `membership.lua` as the fleet's address book (issue 12: with `[cluster] peers` empty
//! and a Redis store, the fleet is the live members that carry a peer address), against a
//! real Redis: asked for "peers", a beat returns the live members' `@addr` suffixes, drops
//! expired ones, still counts twins behind the suffix, and a member without `peer_listen`
//! contributes no address. Without "peers" the reply keeps its three integers.

use std::time::{Duration, Instant};

use crate::common::config::fleet;
use crate::common::process::{GatewayProcess, spawn_serve_with_env, temp_file};
use crate::common::redis::RedisServer;
use crate::common::{echo_upstream, eventually, metric_sum, metrics_text};
use redis::aio::MultiplexedConnection;
use tollgate::limit::membership::MEMBERSHIP_LUA;

const LONG_MS: u64 = 30_000;

async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connecting to the test redis")
}

/// A beat as membership.rs sends it when the fleet comes from membership: the op label,
/// join, member, ttl_ms, "peers"; returns (members, twins, peer addresses sorted).
async fn join_peers(
    conn: &mut MultiplexedConnection,
    member: &str,
    ttl_ms: u64,
) -> (i64, i64, Vec<String>) {
    let (n, twins, _intact, mut peers): (i64, i64, i64, Vec<String>) =
        redis::Script::new(MEMBERSHIP_LUA)
            .key("members")
            .arg("membership")
            .arg("join")
            .arg(member)
            .arg(ttl_ms)
            .arg("peers")
            .invoke_async(conn)
            .await
            .expect("membership.lua replies {members, twins, intact, peers}");
    peers.sort();
    (n, twins, peers)
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|a| a.to_string()).collect()
}

/// Every live member's address comes back (IPv4 and IPv6, this member's included), and a
/// member whose TTL has passed is gone from the addresses as from the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_are_the_live_members_addresses() {
    let redis = RedisServer::start();
    let mut conn = connect(&redis.url()).await;
    let a = "a#01@127.0.0.1:7001";
    assert_eq!(
        join_peers(&mut conn, a, LONG_MS).await,
        (1, 0, strings(&["127.0.0.1:7001"]))
    );
    assert_eq!(
        join_peers(&mut conn, "b#02@[::1]:7002", LONG_MS).await,
        (2, 0, strings(&["127.0.0.1:7001", "[::1]:7002"]))
    );
    // `c` beats once with a 100 ms TTL, then stops: a's beats drop it after that.
    let joined = Instant::now();
    let all = strings(&["127.0.0.1:7001", "127.0.0.1:7003", "[::1]:7002"]);
    assert_eq!(
        join_peers(&mut conn, "c#03@127.0.0.1:7003", 100).await,
        (3, 0, all.clone())
    );
    loop {
        let (n, _, peers) = join_peers(&mut conn, a, LONG_MS).await;
        if n == 2 {
            assert_eq!(peers, strings(&["127.0.0.1:7001", "[::1]:7002"]));
            break;
        }
        assert_eq!(peers, all, "c's address while c is alive");
        assert!(
            joined.elapsed() < Duration::from_secs(2),
            "c was not dropped within 2 s of its 100 ms TTL"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(joined.elapsed() >= Duration::from_millis(95));
}

/// The `@addr` suffix does not hide twins (one node id, two processes), nor make twins of
/// different node ids; a node id may itself hold `#` or `@` (only whitespace is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twins_are_counted_behind_the_address() {
    let redis = RedisServer::start();
    let mut conn = connect(&redis.url()).await;
    let twins = |r: (i64, i64, Vec<String>)| (r.0, r.1);
    let gw1 = "gw#01@127.0.0.1:7001";
    assert_eq!(twins(join_peers(&mut conn, gw1, LONG_MS).await), (1, 0));
    let gw2 = "gw#02@127.0.0.1:7002";
    assert_eq!(twins(join_peers(&mut conn, gw2, LONG_MS).await), (2, 1));
    // One of them without peer_listen (a rolling config change): still a twin.
    assert_eq!(twins(join_peers(&mut conn, "gw#03", LONG_MS).await), (3, 2));
    assert_eq!(twins(join_peers(&mut conn, gw1, LONG_MS).await), (3, 2));
    // A node id that merely starts with the same letters is someone else.
    let gw9 = "gw9#01@127.0.0.1:7009";
    assert_eq!(twins(join_peers(&mut conn, gw9, LONG_MS).await), (4, 0));
    // Node ids holding '#' and '@': twins of each other only, addresses still read.
    let odd = "g#w@x#01@127.0.0.1:7011";
    assert_eq!(twins(join_peers(&mut conn, odd, LONG_MS).await), (5, 0));
    let (n, t, peers) = join_peers(&mut conn, "g#w@x#02@127.0.0.1:7012", LONG_MS).await;
    assert_eq!((n, t), (6, 1));
    assert!(
        peers.contains(&"127.0.0.1:7011".to_string())
            && peers.contains(&"127.0.0.1:7012".to_string()),
        "{peers:?}"
    );
    assert_eq!(twins(join_peers(&mut conn, "g#01", LONG_MS).await), (7, 0));
}

/// A member without `peer_listen` is counted (N) but is no peer: nothing of its name is
/// taken for an address, even when its node id holds an '@'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_peer_listen_has_no_address() {
    let redis = RedisServer::start();
    let mut conn = connect(&redis.url()).await;
    assert_eq!(
        join_peers(&mut conn, "plain#01", LONG_MS).await,
        (1, 0, vec![])
    );
    assert_eq!(
        join_peers(&mut conn, "ops@10.0.0.9:80#02", LONG_MS).await,
        (2, 0, vec![])
    );
    assert_eq!(
        join_peers(&mut conn, "p#03@127.0.0.1:7003", LONG_MS).await,
        (3, 0, strings(&["127.0.0.1:7003"]))
    );
}

/// Without "peers" the reply is the three integers every counting caller reads, whatever
/// the members' names; and the peers call touches only its declared key (run as a Redis
/// ACL user allowed that key alone, as the limiter's tests/scripts/keys.rs does for the other ops).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_peers_the_reply_is_three_integers_and_only_the_key_is_touched() {
    let redis = RedisServer::start();
    let acl = ["ACL", "SETUSER", "m", "reset", "on", ">secret", "+@all"];
    assert_eq!(redis.cli(&[&acl[..], &["~members"]].concat()), "OK");
    let url = format!("redis://m:secret@127.0.0.1:{}", redis.port);
    let mut conn = connect(&url).await;
    join_peers(&mut conn, "a#01@127.0.0.1:7001", LONG_MS).await;
    let reply: Vec<i64> = redis::Script::new(MEMBERSHIP_LUA)
        .key("members")
        .arg("membership")
        .arg("join")
        .arg("b#02@127.0.0.1:7002")
        .arg(LONG_MS)
        .invoke_async(&mut conn)
        .await
        .expect("three integers");
    assert_eq!(reply, [2, 0, 0], "members, twins, intact (b's first beat)");
}

/// `n` free loopback ports (bound, then released) for the gateways' `peer_listen`.
fn free_ports(n: usize) -> Vec<std::net::SocketAddr> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("its address"))
        .collect()
}

/// A gateway with `peer_listen = me` and no `peers`: its fleet is whatever membership says.
fn gateway(
    redis: &RedisServer,
    up: std::net::SocketAddr,
    me: std::net::SocketAddr,
    id: &str,
) -> GatewayProcess {
    let keys = format!(
        "node_id = \"{id}\"\nheartbeat = \"100ms\"\npeer_listen = \"{me}\"\npeer_secret_env = \"TOLLGATE_PEER_SECRET\""
    );
    let config = fleet(up, &keys)
        .redis(&redis.url(), "300ms")
        .app_route("api", "")
        .build();
    spawn_serve_with_env(
        &temp_file(&format!("membership-peers-{id}.toml"), &config),
        &[(
            "TOLLGATE_PEER_SECRET",
            "a test fleet's shared peer secret, 32+ bytes",
        )],
    )
}

/// Every running gateway sees `n` live peers (`tollgate_peers_live`, itself included).
async fn all_see(nodes: &[&GatewayProcess], n: f64) {
    eventually(
        &format!("every gateway sees {n} peers"),
        Duration::from_secs(5),
        || async {
            for node in nodes {
                let text = metrics_text(node.admin.expect("an admin listener")).await;
                if metric_sum(&text, "tollgate_peers_live") != n {
                    return false;
                }
            }
            true
        },
    )
    .await;
}

/// Issue 12, end to end: gateways that name only themselves (`peer_listen`, no `peers`)
/// find each other through membership as they start, and lose a killed one when its
/// membership expires: the fleet grows and shrinks with no config edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_grows_and_shrinks_through_membership() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let ports = free_ports(3);
    let a = gateway(&redis, up, ports[0], "a");
    all_see(&[&a], 1.0).await;
    let b = gateway(&redis, up, ports[1], "b");
    all_see(&[&a, &b], 2.0).await;
    let c = gateway(&redis, up, ports[2], "c");
    all_see(&[&a, &b, &c], 3.0).await;
    drop(c);
    all_see(&[&a, &b], 2.0).await;
}
