//! `response_cost_header` on the peer sites, three real gateway processes each: on `owner`
//! the spend a non-owner reserved at the key's owner is resized there when the head arrives
//! (the excess debited with the peer transport's `debit` op); on `gossip` the excess is
//! debited here and gossiped like any admitted cell, so the peers count it too.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::{policy, route};
use crate::common::peers;
use crate::common::*;
use http::{Request, Response};
use hyper::body::Incoming;

/// An upstream reporting the number at the end of the path as `x-tokens-used`.
async fn reporting_upstream() -> SocketAddr {
    upstream(|req: Request<Incoming>| async move {
        let n = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("0")
            .to_string();
        let mut resp = Response::new(body("ok"));
        resp.headers_mut()
            .insert("x-tokens-used", n.parse().unwrap());
        resp
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_takes_the_reported_cost() {
    let up = reporting_upstream().await;
    let extra = "site = \"owner\"\nresponse_cost_header = \"x-tokens-used\"";
    let limits = format!(
        "{}{}",
        policy("llm", &["ip"], "gcra", 100, "1h", extra),
        route("api", &["llm"], "closed")
    );
    let fleet = peers::start(3, up, "heartbeat = \"100ms\"", &limits, "owner-reported");
    fleet.settled().await;
    // A client whose key node 1 owns, sent to node 0: every spend is a reservation there.
    let ip = (0..=255)
        .map(|i| format!("203.0.113.{i}"))
        .find(|c| fleet.owner_of(&format!("llm:ip:{c}")) == 1)
        .unwrap();
    let a = fleet.nodes[0].addr;
    let call = |n: u32| {
        let ip = ip.clone();
        async move {
            get_as(a, &format!("/api/{n}"), &ip, None)
                .await
                .status()
                .as_u16()
        }
    };
    assert_eq!(call(30).await, 200);
    assert_eq!(call(80).await, 200, "70 left: the estimate (1) fits");
    fleet.quiet().await;
    // 100 − 30 − 80: ten below empty at the owner, so the next call waits.
    assert_eq!(call(1).await, 429);
    let debits = metric_sum(
        &metrics_text(fleet.nodes[0].admin.unwrap()).await,
        "tollgate_peer_calls_total{op=\"debit\"}",
    );
    assert_eq!(debits, 2.0, "one debit per resized spend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_peers_count_the_reported_cost() {
    let up = reporting_upstream().await;
    let extra = "site = \"gossip\"\nresponse_cost_header = \"x-tokens-used\"";
    let limits = format!(
        "{}{}",
        policy("llm", &["ip"], "gcra", 100, "1h", extra),
        route("api", &["llm"], "closed")
    );
    let cluster = "heartbeat = \"100ms\"\ngossip_interval = \"20ms\"";
    let fleet = peers::start(3, up, cluster, &limits, "gossip-reported");
    fleet.settled().await;
    let (a, b) = (fleet.nodes[0].addr, fleet.nodes[1].admin.unwrap());
    let resp = get_as(a, "/api/90", "203.0.113.9", None).await;
    assert_eq!(resp.status().as_u16(), 200);
    // B hears of all 90 cells (1 admitted, 89 debited), not of the estimate alone.
    let url = format!("http://{b}/limits/llm?ip=203.0.113.9");
    eventually(
        "the peer counts the reported cost",
        Duration::from_secs(5),
        || {
            let url = url.clone();
            async move {
                let resp = send_h1(
                    b,
                    Request::get(url)
                        .body(http_body_util::Empty::<bytes::Bytes>::new())
                        .unwrap(),
                )
                .await;
                json(resp).await["remaining"].as_u64() == Some(10)
            }
        },
    )
    .await;
}
