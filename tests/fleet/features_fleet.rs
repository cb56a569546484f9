//! Issue 16's request-side features on the peer sites, three real gateway processes each:
//! tiers (a variant policy `NAME@TIER` the owner must know too), `count = { statuses }`
//! (the give-back reaches the owner), `cost_header` (the price travels with the ask) and a
//! `query:` key part. On `owner` every request enters at a node that does not own its key,
//! so each decision is a peer call; on `gossip` a second node must come to deny what the
//! first spent. (`response_cost_header` on these sites: `spend_fleet.rs`; split: `spend.rs`
//! and `tiers.rs`.)

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::peers::{self, PeerFleet};
use crate::common::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;

/// An upstream answering `/login/NNN` with status NNN, anything else 200.
async fn status_upstream() -> SocketAddr {
    upstream(|req: Request<Incoming>| async move {
        let code = req
            .uri()
            .path()
            .strip_prefix("/login/")
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(200);
        let mut resp = Response::new(body("ok"));
        *resp.status_mut() = StatusCode::from_u16(code).unwrap();
        resp
    })
    .await
}

/// The four policies, each on its own route, all on `site`.
fn limits(site: &str) -> String {
    format!(
        "[account]\nheader = \"x-api-key\"\n\
         [policies.login]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 3\nperiod = \"1h\"\n\
         site = \"{site}\"\ncount = {{ statuses = [401, 403] }}\n\
         [policies.tokens]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1h\"\n\
         site = \"{site}\"\ncost_header = \"x-cost\"\nmax_cost = 8\n\
         [policies.plan]\nkey = [\"account\"]\nalgorithm = \"token_bucket\"\nlimit = 2\nperiod = \"1h\"\n\
         site = \"{site}\"\ntier_header = \"x-plan\"\ntiers = {{ pro = {{ limit = 5 }} }}\n\
         [policies.per_user]\nkey = [\"query:user\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\n\
         site = \"{site}\"\n\
         {}{}{}{}",
        crate::common::config::route("login", &["login"], "closed"),
        crate::common::config::route("llm", &["tokens"], "closed"),
        crate::common::config::route("plan", &["plan"], "closed"),
        crate::common::config::route("user", &["per_user"], "closed"),
    )
}

/// One request for `path` from 192.0.2.1, with these headers.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req =
        Request::get(format!("http://{addr}{path}")).header("x-forwarded-for", "192.0.2.1");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp: Response<Incoming> = send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await;
    resp.status().as_u16()
}

/// The admin API's view of one key at node `i`: its key string and what is left.
async fn view(fleet: &PeerFleet, i: usize, policy: &str, query: &str) -> (String, u64) {
    let admin = fleet.nodes[i].admin.unwrap();
    let url = format!("http://{admin}/limits/{policy}?{query}");
    let resp = send_h1(
        admin,
        Request::get(url).body(Empty::<Bytes>::new()).unwrap(),
    )
    .await;
    let v = json(resp).await;
    let key = v["key"].as_str().unwrap_or_else(|| panic!("{v}"));
    (key.to_string(), v["remaining"].as_u64().unwrap())
}

/// A node that does not own the key the admin API names for `policy` and `query`.
/// The owner asks node `at` has made so far.
async fn asks_of(fleet: &PeerFleet, at: SocketAddr) -> f64 {
    let node = fleet
        .nodes
        .iter()
        .find(|n| n.addr == at)
        .expect("a node of the fleet");
    let text = metrics_text(node.admin.expect("admin listener")).await;
    metric_sum(&text, "tollgate_peer_calls_total{op=\"ask\"}")
}

/// `send` from a node that does not own the key: it must ask the owner (the first request
/// of a key: no denial of it is remembered yet to answer from).
async fn send_asking(fleet: &PeerFleet, at: SocketAddr, path: &str, h: &[(&str, &str)]) -> u16 {
    let before = asks_of(fleet, at).await;
    let code = send(at, path, h).await;
    assert!(
        asks_of(fleet, at).await > before,
        "{path}: decided without asking the owner"
    );
    code
}

async fn not_the_owner(fleet: &PeerFleet, policy: &str, query: &str) -> SocketAddr {
    let (key, _) = view(fleet, 0, policy, query).await;
    fleet.nodes[(fleet.owner_of(&key) + 1) % 3].addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_decides_tiers_counts_prices_and_key_parts() {
    let up = status_upstream().await;
    let fleet = peers::start(
        3,
        up,
        "heartbeat = \"100ms\"",
        &limits("owner"),
        "feat-owner",
    );
    fleet.settled().await;

    // count: good logins give their cell back at the owner; the fourth failure is denied.
    let at = not_the_owner(&fleet, "login", "ip=192.0.2.1").await;
    for _ in 0..4 {
        assert_eq!(send_asking(&fleet, at, "/login/200", &[]).await, 200);
        fleet.quiet().await;
    }
    assert_eq!(view(&fleet, 0, "login", "ip=192.0.2.1").await.1, 3);
    for s in [401, 403, 401] {
        assert_eq!(send(at, &format!("/login/{s}"), &[]).await, s);
    }
    assert_eq!(send(at, "/login/401", &[]).await, 429);

    // cost_header: the owner spends the request's price.
    let at = not_the_owner(&fleet, "tokens", "account=acct-1").await;
    let priced = |c: &'static str| async move {
        send(at, "/llm", &[("x-api-key", "acct-1"), ("x-cost", c)]).await
    };
    let h = [("x-api-key", "acct-1"), ("x-cost", "6")];
    assert_eq!(send_asking(&fleet, at, "/llm", &h).await, 200);
    assert_eq!(priced("5").await, 429);
    assert_eq!(priced("4").await, 200, "a cheaper call still fits");
    assert_eq!(view(&fleet, 2, "tokens", "account=acct-1").await.1, 0);

    // tiers: the variant `plan@pro` is decided by its owner with the tier's numbers.
    let pro = "account=carol&header.x-plan=pro";
    let (key, _) = view(&fleet, 0, "plan", pro).await;
    assert!(key.starts_with("plan@pro:"), "{key}");
    let at = not_the_owner(&fleet, "plan", pro).await;
    let h = [("x-api-key", "carol"), ("x-plan", "pro")];
    let mut ok = usize::from(send_asking(&fleet, at, "/plan", &h).await == 200);
    for _ in 1..7 {
        ok += usize::from(send(at, "/plan", &h).await == 200);
    }
    assert_eq!(ok, 5, "the pro tier's limit");
    let at = not_the_owner(&fleet, "plan", "account=dave").await;
    let h = [("x-api-key", "dave")];
    let mut ok = usize::from(send_asking(&fleet, at, "/plan", &h).await == 200);
    for _ in 1..4 {
        ok += usize::from(send(at, "/plan", &h).await == 200);
    }
    assert_eq!(ok, 2, "no tier: the policy's own limit");

    // query:user: one budget per user, whichever node a request enters.
    let at = not_the_owner(&fleet, "per_user", "query.user=ann").await;
    let codes = [
        send_asking(&fleet, at, "/user?user=ann", &[]).await,
        send(at, "/user?user=ann", &[]).await,
        send(at, "/user?user=ann", &[]).await,
    ];
    assert_eq!(codes, [200, 200, 429]);
    // (Each key's first request above asked its owner, `send_asking`. A count of all
    // asks is no check: the admin views ask too, or not, as the ring happens to place
    // their keys on node 0 or not, and a remembered denial answers without asking.)
}

/// Wait until node `i` sees `left` of the key (the peers' gossip has arrived).
async fn heard(fleet: &PeerFleet, i: usize, policy: &str, query: &str, left: u64) {
    eventually(
        &format!("node {i} hears {policy} down to {left}"),
        Duration::from_secs(5),
        || async { view(fleet, i, policy, query).await.1 == left },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_carries_tiers_counts_prices_and_key_parts() {
    let up = status_upstream().await;
    let cluster = "heartbeat = \"100ms\"\ngossip_interval = \"20ms\"";
    let fleet = peers::start(3, up, cluster, &limits("gossip"), "feat-gossip");
    fleet.settled().await;
    let (a, b) = (fleet.nodes[0].addr, fleet.nodes[1].addr);

    // count: failures spent at A are heard at B, which then denies.
    for s in [401, 403, 401] {
        assert_eq!(send(a, &format!("/login/{s}"), &[]).await, s);
    }
    heard(&fleet, 1, "login", "ip=192.0.2.1", 0).await;
    assert_eq!(send(b, "/login/401", &[]).await, 429);

    // cost_header: A's price-6 spend is six cells at B.
    let h = |c: &'static str| [("x-api-key", "acct-1"), ("x-cost", c)];
    assert_eq!(send(a, "/llm", &h("6")).await, 200);
    heard(&fleet, 1, "tokens", "account=acct-1", 4).await;
    assert_eq!(send(b, "/llm", &h("5")).await, 429);
    assert_eq!(send(b, "/llm", &h("4")).await, 200);

    // tiers: the pro variant's spends are gossiped under the variant.
    let pro = [("x-api-key", "carol"), ("x-plan", "pro")];
    for _ in 0..5 {
        assert_eq!(send(a, "/plan", &pro).await, 200);
    }
    heard(&fleet, 1, "plan", "account=carol&header.x-plan=pro", 0).await;
    assert_eq!(send(b, "/plan", &pro).await, 429);
    assert_eq!(
        send(b, "/plan", &[("x-api-key", "carol")]).await,
        200,
        "without the tier header carol has the policy's own, untouched budget"
    );

    // query:user.
    for _ in 0..2 {
        assert_eq!(send(a, "/user?user=ann", &[]).await, 200);
    }
    heard(&fleet, 1, "per_user", "query.user=ann", 0).await;
    assert_eq!(send(b, "/user?user=ann", &[]).await, 429);
    assert_eq!(send(b, "/user?user=bo", &[]).await, 200);
}
