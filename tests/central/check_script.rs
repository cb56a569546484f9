//! `check.lua` against the Rust algorithms on a real Redis: the same requests at the same
//! moments (the script's Redis `TIME`, handed to the Rust algorithm as its `now`) get the
//! same admit or deny and the same remaining, for all five algorithms. Also: a value
//! written by another algorithm counts as a full key instead of failing the call, and a
//! concurrency slot stranded by a gateway that never released it expires on its own even
//! while the key stays busy.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate::limit::algorithm::{
    Algorithm, Concurrency, Gcra, LeakyBucket, SlidingWindow, TokenBucket, Verdict,
};
use tollgate::limit::central::CHECK_LUA;

const GCRA: f64 = 1.0;
const TOKEN_BUCKET: f64 = 2.0;
const SLIDING_WINDOW: f64 = 3.0;
const LEAKY_BUCKET: f64 = 4.0;
const CONCURRENCY: f64 = 5.0;

/// A policy as the script takes it (µs), enforcing.
#[derive(Debug, Clone, Copy)]
struct Params {
    alg: f64,
    limit: u32,
    period_us: u64,
    burst: u32,
    max_delay_us: u64,
}

/// One `check` reply for one key.
#[derive(Debug, Clone, Copy)]
struct Reply {
    admitted: bool,
    remaining: u64,
    wait_us: u64,
    /// Until `remaining` grows by one: the RateLimit `t`.
    next_us: u64,
    now_us: u64,
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// Runs check.lua's `op` on one key with the gateway's argument layout (central/mod.rs).
async fn script(
    conn: &mut MultiplexedConnection,
    op: &str,
    key: &str,
    p: Params,
    cost: u32,
    slot: &str,
) -> Result<Vec<i64>, redis::RedisError> {
    invocation(op, key, p, cost, slot).invoke_async(conn).await
}

/// The script, hashed once for every call of the file.
static SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(CHECK_LUA));

/// One key's `op` call, with the gateway's argument layout; more keys may be added (not to
/// a refund, whose marker comes last).
fn invocation(
    op: &str,
    key: &str,
    p: Params,
    cost: u32,
    slot: &str,
) -> redis::ScriptInvocation<'static> {
    let mut inv = SCRIPT.key(key);
    inv.arg(op);
    if op == "refund" {
        inv.key(fresh_marker()).arg(MARKER_MS);
    }
    // The algorithm as the gateway writes it ("1", not the "1.0" an f64 argument gives):
    // check.lua takes its one-key GCRA path only on that text.
    inv.arg(p.alg as u32)
        .arg(p.limit)
        .arg(p.period_us)
        .arg(p.burst)
        .arg(cost)
        .arg(p.max_delay_us)
        .arg(1)
        .arg(slot);
    inv
}

/// A refund marker's life (ms): `RedisStore::repeat_window` at its shortest.
const MARKER_MS: u64 = 16_000;

/// A refund's marker key, new for every call (tests/refund_once.rs runs one twice).
fn fresh_marker() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("~refund:{n}")
}

/// How a sequence reaches the script: as one-key requests (its fast path for a lone GCRA
/// key), or with a second key that never limits in the same request (the general path,
/// which multi-policy requests take). Both must decide as the Rust algorithm does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Path {
    Alone,
    Beside,
}

async fn check(
    conn: &mut MultiplexedConnection,
    key: &str,
    p: Params,
    cost: u32,
    slot: &str,
) -> Reply {
    check_on(Path::Alone, conn, key, p, cost, slot).await
}

/// [`check`] along `path`: with [`Path::Beside`], a GCRA key of a billion a second goes in
/// the same call, and its reply is dropped.
async fn check_on(
    path: Path,
    conn: &mut MultiplexedConnection,
    key: &str,
    p: Params,
    cost: u32,
    slot: &str,
) -> Reply {
    let mut inv = invocation("check", key, p, cost, slot);
    if path == Path::Beside {
        inv.key("free")
            .arg(GCRA)
            .arg(1_000_000_000)
            .arg(1_000_000)
            .arg(1_000_000_000);
        inv.arg(1).arg(0).arg(1).arg("-");
    }
    let mut r: Vec<i64> = inv.invoke_async(conn).await.expect("check.lua runs");
    if path == Path::Beside {
        assert_eq!(r.len(), 13, "two keys' replies and now: {r:?}");
        // All or nothing: the free key spends exactly when the checked key does.
        assert_eq!(r[6..8], [1, r[1]], "the free key is admitted: {r:?}");
        r.drain(6..12);
    }
    match r[..] {
        [
            admitted,
            committed,
            remaining,
            _reset,
            wait_us,
            next_us,
            now_us,
        ] => {
            assert_eq!(
                admitted, committed,
                "a lone enforcing key spends when admitted"
            );
            Reply {
                admitted: admitted == 1,
                remaining: remaining as u64,
                wait_us: wait_us as u64,
                next_us: next_us as u64,
                now_us: now_us as u64,
            }
        }
        _ => panic!("check.lua replied {r:?}"),
    }
}

async fn release(conn: &mut MultiplexedConnection, key: &str, p: Params, cost: u32, slot: &str) {
    script(conn, "release", key, p, cost, slot)
        .await
        .expect("release runs");
}

/// One request of a sequence: wait this long, then spend `cost`.
type Step = (u64, u32);

/// Sends `steps` through check.lua and through `alg` at the script's Redis time, and
/// asserts the same answer each time; returns how many were admitted.
async fn compare<A: Algorithm>(alg: A, p: Params, steps: &[Step]) -> usize {
    compare_on(Path::Alone, alg, p, steps).await
}

/// [`compare`] along `path`.
async fn compare_on<A: Algorithm>(path: Path, alg: A, p: Params, steps: &[Step]) -> usize {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let mut state = None;
    let mut admitted = 0;
    for (i, &(after_ms, cost)) in steps.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        let lua = check_on(path, &mut conn, "k", p, cost, "-").await;
        let d = alg.decide(state, cost, lua.now_us * 1_000);
        let at = format!("step {i} ({after_ms} ms, cost {cost}) of {p:?}: lua {lua:?}, rust {d:?}");
        assert_eq!(lua.admitted, d.verdict.admits(), "{at}");
        assert_eq!(lua.remaining, d.remaining, "{at}");
        // The script works in µs doubles, the algorithms in exact ticks.
        assert!(
            lua.next_us.abs_diff(d.next_after.div_ceil(1_000)) <= 1,
            "next: {at}"
        );
        if let Verdict::Delay(ns) = d.verdict {
            assert!(lua.wait_us.abs_diff(ns.div_ceil(1_000)) <= 1, "{at}");
        }
        if d.verdict.admits() {
            state = Some(d.state);
            admitted += 1;
        }
    }
    admitted
}

/// Bursts, pauses shorter and longer than a cell, and costs above one.
const STEPS: &[Step] = &[
    (0, 1),
    (0, 1),
    (0, 1),
    (0, 1),
    (0, 1),
    (130, 1),
    (0, 1),
    (260, 2),
    (0, 1),
    (0, 1),
    (520, 3),
    (0, 1),
    (40, 1),
    (1_100, 2),
    (0, 2),
    (0, 1),
];

#[tokio::test]
async fn gcra_matches_rust() {
    let p = Params {
        alg: GCRA,
        limit: 10,
        period_us: 1_000_000,
        burst: 4,
        max_delay_us: 0,
    };
    let alg = Gcra::new(nz(10), Duration::from_secs(1), nz(4)).unwrap();
    for path in [Path::Alone, Path::Beside] {
        let n = compare_on(path, alg, p, STEPS).await;
        assert!(
            (4..STEPS.len()).contains(&n),
            "{path:?}: some admitted, some denied: {n}"
        );
    }
}

#[tokio::test]
async fn token_bucket_matches_rust() {
    let p = Params {
        alg: TOKEN_BUCKET,
        limit: 10,
        period_us: 1_000_000,
        burst: 4,
        max_delay_us: 0,
    };
    let alg = TokenBucket::new(nz(10), Duration::from_secs(1), nz(4)).unwrap();
    let n = compare(alg, p, STEPS).await;
    assert!(
        (4..STEPS.len()).contains(&n),
        "some admitted, some denied: {n}"
    );
}

#[tokio::test]
async fn sliding_window_matches_rust() {
    let p = Params {
        alg: SLIDING_WINDOW,
        limit: 5,
        period_us: 500_000,
        burst: 1,
        max_delay_us: 0,
    };
    let alg = SlidingWindow::new(nz(5), Duration::from_millis(500)).unwrap();
    let n = compare(alg, p, STEPS).await;
    assert!(
        (5..STEPS.len()).contains(&n),
        "some admitted, some denied: {n}"
    );
}

#[tokio::test]
async fn leaky_bucket_matches_rust() {
    let p = Params {
        alg: LEAKY_BUCKET,
        limit: 10,
        period_us: 1_000_000,
        burst: 1,
        max_delay_us: 300_000,
    };
    let alg = LeakyBucket::new(nz(10), Duration::from_secs(1), Duration::from_millis(300)).unwrap();
    let n = compare(alg, p, STEPS).await;
    assert!(
        (4..STEPS.len()).contains(&n),
        "some admitted, some denied: {n}"
    );
}

/// Concurrency: acquisitions and releases (by slot id) in an interleaved order.
#[tokio::test]
async fn concurrency_matches_rust() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = Params {
        alg: CONCURRENCY,
        limit: 3,
        period_us: 0,
        burst: 1,
        max_delay_us: 0,
    };
    let alg = Concurrency::new(nz(3));
    let mut state = None;
    let mut held: Vec<(String, u32)> = Vec::new();
    // (acquire cost, or 0 = release the oldest held slot)
    let steps = [1, 1, 2, 1, 0, 2, 1, 0, 0, 3, 1, 0, 3];
    for (i, &cost) in steps.iter().enumerate() {
        if cost == 0 {
            let (slot, c) = held.remove(0);
            release(&mut conn, "c", p, c, &slot).await;
            state = state.map(|s| alg.release(s, c));
            continue;
        }
        let slot = format!("slot{i}");
        let lua = check(&mut conn, "c", p, cost, &slot).await;
        let d = alg.decide(state, cost, lua.now_us * 1_000);
        let at = format!("step {i} (cost {cost}): lua {lua:?}, rust {d:?}");
        assert_eq!(lua.admitted, d.verdict.admits(), "{at}");
        assert_eq!(lua.remaining, d.remaining, "{at}");
        if d.verdict.admits() {
            state = Some(d.state);
            held.push((slot, cost));
        }
    }
}

/// A value another algorithm wrote (the policy changed algorithm during a rolling deploy)
/// is a full key for the new one, in every direction, and is replaced on the first spend;
/// junk never fails a call. (gcra and leaky_bucket share one format, a time, and read it as
/// such: that pair only has to answer.)
#[tokio::test]
async fn a_foreign_value_counts_as_a_full_key() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let algs = [
        GCRA,
        TOKEN_BUCKET,
        SLIDING_WINDOW,
        LEAKY_BUCKET,
        CONCURRENCY,
    ];
    let params = |alg| Params {
        alg,
        limit: 5,
        period_us: 3_600_000_000,
        burst: 5,
        max_delay_us: 3_600_000_000,
    };
    for (i, &writer) in algs.iter().enumerate() {
        for &reader in algs.iter().filter(|&&a| a != writer) {
            let key = format!("k{i}:{reader}");
            check(&mut conn, &key, params(writer), 1, "w").await;
            let r = script(&mut conn, "check", &key, params(reader), 1, "r")
                .await
                .unwrap_or_else(|e| panic!("{reader} reading {writer}'s value fails: {e}"));
            if [writer, reader] == [GCRA, LEAKY_BUCKET] || [writer, reader] == [LEAKY_BUCKET, GCRA]
            {
                // One format, a time in µs (the next free moment; lease.lua shares it):
                // read as the other's next free moment, which the rate bounds.
                continue;
            }
            let fresh_key = format!("fresh{i}:{reader}");
            let fresh = check(&mut conn, &fresh_key, params(reader), 1, "f").await;
            assert_eq!(r[0], 1, "{reader} reading {writer}'s value admits: {r:?}");
            assert_eq!(
                r[2] as u64, fresh.remaining,
                "{reader} reading {writer}'s value is fresh: {r:?}"
            );
            // The spend replaced the value: the next call reads its own state.
            let again = check(&mut conn, &key, params(reader), 1, "r2").await;
            assert!(
                again.admitted && again.remaining < fresh.remaining,
                "{reader}: {again:?}"
            );
        }
    }
    for junk in ["nan", "inf", "1:2:3:4", "", "::", "abc"] {
        redis.cli(&["SET", "junk", junk]);
        for &alg in &algs {
            let r = script(&mut conn, "check", "junk", params(alg), 1, "j").await;
            assert!(r.is_ok(), "{alg} on `{junk}`: {r:?}");
            redis.cli(&["SET", "junk", junk]);
            let r = script(&mut conn, "refund", "junk", params(alg), 1, "j").await;
            assert!(r.is_ok(), "refund {alg} on `{junk}`: {r:?}");
        }
    }
}

/// A gateway that crashed holding a slot never releases it; other requests keep the key
/// busy the whole time. The stranded slot still expires on its own after its hold, while
/// slots that are acquired and released keep working.
#[tokio::test]
async fn a_stranded_concurrency_slot_expires_on_a_busy_key() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = Params {
        alg: CONCURRENCY,
        limit: 2,
        period_us: 1_000_000, // hold a slot 1 s (the gateway holds 5 minutes)
        burst: 1,
        max_delay_us: 0,
    };
    assert!(check(&mut conn, "busy", p, 1, "crashed").await.admitted);
    for i in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let slot = format!("busy{i}");
        let r = check(&mut conn, "busy", p, 1, &slot).await;
        assert!(r.admitted, "one slot of two is free: {r:?}");
        release(&mut conn, "busy", p, 1, &slot).await;
    }
    // 1.5 s later the crashed gateway's slot is gone: both slots are free again.
    let a = check(&mut conn, "busy", p, 1, "a").await;
    let b = check(&mut conn, "busy", p, 1, "b").await;
    assert!(
        a.admitted && b.admitted,
        "stranded slot expired: {a:?} {b:?}"
    );
    assert_eq!(b.remaining, 0);
    assert!(!check(&mut conn, "busy", p, 1, "c").await.admitted);
    // A release removes exactly its own slot.
    release(&mut conn, "busy", p, 1, "a").await;
    assert_eq!(redis.cli(&["ZCARD", "busy"]), "1");
    let pttl: u64 = redis.cli(&["PTTL", "busy"]).parse().unwrap();
    assert!(
        (1..=1_002).contains(&pttl),
        "the key lives as long as its newest slot: {pttl}"
    );
}

/// check.lua on a gcra key `g` (limit 1 per hour) and a concurrency key `s` (limit 2).
async fn gcra_and_slot(conn: &mut MultiplexedConnection, op: &str, slot: &str) -> Vec<i64> {
    let mut inv = SCRIPT.key("g");
    inv.key("s").arg(op);
    if op == "refund" {
        inv.key(fresh_marker()).arg(MARKER_MS);
    }
    inv.arg(&[GCRA, 1.0, 3.6e9, 1.0, 1.0, 0.0, 1.0][..])
        .arg("-")
        .arg(&[CONCURRENCY, 2.0, 0.0, 1.0, 1.0, 0.0, 1.0][..])
        .arg(slot)
        .invoke_async(conn)
        .await
        .expect("check.lua runs")
}

/// All or nothing holds for slots too: a request another key denies takes no slot, and a
/// refund (cluster reserve-and-refund) removes exactly the refunded acquisition's slot.
#[tokio::test]
async fn a_denied_request_takes_no_slot_and_a_refund_removes_its_own() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let first = gcra_and_slot(&mut conn, "check", "one").await;
    // 6 integers per key: key 2's admitted and committed are at 6 and 7.
    assert_eq!((first[1], first[7]), (1, 1), "both spent: {first:?}");
    let denied = gcra_and_slot(&mut conn, "check", "two").await;
    assert_eq!(
        (denied[0], denied[6], denied[7]),
        (0, 1, 0),
        "gcra denies, no slot: {denied:?}"
    );
    assert_eq!(redis.cli(&["ZRANGE", "s", "0", "-1"]), "one#1");
    gcra_and_slot(&mut conn, "refund", "one").await;
    assert_eq!(
        redis.cli(&["EXISTS", "s"]),
        "0",
        "the refunded slot is gone"
    );
}

/// A concurrency cost of thousands of cells (one sorted-set member each) is held and
/// released whole: Lua cannot `unpack` that many arguments at once, so the script adds and
/// removes the members in batches.
#[tokio::test]
async fn a_concurrency_cost_of_thousands_of_cells_is_held_and_released() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = Params {
        alg: CONCURRENCY,
        limit: 10_000,
        period_us: 0,
        burst: 10_000,
        max_delay_us: 0,
    };
    let r = check(&mut conn, "big:slots", p, 5_000, "s1").await;
    assert!(r.admitted, "{r:?}");
    assert_eq!(redis.cli(&["ZCARD", "big:slots"]), "5000");
    assert!(!check(&mut conn, "big:slots", p, 5_001, "s2").await.admitted);
    release(&mut conn, "big:slots", p, 5_000, "s1").await;
    assert_eq!(redis.cli(&["ZCARD", "big:slots"]), "0");
}
