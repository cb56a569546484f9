//! check.lua at its edges, against a real Redis: a one-key request whose state lives longer
//! than 10^17 ms is written as the general path writes it; a concurrency check run twice (the
//! store sends a check again after a dropped connection) is not denied by its own slot; a
//! refund's marker lives at most ten minutes whatever the store timeout; a sliding window
//! admits exactly at every instant. (Each test failed before its fix.) And which checks
//! `Limiter::check_now` decides at once and which it hands back to await.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::config::one_policy;
use crate::common::drop_reply::drop_next_reply_proxy;
use crate::common::redis::RedisServer;
use crate::common::words::Words;
use prometheus_client::registry::Registry;
use tollgate::config::Mode;
use tollgate::limit::central::{CHECK_LUA, CentralItem};
use tollgate::limit::clock::SystemClock;
use tollgate::limit::{At, Checked, Limiter};

/// 3650 days in µs (the longest period the validation accepts).
const PERIOD_US: &str = "315360000000000";

/// A GCRA key of 1 per 3650 days, burst 1 000 000, spending `cost`.
fn gcra(cost: &str) -> Vec<&str> {
    vec!["1", "1", PERIOD_US, "1000000", cost, "0", "1", "-"]
}

/// A valid policy reaches a TTL of 10^18 ms and more (the validation only asks cost <=
/// burst): alone (check.lua's top path) or beside another key (the general path), the key
/// is decided and written the same way, with a TTL Redis accepts.
#[tokio::test]
async fn a_state_of_ten_to_the_seventeen_ms_is_written_on_every_path() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let script = redis::Script::new(CHECK_LUA);
    for cost in ["1000000", "500000"] {
        let alone: redis::RedisResult<Words> = script
            .key(format!("tg:p:ip:1:{cost}"))
            .arg("check")
            .arg(gcra(cost))
            .invoke_async(&mut conn)
            .await;
        let mut args = vec!["check"];
        args.extend(gcra(cost));
        args.extend(["1", "10", "1000000", "10", "1", "0", "1", "-"]);
        let together: redis::RedisResult<Words> = script
            .key(format!("tg:p:ip:2:{cost}"))
            .key(format!("tg:q:ip:2:{cost}"))
            .arg(args)
            .invoke_async(&mut conn)
            .await;
        let (Words(alone), Words(together)) = (alone.expect("alone"), together.expect("together"));
        assert_eq!(alone[..3], together[..3], "cost {cost}");
        assert_eq!(alone[0], 1, "cost {cost}: admitted");
        for key in [format!("tg:p:ip:1:{cost}"), format!("tg:p:ip:2:{cost}")] {
            let pttl: i64 = redis.cli(&["PTTL", &key]).parse().expect("a TTL");
            // 10^17 ms and more, cut to check.lua's longest: 2^46 ms, 2 230 years.
            assert!(pttl > 70_000_000_000_000, "{key}: PTTL {pttl}");
        }
    }
}

/// Limit 1: the first run takes the slot and its reply is lost; the store sends the check
/// again, which must count that slot as its own (else the request is denied and the slot
/// stays held for five minutes with nothing to release it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_check_sent_again_is_not_denied_by_its_own_slot() {
    let redis = RedisServer::start();
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = drop_next_reply_proxy(redis.addr(), armed.clone()).await;
    let cfg = one_policy(
        proxy,
        "2s",
        "algorithm = \"concurrency\"\nlimit = 1\nsite = \"central\"",
    );
    let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("a limiter");
    let site = limiter.central().expect("a central site").clone();
    let key = site.key("per_ip:ip:192.0.2.1");
    let item = || CentralItem::new(key.clone(), &cfg.policies[0], 1, 1, Mode::Enforce);
    // Load the script through the proxy first (one plain call, its slot released).
    let warm = item();
    assert!(
        site.check(std::slice::from_ref(&warm))
            .await
            .expect("decided")[0]
            .committed
    );
    site.release(&[warm]).await;
    let before = redis.scripts_run();
    armed.store(true, Ordering::SeqCst);
    let mine = item();
    let r = site
        .check(std::slice::from_ref(&mine))
        .await
        .expect("decided");
    assert!(
        !armed.load(Ordering::SeqCst),
        "the check's reply was dropped"
    );
    assert_eq!(redis.scripts_run() - before, 2, "the check ran twice");
    assert!(
        r[0].admitted && r[0].committed,
        "denied by its own slot: {r:?}"
    );
    assert_eq!(redis.cli(&["ZCARD", &mine.key]), "1", "one slot held");
    site.release(std::slice::from_ref(&mine)).await;
    assert_eq!(redis.cli(&["ZCARD", &mine.key]), "0", "and released");
}

/// `[store] timeout` may be long (the validation takes up to a year); a marker lives at
/// most ten minutes, so markers (one per refund) cannot pile up for days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_markers_life_is_bounded_whatever_the_store_timeout() {
    let redis = RedisServer::start();
    let policy =
        "algorithm = \"gcra\"\nlimit = 10\nperiod = \"1h\"\nburst = 10\nsite = \"central\"";
    let cfg = one_policy(redis.addr(), "365d", policy);
    let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("a limiter");
    let site = limiter.central().expect("a central site").clone();
    let item = CentralItem::new(
        site.key("per_ip:ip:1"),
        &cfg.policies[0],
        1,
        1,
        Mode::Enforce,
    );
    site.check(std::slice::from_ref(&item))
        .await
        .expect("decided");
    site.refund(std::slice::from_ref(&item)).await;
    let markers = redis.cli(&["KEYS", "*~refund:*"]);
    let marker = markers.lines().next().expect("a marker");
    let pttl: u64 = redis.cli(&["PTTL", marker]).parse().expect("a TTL");
    assert!(
        (1..=600_000).contains(&pttl),
        "marker {marker} lives {pttl} ms"
    );
}

/// A store whose Lua lacks the `struct` library gets the decisions as integer replies:
/// the same words as the packed string (the gateway reads both, `central/wire.rs`), on the
/// one-key path and on a batch. (The script with `struct` taken away, as such a store runs
/// it.)
#[tokio::test]
async fn without_lua_struct_a_decision_is_the_same_integers() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let plain = CHECK_LUA.replace("rawget(_G, 'struct')", "nil");
    assert_ne!(plain, CHECK_LUA, "check.lua finds `struct` with rawget");
    let mut got = Vec::new();
    for (source, prefix) in [(CHECK_LUA, "packed"), (plain.as_str(), "plain")] {
        let script = redis::Script::new(source);
        let one: redis::Value = script
            .key(format!("{prefix}:one"))
            .arg("check")
            .arg(gcra("1"))
            .invoke_async(&mut conn)
            .await
            .expect("check");
        let mut batch = vec!["batch", "2", "1", "1"];
        batch.extend(gcra("1"));
        batch.extend(gcra("3"));
        let two: redis::Value = script
            .key(format!("{prefix}:a"))
            .key(format!("{prefix}:b"))
            .arg(batch)
            .invoke_async(&mut conn)
            .await
            .expect("batch");
        let kind = |v: &redis::Value| matches!(v, redis::Value::BulkString(_));
        assert_eq!(
            (kind(&one), kind(&two)),
            (prefix == "packed", prefix == "packed")
        );
        let words = |v: redis::Value| {
            let Words(mut w) = redis::FromRedisValue::from_redis_value(v).expect("words");
            w.pop(); // now_us differs between the calls
            w
        };
        got.push((words(one), words(two)));
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(got[0].0.len(), 6);
    assert_eq!(got[0].1.len(), 12);
    assert_eq!(got[0].0[..3], [1, 1, 999_999], "admitted, spent, remaining");
}

/// A request's keys have no limit, and its reply is packed a thousand words at a time
/// (`unpack` stops at Lua's C stack, 8 000 values): 1 400 keys (8 401 words) in one call are
/// decided and read, each as the same key alone would be, and a second look sees them spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_of_fourteen_hundred_keys_is_packed_and_read() {
    let redis = RedisServer::start();
    let cfg = one_policy(
        redis.addr(),
        "5s",
        "algorithm = \"gcra\"\nlimit = 10\nperiod = \"1h\"\nsite = \"central\"",
    );
    let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("a limiter");
    let site = limiter.central().expect("a central site").clone();
    let items = |cost| -> Vec<CentralItem> {
        (0..1400)
            .map(|i| {
                let key = site.key(&format!("per_ip:ip:10.0.{}.{}", i / 256, i % 256));
                CentralItem::new(key, &cfg.policies[0], 1, cost, Mode::Enforce)
            })
            .collect()
    };
    let spent = site.check(&items(3)).await.expect("1 400 keys decided");
    assert_eq!(spent.len(), 1400);
    assert!(
        spent
            .iter()
            .all(|r| r.admitted && r.committed && r.remaining == 7)
    );
    let look = site.check(&items(0)).await.expect("looked at");
    assert!(look.iter().all(|r| r.remaining == 7), "{:?}", &look[..3]);
}

/// A concurrency key's `check` of `cost` cells for acquisition `slot`, limit 2: admitted?
async fn acquire(conn: &mut redis::aio::MultiplexedConnection, slot: &str, cost: &str) -> bool {
    let Words(reply) = redis::Script::new(CHECK_LUA)
        .key("tg:c:ip:1:slots")
        .arg("check")
        .arg(&["5", "2", "0", "2", cost, "0", "1", slot][..])
        .invoke_async(conn)
        .await
        .expect("check.lua runs");
    reply[0] == 1
}

/// A check of 2 cells run twice holds its 2 cells, not 4; an acquisition holding only its
/// first cell (a run cut short between its ZADDs) is someone else's to a check of it again:
/// counting both cells as its own would admit 3 on a limit of 2.
#[tokio::test]
async fn a_concurrency_check_counts_as_its_own_only_all_of_its_cells() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    assert!(acquire(&mut conn, "a", "2").await);
    assert!(
        acquire(&mut conn, "a", "2").await,
        "run again: its own cells"
    );
    assert_eq!(redis.cli(&["ZCARD", "tg:c:ip:1:slots"]), "2");
    redis.cli(&["DEL", "tg:c:ip:1:slots"]);
    let far = "9000000000000000"; // µs, as check.lua scores a cell: far ahead
    redis.cli(&["ZADD", "tg:c:ip:1:slots", far, "b#1"]);
    assert!(!acquire(&mut conn, "b", "2").await, "1 held + 2 asked > 2");
    assert_eq!(redis.cli(&["ZCARD", "tg:c:ip:1:slots"]), "1");
}

/// A sliding window admits exactly as the Rust algorithm does, at every instant: the
/// previous window's count weighs `prev · (P − e) / P`, and a request fits when that plus
/// the current count and its cost is at most the limit, compared in integers. (The script
/// added its 1 ns EPS to a *cell count* there: a request a thousandth of a cell over the
/// bound was admitted, at about one instant in a thousand; the library's `tests/scripts/check/` caught one.)
/// Here the previous window holds 1 of a limit of 1, so a request fits only at the
/// window's very end; 20 000 calls land about 20 in the last thousandth of a window.
#[tokio::test]
async fn a_sliding_window_admits_exactly_at_every_instant() {
    const P: i64 = 1_000_000; // µs: one-second windows
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let script = redis::Script::new(CHECK_LUA);
    let (mut near, mut compared) = (0, 0);
    for _ in 0..20_000 {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let idx = (secs * 1_000_000 + micros) / P;
        // The current window holds nothing, the previous one 1 (`window:prev:curr`).
        let _: () = redis::cmd("SET")
            .arg("tg:sw:ip:1")
            .arg(format!("{idx}:1:0"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let Words(r) = script
            .key("tg:sw:ip:1")
            .arg("check")
            .arg(&["3", "1", &P.to_string(), "1", "1", "0", "1", "-"][..])
            .invoke_async(&mut conn)
            .await
            .unwrap();
        let now = r[6];
        if now / P != idx {
            continue; // the window turned between the SET and the call
        }
        let e = now - idx * P;
        // Exact: 1 · (P − e) + (0 + 1) · P ≤ 1 · P, i.e. only when e = P (never inside).
        let fits = (P - e) + P <= P;
        near += usize::from((P - e) * 1000 <= P);
        compared += 1;
        assert_eq!(r[0] == 1, fits, "at {e} µs into the window: {r:?}");
    }
    assert!(compared > 15_000, "{compared} calls compared");
    println!("{near} calls in the window's last thousandth");
}

/// `check_now` decides a local policy at once, with no store call, and hands a central
/// policy's walk back to await: a store call, which admits.
#[tokio::test]
async fn check_now_decides_local_keys_at_once_and_hands_back_store_walks() {
    let redis = RedisServer::start();
    for (site, waits) in [("local", false), ("central", true)] {
        let cfg = one_policy(
            redis.addr(),
            "2s",
            &format!("algorithm = \"gcra\"\nlimit = 5\nperiod = \"1s\"\nsite = \"{site}\""),
        );
        let limiter = Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
            .expect("a limiter");
        let name: Arc<str> = Arc::from("api");
        let at = At {
            route: 0,
            route_name: &name,
            client: "192.0.2.7".parse().unwrap(),
            method: &http::Method::GET,
        };
        let before = redis.scripts_run();
        let admission = match limiter.check_now(at, Default::default(), &http::HeaderMap::new()) {
            Checked::Now(admission) => {
                assert!(
                    !waits,
                    "{site}: decided at once, yet its site waits on the store"
                );
                admission
            }
            Checked::Later(walk) => {
                assert!(waits, "{site}: handed back, yet nothing to wait on");
                walk.await
            }
        };
        assert_eq!(admission.decision.outcome().as_str(), "allow", "{site}");
        // The first central call may load the script too: what matters is none or some.
        let ran = redis.scripts_run() - before;
        assert_eq!(ran > 0, waits, "{site}: {ran} script calls");
    }
}
