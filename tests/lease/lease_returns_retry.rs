//! A lease call that gives cells back and meets a dropped connection after `lease.lua` ran
//! is sent again by the store (`store/mod.rs`: a call that may repeat); the cells must be
//! taken back once, or the key moves back for cells that were spent. (Found by review: it
//! took them twice.)

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::config::one_policy;
use crate::common::drop_reply::drop_next_reply_proxy;
use crate::common::redis::RedisServer;
use prometheus_client::registry::Registry;
use tollgate::limit::Limiter;
use tollgate::limit::clock::SystemClock;
use tollgate::limit::lease::{LEASE_LUA, LeaseParams, RefillAsk, Returned, script_args};

const MS: u64 = 1_000_000;

/// 100/s, burst 20, lease_ttl 1 s: 12 cells may be taken back per window of 2 s.
fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(100),
        Duration::from_secs(1),
        nz(20),
        Duration::from_secs(1),
        Duration::from_millis(250),
        nz(500),
    )
    .expect("valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_lease_call_takes_its_returns_once() {
    let redis = RedisServer::start();
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = drop_next_reply_proxy(redis.addr(), armed.clone()).await;
    let policy = "algorithm = \"gcra\"\nlimit = 10\nperiod = \"1m\"\nburst = 10";
    let cfg = one_policy(proxy, "2s", policy);
    let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("a limiter");
    let store = limiter.store().expect("a redis store").clone();
    let script = redis::Script::new(LEASE_LUA);
    let keys = ["k", "~busy:k", "~hold:k", "~ret:k"].map(String::from);
    let p = params();
    let lease = async |want: u32, returned: Returned| {
        let ask = RefillAsk {
            want,
            lead: 2_000 * MS,
            returned,
            ..RefillAsk::default()
        };
        // A grant rate at the limit (a full span's cells, counted at a time to come, so
        // it does not decay), so grants may be returnable.
        redis.cli(&["SET", "~busy:k", "400:9000000000000000"]);
        store
            .eval_script(&script, "lease", &keys, &script_args(&p, ask))
            .await
    };
    lease(20, Returned::NONE).await.expect("a first grant");
    let r2 = lease(1, Returned::NONE).await.expect("the run begins");
    assert_eq!(r2[5], 1, "{r2:?}");
    let r3 = lease(30, Returned::NONE).await.expect("returnable cells");
    let back = Returned {
        cells: 5,
        granted_at: u64::try_from(r3[2]).expect("after 1970") * 1_000,
        id: 77,
    };
    armed.store(true, Ordering::SeqCst);
    let r4 = lease(1, back).await;
    assert!(r4.is_ok(), "sent again after the reconnect: {r4:?}");
    assert!(!armed.load(Ordering::SeqCst), "the reply was dropped");
    let run = redis.cli(&["GET", "~ret:k"]);
    let returns = run.trim().split('|').nth(2).expect("the returns taken");
    let taken: u32 = returns
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.split(':')
                .nth(1)
                .and_then(|n| n.parse::<u32>().ok())
                .expect("at:n")
        })
        .sum();
    assert_eq!(
        taken,
        5,
        "five cells given back once; the run: {}",
        run.trim()
    );
}
