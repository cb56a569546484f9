//! `[store] fallback_repay` over a real Redis behind a fault proxy: a store outage during
//! which the `local` fallback admits far more than the burst, then the store's return.
//! Paid at once (the default) the debt refuses the key for about debt / rate; paid in
//! installments at half the key's rate (`half_rate`) the key is admitted again at once, at
//! about half its rate, and the store still counts the same spends over the window.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::fleet;
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::redis::RedisServer;
use crate::common::*;
use http::StatusCode;

const CLIENT: &str = "198.51.100.7";
/// Another client: its key owes nothing, so its answer on the fail-closed route says
/// whether the store decides.
const PROBE: &str = "198.51.100.8";
/// The key: gcra, 20 a second, burst 10; one node, so the fallback's share is all of it.
const RATE: f64 = 20.0;
const BURST: f64 = 10.0;
/// What the fallback admits before the store comes back: far more than the burst.
const OWED: usize = 50;
/// How long the client is watched after the store's return: about the half_rate repayment
/// of [`OWED`] (2 · 50 / 20 s).
const WINDOW: Duration = Duration::from_secs(5);

/// What one run saw after the store came back.
struct Run {
    /// Admitted on the fallback during the outage (the debt).
    owed: usize,
    /// Admitted in each second after the store answered.
    per_second: Vec<usize>,
    /// Admitted over the whole window, and its length as the client measured it.
    window: usize,
    window_len: Duration,
    /// The debt gauge read 0 within a second of the store's return.
    paid_at_once: bool,
    /// Keys owed over the fleet just after the store answered (before any client request).
    owed_keys_back: f64,
    /// From the store's return until nothing was owed.
    drained_after: Duration,
}

async fn status(addr: SocketAddr, path: &str, ip: &str) -> StatusCode {
    tokio::time::timeout(Duration::from_secs(5), get_as(addr, path, ip, None))
        .await
        .expect("a request hung")
        .status()
}

/// Keys owed, over the fleet.
async fn debt_keys(admins: &[SocketAddr]) -> f64 {
    let mut owed = 0.0;
    for &admin in admins {
        owed += metric_sum(&metrics_text(admin).await, "tollgate_store_debt_keys");
    }
    owed
}

/// `nodes` gateways on one Redis behind a fault proxy; the client's requests go round
/// robin over them (each falls back to its share of 1/`nodes` during the outage), for
/// [`WINDOW`] after the store's return when `client_after`, else not at all.
async fn outage_then_return(repay: Option<&str>, nodes: usize, client_after: bool) -> Run {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let repay = repay.map_or(String::new(), |r| format!("fallback_repay = \"{r}\"\n"));
    let up = echo_upstream().await;
    let cfg = |id: usize| {
        fleet(
            up,
            &format!("expected_nodes = {nodes}\nnode_id = \"n{id}\"\nheartbeat = \"100ms\""),
        )
        .patient_redis(&proxy.url(), "100ms")
        .text(&repay)
        .policy(
            "shared",
            &["ip"],
            "gcra",
            RATE as u32,
            "1s",
            &format!("burst = {BURST}\nsite = \"central\""),
        )
        .route("local", &["shared"], "local")
        .route("closed", &["shared"], "closed")
        .build()
    };
    let mut gws = Vec::new();
    for id in 0..nodes {
        gws.push(Gateway::start(&cfg(id)).await);
    }
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addrs.listen).collect();
    let admins: Vec<SocketAddr> = gws.iter().map(|g| g.addrs.admin_listen.unwrap()).collect();
    let members = format!("tollgate_cluster_nodes {nodes}");
    for &admin in &admins {
        let members = &members;
        eventually("every member", Duration::from_secs(5), || async move {
            metrics_text(admin).await.contains(members.as_str())
        })
        .await;
    }
    let addrs = &addrs;
    let decides = || async move {
        for &addr in addrs {
            if status(addr, "/closed", PROBE).await != StatusCode::OK {
                return false;
            }
        }
        true
    };
    eventually("the store decides", Duration::from_secs(5), decides).await;
    let mut next = 0;
    let mut addr = || {
        next += 1;
        addrs[next % addrs.len()]
    };

    // The outage: the fallback admits at the key's full rate until it has admitted OWED.
    proxy.set(Fault::Refuse);
    let began = Instant::now();
    let mut owed = 0;
    while owed < OWED {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the fallback admitted only {owed}"
        );
        if status(addr(), "/local", CLIENT).await == StatusCode::OK {
            owed += 1;
        }
    }
    assert_eq!(
        debt_keys(&admins).await,
        nodes as f64,
        "each node owes its fallback's spends"
    );

    proxy.set(Fault::Pass);
    eventually("the store decides again", Duration::from_secs(10), decides).await;
    let back = Instant::now();
    let owed_keys_back = debt_keys(&admins).await;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut per_second, mut window, mut paid_at_once) = (vec![0; 5], 0, false);
    while client_after && back.elapsed() < WINDOW {
        tick.tick().await;
        let sent = back.elapsed();
        match status(addr(), "/local", CLIENT).await {
            StatusCode::OK => {
                window += 1;
                per_second[(sent.as_secs() as usize).min(4)] += 1;
            }
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
        if !paid_at_once && back.elapsed() < Duration::from_secs(1) {
            paid_at_once = debt_keys(&admins).await == 0.0;
        }
    }
    let window_len = back.elapsed();
    // Nothing left owed in the end, with no traffic to pay it.
    let admins = &admins;
    eventually("the debt is paid", Duration::from_secs(15), || async move {
        debt_keys(admins).await == 0.0
    })
    .await;
    let drained_after = back.elapsed();
    Run {
        owed,
        per_second,
        window,
        window_len,
        paid_at_once,
        owed_keys_back,
        drained_after,
    }
}

/// `half_rate`: the key is admitted again in the first second of the store's return
/// (at_once refuses it for (50 − 10) / 20 = 2 s) and at about half its rate every second
/// of the repayment, and over the window w the store admits at most what the docs' bound
/// allows: burst + rate · w minus what was repaid meanwhile, min(debt, ⌊rate/2 · w⌋),
/// give or take two cells a node (whole cells, one installment in flight) and one at the
/// window's edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_rate_admits_half_the_rate_after_an_outage_instead_of_nothing() {
    half_rate_after_an_outage(1).await;
}

/// The same with two gateways, each owing what it admitted on its half share: each repays
/// a quarter of the rate, so the fleet's installments together leave half of it to the
/// clients (at half the rate each, the two took all of it: nothing for two seconds after the burst).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_rate_shares_the_installments_across_the_fleet() {
    half_rate_after_an_outage(2).await;
}

async fn half_rate_after_an_outage(nodes: usize) {
    let run = outage_then_return(Some("half_rate"), nodes, true).await;
    // About half the rate (10 a second) all along the repayment, the burst on top in the
    // first second: never nothing.
    assert!(
        run.per_second[..4].iter().all(|&n| n >= 5),
        "half_rate: admitted {:?} in the seconds after the store's return (10 a second expected)",
        run.per_second
    );
    assert!(!run.paid_at_once, "half_rate: the debt was paid at once");
    let w = run.window_len.as_secs_f64();
    // Each node pays whole cells (a fraction short) and may have one installment in flight.
    let repaid = (run.owed as f64).min((RATE / 2.0 * w).floor() - 2.0 * nodes as f64);
    // And one cell at the window's edge.
    let bound = BURST + RATE * w - repaid + 1.0;
    assert!(
        (run.window as f64) <= bound,
        "half_rate: admitted {} over {w:.2} s after owing {}: more than the bound {bound:.1}",
        run.window,
        run.owed
    );
    // The same total as at_once over the window (burst + rate · w − debt), within a
    // loaded machine's margin.
    let total = BURST + RATE * w - run.owed as f64;
    assert!(
        run.window as f64 >= 0.8 * total,
        "half_rate: admitted only {} over {w:.2} s ({total:.0} expected)",
        run.window
    );
}

/// The default, `at_once`: as before, the whole debt is paid when the store is back and
/// the key is refused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_once_still_refuses_the_key_until_its_debt_has_drained() {
    let run = outage_then_return(None, 1, true).await;
    // Refused for (50 − 10) / 20 = 2 s from the payment (a heartbeat may have made it a
    // little before the probe saw the store), then the full rate.
    assert!(
        run.per_second[0] + run.per_second[1] <= 3,
        "at_once: admitted {:?} in the seconds after the store's return (nothing for 2 s expected)",
        run.per_second
    );
    assert!(run.paid_at_once, "at_once: the debt was not paid at once");
    let w = run.window_len.as_secs_f64();
    // The heartbeat may have paid the debt up to a beat before the probe saw the store.
    let bound = BURST + RATE * (w + 0.25) - run.owed as f64 + 2.0;
    assert!(
        (run.window as f64) <= bound,
        "at_once: admitted {} over {w:.2} s after owing {}: more than {bound:.1}",
        run.window,
        run.owed
    );
    let total = BURST + RATE * w - run.owed as f64;
    assert!(
        run.window as f64 >= 0.8 * total,
        "at_once: admitted only {} over {w:.2} s ({total:.0} expected)",
        run.window
    );
}

/// With no traffic after the outage, the heartbeat pays the installments in the
/// background: the debt drains, and no faster than half the rate (50 cells at 10 a second:
/// 5 s; a beat may have begun it just before the probe saw the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_rate_debts_drain_in_the_background_at_half_the_rate() {
    let run = outage_then_return(Some("half_rate"), 1, false).await;
    assert_eq!(run.owed_keys_back, 1.0, "the debt was paid at once");
    assert!(
        run.drained_after >= Duration::from_secs(4),
        "50 cells drained in {:?}: faster than half the rate",
        run.drained_after
    );
}

/// `/config` shows the setting, and like every `[store]` key it is read once at start: a
/// reload that changes it is refused by name and the running value stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_shows_fallback_repay_and_a_reload_cannot_change_it() {
    use crate::common::reload::{admin, file, reload, route, serve};
    use http::Method;
    let up = echo_upstream().await;
    let store = "[store]\nkind = \"memory\"\nfallback_repay = \"half_rate\"\n";
    let toml = file(up, &format!("{store}{}", route("a", "/a", &[])));
    let s = serve(&toml, &tollgate::limit::clock::ManualClock::new()).await;
    let shown = |v: serde_json::Value| v["store"]["fallback_repay"].clone();
    let (status, v) = admin(s.admin, Method::GET, "/config").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown(v), "half_rate");
    let (status, v) = reload(&s, &toml.replace("half_rate", "at_once")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("[store] fallback_repay"), "{e}");
    assert_eq!(
        shown(admin(s.admin, Method::GET, "/config").await.1),
        "half_rate"
    );
    // Left out, it is the default.
    let (_, v) = reload(&s, &toml.replace("fallback_repay = \"half_rate\"\n", "")).await;
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("[store] fallback_repay"),
        "{v}"
    );
}
