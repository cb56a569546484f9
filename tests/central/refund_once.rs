//! A refund gives back once, however often it runs. A call can run twice (a Redis Cluster
//! client sends it again after a dropped connection that came after the script ran), and a
//! refund run twice would give back twice: an
//! over-admission. Each refund names a marker key; `check.lua` refunds only if it can
//! create it. Real Redis: the script's calls as the gateway sends them, run twice, and the
//! gateway's own refund behind a proxy that drops its reply (which this store never sends
//! again: only a cluster client does).

use crate::common::words::Words;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::config::one_policy;
use crate::common::drop_reply::drop_next_reply_proxy;
use crate::common::redis::RedisServer;
use prometheus_client::registry::Registry;
use redis::aio::MultiplexedConnection;
use tollgate::config::Mode;
use tollgate::limit::Limiter;
use tollgate::limit::central::{CHECK_LUA, CentralItem};
use tollgate::limit::clock::SystemClock;

const GCRA: u32 = 1;
const CONCURRENCY: u32 = 5;

/// The script, hashed once for every call of the file.
static SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(CHECK_LUA));

/// How long the tests' markers live (ms).
const MARKER_MS: u64 = 16_000;

/// The gateway tests' central policy: 10 per hour.
const GCRA_10_PER_HOUR: &str =
    "algorithm = \"gcra\"\nlimit = 10\nperiod = \"1h\"\nburst = 10\nsite = \"central\"";

/// check.lua's 8 values for one key: 10 per hour, burst 10, leaky-bucket delay up to an
/// hour, enforcing; `slot` names a concurrency acquisition.
fn values(alg: u32, cost: u32, slot: &str) -> Vec<String> {
    let hour = 3_600_000_000u64.to_string();
    let hold = if alg == CONCURRENCY { "0" } else { &hour };
    let values = [
        &alg.to_string(),
        "10",
        hold,
        "10",
        &cost.to_string(),
        &hour,
        "1",
        slot,
    ];
    values.iter().map(|v| v.to_string()).collect()
}

/// One key's `check` (cost 0: a look that spends nothing): its remaining.
async fn check(conn: &mut MultiplexedConnection, key: &str, alg: u32, cost: u32) -> i64 {
    let Words(reply) = SCRIPT
        .key(key)
        .arg("check")
        .arg(values(alg, cost, "-"))
        .invoke_async(conn)
        .await
        .expect("check runs");
    assert_eq!(reply[0], 1, "admitted: {reply:?}");
    reply[2]
}

/// One key's refund of `cost`, as the gateway sends it (`central/refund.rs`): the key, then
/// the marker; the marker's life, then the key's values.
async fn refund(conn: &mut MultiplexedConnection, key: &str, marker: &str, alg: u32, cost: u32) {
    let _: Vec<i64> = SCRIPT
        .key(key)
        .key(marker)
        .arg("refund")
        .arg(MARKER_MS)
        .arg(values(alg, cost, "s"))
        .invoke_async(conn)
        .await
        .expect("refund runs");
}

/// The same refund call run twice (what a resend does) gives back once, for every
/// algorithm that keeps a count; another refund, with its own marker, gives back again.
#[tokio::test]
async fn a_refund_run_twice_gives_back_once() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    for alg in GCRA..CONCURRENCY {
        let key = format!("tg:p{alg}:ip:1");
        for _ in 0..3 {
            check(&mut conn, &key, alg, 1).await;
        }
        let spent = check(&mut conn, &key, alg, 0).await;
        let marker = format!("tg:~refund:{alg}.1");
        refund(&mut conn, &key, &marker, alg, 1).await;
        refund(&mut conn, &key, &marker, alg, 1).await;
        assert_eq!(
            check(&mut conn, &key, alg, 0).await,
            spent + 1,
            "algorithm {alg}: one cell given back"
        );
        let pttl: u64 = redis.cli(&["PTTL", &marker]).parse().expect("a marker");
        assert!((1..=MARKER_MS).contains(&pttl), "the marker's life: {pttl}");
        refund(&mut conn, &key, &format!("tg:~refund:{alg}.2"), alg, 1).await;
        assert_eq!(
            check(&mut conn, &key, alg, 0).await,
            spent + 2,
            "algorithm {alg}: another refund gives back another cell"
        );
    }
}

/// A release needs no marker: it removes the members its slot id names, so run twice it
/// takes nothing more, and never another acquisition's slots. It gives back nothing on a
/// key of another algorithm, which only a refund, with its marker, may.
#[tokio::test]
async fn a_release_run_twice_releases_once() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let gcra = "tg:g:ip:1";
    check(&mut conn, gcra, GCRA, 1).await;
    let spent = check(&mut conn, gcra, GCRA, 0).await;
    let mut release = SCRIPT.key(gcra);
    release.arg("release").arg(values(GCRA, 1, "-"));
    let _: Vec<i64> = release.invoke_async(&mut conn).await.unwrap();
    assert_eq!(check(&mut conn, gcra, GCRA, 0).await, spent, "not a refund");
    let key = "tg:c:ip:1:slots";
    let call = |op: &str, slot: &str, cost: u32| {
        let mut inv = SCRIPT.key(key);
        inv.arg(op).arg(values(CONCURRENCY, cost, slot));
        inv
    };
    for (slot, cost) in [("a", 2), ("b", 1)] {
        let Words(r) = call("check", slot, cost)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(r[1], 1, "{slot} held: {r:?}");
    }
    for _ in 0..2 {
        let _: Vec<i64> = call("release", "a", 2)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            redis.cli(&["ZRANGE", key, "0", "-1"]),
            "b#1",
            "b's slot stays"
        );
    }
}

/// A refund without its marker is refused, not read with its values one place off.
#[tokio::test]
async fn a_refund_without_a_marker_is_refused() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let reply: redis::RedisResult<Vec<i64>> = SCRIPT
        .key("tg:p:ip:1")
        .arg("refund")
        .arg(values(GCRA, 1, "-"))
        .invoke_async(&mut conn)
        .await;
    let err = reply.expect_err("no marker");
    assert!(err.to_string().contains("marker"), "{err}");
}

/// The gateway's own refund: its reply is lost with its connection after Redis ran it. The
/// store does not send it again (a resend could reach Redis after the marker expired, late
/// in the network or behind a paused Redis, and give back twice): it ran once, and the key
/// is given back one cell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_whose_reply_is_lost_gives_back_once() {
    let redis = RedisServer::start();
    let armed = Arc::new(AtomicBool::new(false));
    let cfg = one_policy(
        drop_next_reply_proxy(redis.addr(), armed.clone()).await,
        "2s",
        GCRA_10_PER_HOUR,
    );
    let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("a limiter");
    let site = limiter.central().expect("a central site").clone();
    let key = site.key("per_ip:ip:192.0.2.1");
    let item = |cost| CentralItem::new(key.clone(), &cfg.policies[0], 1, cost, Mode::Enforce);
    for _ in 0..3 {
        let r = site.check(&[item(1)]).await.expect("decided");
        assert!(r[0].committed, "{r:?}");
    }
    let spent = site.peek(&item(0)).await.expect("a look").remaining;
    let before = redis.scripts_run();
    armed.store(true, Ordering::SeqCst);
    site.refund(&[item(1)]).await;
    assert!(
        !armed.load(Ordering::SeqCst),
        "the refund's reply was dropped"
    );
    assert_eq!(
        redis.scripts_run() - before,
        1,
        "the refund was not sent again"
    );
    let now = site.peek(&item(0)).await.expect("a look").remaining;
    assert_eq!(now, spent + 1, "one cell given back");
}

/// An admin reset is not sent again either: run late, a second `DEL` would erase what was
/// spent after the first. Its reply is lost; it ran once, and the spends after it stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_whose_reply_is_lost_runs_once() {
    let redis = RedisServer::start();
    let armed = Arc::new(AtomicBool::new(false));
    let cfg = one_policy(
        drop_next_reply_proxy(redis.addr(), armed.clone()).await,
        "2s",
        GCRA_10_PER_HOUR,
    );
    let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("a limiter");
    let site = limiter.central().expect("a central site").clone();
    let key = site.key("per_ip:ip:192.0.2.1");
    let item = |cost| CentralItem::new(key.clone(), &cfg.policies[0], 1, cost, Mode::Enforce);
    assert!(site.check(&[item(1)]).await.expect("decided")[0].committed);
    let before = redis.scripts_run();
    armed.store(true, Ordering::SeqCst);
    let _ = site.reset(&item(0)).await;
    assert!(
        !armed.load(Ordering::SeqCst),
        "the reset's reply was dropped"
    );
    assert_eq!(
        redis.scripts_run() - before,
        1,
        "the reset was not sent again"
    );
    assert!(site.check(&[item(1)]).await.expect("decided")[0].committed);
    assert_eq!(site.peek(&item(0)).await.expect("a look").remaining, 9);
}
