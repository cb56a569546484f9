//! Three gateway processes whose configs differ for one policy (a rolling deploy, a
//! copy-paste slip): a node never decides another's keys by other numbers. An owner asked
//! for a policy it runs differently refuses (the asker applies `on_store_error` and counts
//! `tollgate_peer_errors_total{kind="config"}`); gossip it runs differently is refused and
//! counted the same way.

use std::time::Duration;

use crate::common::config::{policy, route};
use crate::common::peers;
use crate::common::*;
use http::StatusCode;

/// Node 2 runs `limit = 6` where nodes 0 and 1 run 5.
fn skewed(site: &str) -> impl Fn(usize) -> String {
    let site = site.to_string();
    move |i| {
        let limit = if i == 2 { 6 } else { 5 };
        format!(
            "{}{}",
            policy(
                "p",
                &["ip"],
                "gcra",
                limit,
                "1h",
                &format!("site = \"{site}\"")
            ),
            route("api", &["p"], "closed")
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_with_other_numbers_refuses_and_the_route_fails_closed() {
    let up = echo_upstream().await;
    let fleet = peers::start_each(
        3,
        up,
        "heartbeat = \"100ms\"",
        skewed("owner"),
        "skew-owner",
    );
    fleet.settled().await;
    // A client whose key node 2 owns, asked through node 0.
    let ip = (0..=255)
        .map(|i| format!("198.51.100.{i}"))
        .find(|ip| fleet.owner_of(&format!("p:ip:{ip}")) == 2)
        .unwrap();
    let answer = get_as(fleet.nodes[0].addr, "/api", &ip, None).await;
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    let m = metrics_text(fleet.nodes[0].admin.unwrap()).await;
    assert_eq!(
        metric_sum(&m, "tollgate_peer_errors_total{kind=\"config\"}"),
        1.0
    );
    assert!(
        m.contains("tollgate_peers_live 3"),
        "node 2 is live, only refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_with_other_numbers_is_refused_and_counted() {
    let up = echo_upstream().await;
    let cluster = "heartbeat = \"100ms\"\ngossip_interval = \"10ms\"";
    let fleet = peers::start_each(3, up, cluster, skewed("gossip"), "skew-gossip");
    fleet.settled().await;
    let entry = fleet.nodes[0].addr;
    assert_eq!(
        get_as(entry, "/api", "192.0.2.8", None).await.status(),
        StatusCode::OK
    );
    let admin = fleet.nodes[0].admin.unwrap();
    eventually(
        "node 2 refused the push",
        Duration::from_secs(5),
        || async move {
            metric_sum(
                &metrics_text(admin).await,
                "tollgate_peer_errors_total{kind=\"config\"}",
            ) == 1.0
        },
    )
    .await;
}
