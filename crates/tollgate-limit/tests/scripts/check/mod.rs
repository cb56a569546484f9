//! `check.lua` against the Rust algorithms on a real Redis: the same requests at the same
//! moments (the script's Redis `TIME`, handed to the Rust algorithm as its `now`) get the
//! same admit or deny and the same remaining, for all five algorithms. Also: a value
//! written by another algorithm counts as a full key instead of failing the call, and a
//! concurrency slot stranded by a gateway that never released it expires on its own even
//! while the key stays busy.

use crate::common::nz;
use std::time::Duration;

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate_limit::algorithm::{
    Algorithm, Concurrency, Gcra, LeakyBucket, SlidingWindow, TokenBucket, Verdict,
};
use tollgate_limit::central::CHECK_LUA;

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

/// Runs check.lua's `op` on one key with the gateway's argument layout (central/mod.rs).
async fn script(
    conn: &mut MultiplexedConnection,
    op: &str,
    key: &str,
    p: Params,
    cost: u32,
    slot: &str,
) -> Result<Vec<i64>, redis::RedisError> {
    let crate::common::words::Words(reply) = invocation(op, key, p, cost, slot)
        .invoke_async(conn)
        .await?;
    Ok(reply)
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

/// A refund's marker key, new for every call (tests/central/refund_once.rs runs one twice).
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
    let crate::common::words::Words(mut r) = inv.invoke_async(conn).await.expect("check.lua runs");
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

mod algorithms;
mod keys;
