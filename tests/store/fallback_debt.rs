//! `on_store_error = "local"` around a store crash, with three real gateway processes and a
//! real Redis killed with SIGKILL and restarted (its append-only file keeps every write):
//! what the fleet admitted on the L/N fallback is debited to the store when it is back, so
//! the fleet admits nothing more until the key has drained.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::fleet;
use crate::common::process::{GatewayProcess, spawn_serve, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;
use http::StatusCode;

const CLIENT: &str = "198.51.100.7";

async fn admitted_of(addr: SocketAddr, n: usize, path: &str) -> usize {
    admitted(addr, path, CLIENT, n).await
}

/// A limit of 30 per hour, burst 30 (so the bound over the test is 30), three nodes, each
/// with a fallback share of 10. Before the crash node A spends 6. While Redis is dead the
/// three nodes admit their shares on the fallback: 30. After the restart the store holds
/// 6 + 30 = 36 spent (past empty): no node admits again. Without the debit the store
/// would still see 24 left and the fleet would admit 60, twice the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_admissions_are_debited_when_the_store_returns() {
    for algorithm in ["gcra", "token_bucket", "sliding_window"] {
        the_fleet_admits_nothing_more_after_the_outage(algorithm, "central").await;
    }
}

/// The same for a leased key: node A may also spend the cells it holds (at most
/// `lease_max` = 6 beyond its share), and the rest of the coordinator's budget is debited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_fallback_admissions_are_debited_too() {
    the_fleet_admits_nothing_more_after_the_outage("gcra", "lease").await;
}

async fn the_fleet_admits_nothing_more_after_the_outage(algorithm: &str, site: &str) {
    let mut redis = RedisServer::start_persistent();
    let up = echo_upstream().await;
    let burst = if algorithm == "sliding_window" {
        ""
    } else {
        "burst = 30\n"
    };
    let lease = if site == "lease" {
        "lease_max = 6\n"
    } else {
        ""
    };
    let extra = format!("{burst}{lease}site = \"{site}\"");
    let nodes: Vec<GatewayProcess> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            spawn_serve(&temp_file(
                &format!("debt-{site}-{algorithm}-{id}.toml"),
                &fleet(up, &format!("node_id = \"{id}\"\nheartbeat = \"100ms\""))
                    .patient_redis(&redis.url(), "100ms")
                    .policy("shared", &["ip"], algorithm, 30, "1h", &extra)
                    .route("api", &["shared"], "local")
                    .build(),
            ))
        })
        .collect();
    for n in &nodes {
        let admin = n.admin.unwrap();
        eventually("three members", Duration::from_secs(5), || async move {
            metrics_text(admin)
                .await
                .contains("tollgate_cluster_nodes 3")
        })
        .await;
    }

    assert_eq!(
        admitted_of(nodes[0].addr, 6, "/api").await,
        6,
        "{algorithm}: before the crash"
    );
    // What the store has given out so far (6 spent, and on the lease site what node A
    // still holds): cells of 2 minutes (30 per hour) ahead of Redis's clock.
    // (token_bucket and sliding_window keep no time: there the 6 spent is all it gave.)
    let granted = cells_ahead(&redis, &format!("tg:shared:ip:{CLIENT}")).unwrap_or(6);
    assert!(
        granted >= 6,
        "{algorithm}: the store counted {granted} of 6"
    );
    redis.stop();
    let mut during = 0;
    for (i, n) in nodes.iter().enumerate() {
        let ok = admitted_of(n.addr, 25, "/api").await;
        // Node A may still spend the leased cells it holds.
        let held = if site == "lease" && i == 0 {
            granted - 6
        } else {
            0
        };
        assert!(
            ok <= 10 + held,
            "{algorithm}: a node admitted {ok} on a fallback share of 10"
        );
        during += ok;
    }
    assert!(
        during >= 27,
        "{algorithm}: the fallback admitted only {during}"
    );
    for n in &nodes {
        assert!(
            metrics_text(n.admin.unwrap())
                .await
                .contains("tollgate_store_debt_keys 1"),
            "{algorithm}: each node owes the store one key"
        );
    }

    redis.start_again();
    for n in &nodes {
        let admin = n.admin.unwrap();
        eventually("the debt is paid", Duration::from_secs(5), || async move {
            metrics_text(admin)
                .await
                .contains("tollgate_store_debt_keys 0")
        })
        .await;
    }
    let mut after = 0;
    for n in &nodes {
        after += admitted_of(n.addr, 10, "/api").await;
    }
    assert_eq!(
        after, 0,
        "{algorithm}: the store holds 6 + {during} spent of 30, yet the fleet admitted {after} more"
    );
}

/// Cells of a 30-per-hour GCRA key spent ahead of Redis's clock (its arrival time);
/// `None` when the key holds no time (another algorithm's state, or nothing).
fn cells_ahead(redis: &RedisServer, key: &str) -> Option<usize> {
    let tat: f64 = redis.cli(&["GET", key]).parse().ok()?;
    let time = redis.cli(&["TIME"]);
    let mut t = time.lines().map(|l| l.trim().parse::<f64>().unwrap());
    let now = t.next().unwrap() * 1e6 + t.next().unwrap();
    Some(((tat - now) / 120e6).round().max(0.0) as usize)
}

/// A fail-closed route that shares a key with a `local` one answers as soon as the store
/// does: its request pays what the key owes (one debit call) and is then decided in the
/// store, rather than being refused until a background payment lands. Membership beats
/// only hourly here, so nothing else pays it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_closed_route_pays_a_shared_key_and_answers() {
    let mut redis = RedisServer::start_persistent();
    let cfg = fleet(echo_upstream().await, "heartbeat = \"1h\"")
        .patient_redis(&redis.url(), "200ms")
        .policy(
            "shared",
            &["ip"],
            "gcra",
            30,
            "1h",
            "burst = 30\nsite = \"central\"",
        )
        .route("local", &["shared"], "local")
        .route("closed", &["shared"], "closed")
        .build();
    let gw = Gateway::start(&cfg).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    let decided = |ip: &'static str| async move {
        let r = get_as(addr, "/closed", ip, None).await;
        (r.status(), r.headers().contains_key("ratelimit"))
    };
    assert_eq!(decided(CLIENT).await, (StatusCode::OK, true));
    redis.stop();
    assert_eq!(
        admitted_of(addr, 3, "/local").await,
        3,
        "the fallback admits"
    );
    redis.start_again();
    // Another client's key owes nothing: once it is decided, the store answers.
    eventually("the store answers", Duration::from_secs(5), || async {
        decided("198.51.100.8").await == (StatusCode::OK, true)
    })
    .await;
    assert_eq!(
        decided(CLIENT).await,
        (StatusCode::OK, true),
        "the owed key was refused although the store answers"
    );
    let m = metrics_text(admin).await;
    assert!(
        m.contains("tollgate_store_debt_keys 0"),
        "the debt was paid"
    );
    assert!(
        metric_sum(&m, "tollgate_store_calls_total{op=\"debit\"}") >= 1.0,
        "one debit call"
    );
    // The store counted 1 + 3 (fallback) + 1: the key has 25 left of 30.
    let cells = cells_ahead(&redis, &format!("tg:shared:ip:{CLIENT}"));
    assert_eq!(cells, Some(5), "spent cells as the store counts them");
}
