//! `lease.lua`'s returns (`limit/lease/returns.rs`) against a real Redis: the same grants,
//! returnable flags and cells taken back as the Rust rule on the same calls, the run kept
//! in `KEYS[4]`, and the run ended by a write the script did not make (a debit).

use std::num::NonZeroU32;
use std::time::Duration;

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate_limit::lease::{
    Grant, Holds, LEASE_LUA, LeaseParams, RefillAsk, Returned, Returns, grant_returning,
    script_args,
};

/// 100/s (`T` = 10 ms, far longer than a call), burst 20, lease_ttl 1 s: a budget of 12
/// cells (a TTL's eighth) per window of 2 s, and a horizon of 2 s.
const INTERVAL_US: i64 = 10_000;
const BURST: i64 = 20;
const TTL_US: i64 = 1_000_000;
const M: u32 = 12;

fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(100),
        Duration::from_secs(1),
        nz(BURST as u32),
        Duration::from_micros(TTL_US as u64),
        Duration::from_millis(250),
        nz(500),
    )
    .expect("valid")
}

/// The ask of `want` cells up to the horizon, giving `back` back.
fn ask(want: u32, back: Returned) -> RefillAsk {
    RefillAsk {
        want,
        lead: 2 * TTL_US as u64 * 1_000,
        returned: back,
        ..RefillAsk::default()
    }
}

/// One call with the gateway's own arguments (`script_args`, what `refill.rs` sends), on a
/// key whose grant rate is at the limit (the rate key holds a full span's cells: 1000 per
/// mille, so grants may be returnable): `granted, frontier_us, now_us, busy, long,
/// returnable`.
async fn lease(conn: &mut MultiplexedConnection, want: u32, back: Returned) -> Vec<i64> {
    let p = params();
    let time: Vec<i64> = redis::cmd("TIME")
        .query_async::<Vec<String>>(&mut *conn)
        .await
        .expect("TIME")
        .iter()
        .map(|v| v.parse().expect("a number"))
        .collect();
    // Cells over the span (4 TTLs at 100/s): 400, counted now.
    let rate = format!("400:{}", time[0] * 1_000_000 + time[1]);
    redis::cmd("SET")
        .arg("~busy:k")
        .arg(rate)
        .query_async::<()>(&mut *conn)
        .await
        .expect("SET");
    redis::Script::new(LEASE_LUA)
        .key("k")
        .key("~busy:k")
        .key("~hold:k")
        .key("~ret:k")
        .arg("lease")
        .arg(&script_args(&p, ask(want, back))[..])
        .invoke_async(conn)
        .await
        .expect("lease.lua runs")
}

/// The Rust rule beside the script: the same calls at the script's own `now`.
struct Rule {
    p: LeaseParams,
    tat: Option<u128>,
    holds: Holds,
    returns: Returns,
}

impl Rule {
    fn call(&mut self, want: u32, back: Returned, now_us: i64) -> Grant {
        let ask = ask(want, back);
        let now = u64::try_from(now_us).expect("after 1970") * 1_000;
        let (tat, g) = grant_returning(
            &self.p,
            self.tat,
            &mut self.holds,
            &mut self.returns,
            ask,
            1_000,
            now,
        );
        self.tat = Some(tat);
        g
    }
}

/// The script's reply as the gateway reads it (`refill.rs`), the grant rate and the
/// demand left out.
fn as_grant(r: &[i64]) -> Grant {
    Grant {
        granted: u32::try_from(r[0]).expect("a count"),
        frontier: r[1] * 1_000,
        busy: 0,
        long: r[4] == 1,
        returnable: r[5] == 1,
        at: u64::try_from(r[2]).expect("after 1970") * 1_000,
        demand: 0,
    }
}

/// `cells` of the grant `r` given back, as return `id`.
fn back(cells: u32, r: &[i64], id: u64) -> Returned {
    Returned {
        cells,
        granted_at: u64::try_from(r[2]).expect("after 1970") * 1_000,
        id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_are_taken_as_the_rust_rule_takes_them() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    let mut rule = Rule {
        p,
        tat: None,
        holds: Holds::default(),
        returns: Returns::default(),
    };
    let mut both = async |want, back: Returned| {
        let r = lease(&mut conn, want, back).await;
        let g = rule.call(want, back, r[2]);
        assert_eq!(as_grant(&r), g, "the Rust rule on the same call");
        (r, rule.returns.taken())
    };
    // A key first seen: not returnable, and no run is written.
    let (r1, _) = both(20, Returned::NONE).await;
    assert_eq!((r1[0], r1[5]), (20, 0), "{r1:?}");
    assert_eq!(redis.cli(&["EXISTS", "~ret:k"]).trim(), "0");
    // The run begins; the grants after it are returnable.
    let (r2, _) = both(1, Returned::NONE).await;
    assert_eq!(r2[5], 1, "{r2:?}");
    let (r3, _) = both(30, Returned::NONE).await;
    // Five of r3's cells given back: taken, the key moved back five `T`.
    let (r4, taken) = both(1, back(5, &r3, 41)).await;
    assert_eq!(taken, 5);
    let state = redis.cli(&["GET", "k"]);
    let run = redis.cli(&["GET", "~ret:k"]);
    // Counted at the end of its 32nd of the window (2 s / 32 = 62.5 ms).
    let at = (r4[2] + 62_499) / 62_500 * 62_500;
    assert_eq!(
        run.trim(),
        format!("{}|{}|{at}:5|41", r2[2], state.trim()),
        "since the run began, the key as the script left it, the return taken, its id"
    );
    // The same return again (a call sent twice): nothing more.
    let (_, taken) = both(1, back(5, &r3, 41)).await;
    assert_eq!(taken, 5);
    // Twenty more: seven left in the budget.
    let (_, taken) = both(1, back(20, &r3, 42)).await;
    assert_eq!(taken, u64::from(M));
}

/// A write to the key the script did not make (check.lua's debit, or an old gateway's
/// lease script) ends the run: the next call's grant is not returnable, and cells granted
/// before are never taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_script_did_not_make_ends_the_run() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    lease(&mut conn, 20, Returned::NONE).await;
    lease(&mut conn, 1, Returned::NONE).await;
    let r = lease(&mut conn, 30, Returned::NONE).await;
    assert_eq!(r[5], 1, "{r:?}");
    let state: f64 = redis.cli(&["GET", "k"]).trim().parse().expect("a tat");
    redis.cli(&["SET", "k", &format!("{:.3}", state + 50_000.0)]);
    let broke = lease(&mut conn, 1, back(5, &r, 43)).await;
    assert_eq!(broke[5], 0, "{broke:?}");
    let after: f64 = redis.cli(&["GET", "k"]).trim().parse().expect("a tat");
    assert_eq!(
        after,
        state + 50_000.0 + INTERVAL_US as f64,
        "nothing taken back"
    );
    let run = redis.cli(&["GET", "~ret:k"]);
    assert_eq!(
        run.trim(),
        format!("{}|{after:.3}||", broke[2]),
        "a new run"
    );
    // The new run goes on, and does not take cells granted before it began.
    let next = lease(&mut conn, 1, back(5, &r, 43)).await;
    assert_eq!(next[5], 1, "{next:?}");
    let last: f64 = redis.cli(&["GET", "k"]).trim().parse().expect("a tat");
    assert_eq!(last, after + INTERVAL_US as f64);
}
