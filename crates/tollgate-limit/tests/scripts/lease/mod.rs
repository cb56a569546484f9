//! The store's scripts against a real Redis: `lease.lua` grants what the Rust grant rule
//! (`grant.rs`, the memory store's and the simulator's coordinator) grants for the same
//! state and time, keeps its state in the format `check.lua`'s GCRA keeps (so either can
//! read a key the other wrote) with a TTL until the key is full again. (Its grant rate:
//! `lease_rate.rs`; `membership.lua`: `membership.rs`.)

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate_limit::central::CHECK_LUA;
use tollgate_limit::clock::Nanos;
use tollgate_limit::lease::LEASE_LUA;
use tollgate_limit::lease::{Grant, Holds, grant};
use tollgate_limit::lease::{LeaseParams, RefillAsk};

/// 1000/s: one cell every 1000 µs.
const INTERVAL_US: i64 = 1_000;
const BURST: u32 = 10;
/// `burst · T`.
const TOLERANCE_US: i64 = BURST as i64 * INTERVAL_US;
/// `lease_ttl` (the horizon is two of them).
const LEAD_US: i64 = 50_000;

/// The grant-rate time constant the gateway sends for [`params`]: four TTLs.
const SPAN_US: i64 = 4 * LEAD_US;

/// A quota as lease.lua takes it: `T` and `τ` in µs.
#[derive(Debug, Clone, Copy)]
struct Quota {
    interval_us: i64,
    tolerance_us: i64,
}

/// 1000/s, burst 10: the policy the Rust rule is compared on.
const FAST: Quota = Quota {
    interval_us: INTERVAL_US,
    tolerance_us: TOLERANCE_US,
};
/// 1/s, burst 10: keys that live for seconds, so checks that read them back have no
/// race with their expiry however slow the test machine is.
const SLOW: Quota = Quota {
    interval_us: 1_000_000,
    tolerance_us: 10_000_000,
};

/// The Rust side of the same policy: 1000/s, burst 10, lease_ttl 50 ms (horizon 100 ms).
fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(1_000),
        Duration::from_secs(1),
        nz(BURST),
        Duration::from_micros(LEAD_US as u64),
        Duration::from_millis(20),
        nz(50),
    )
    .expect("a valid quota")
}

/// One `lease.lua` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reply {
    granted: u32,
    frontier_us: i64,
    now_us: i64,
    /// The key's grant rate, per mille (`Grant::busy`).
    busy: u32,
}

impl Reply {
    /// The reply as the gateway reads it (site.rs): the frontier in ns. Without the grant
    /// rate, which the Rust rule `grant` leaves to `busy` (compared apart).
    fn as_grant(self) -> Grant {
        Grant {
            granted: self.granted,
            frontier: self.frontier_us * 1_000,
            busy: 0,
            long: false,
            ..Grant::default()
        }
    }

    /// Redis TIME of the call, as the Rust rule's `now`.
    fn now_ns(self) -> Nanos {
        u64::try_from(self.now_us).expect("Redis TIME is after 1970") * 1_000
    }
}

/// `lease.lua` on the [`FAST`] quota.
async fn lease(conn: &mut MultiplexedConnection, key: &str, lead_us: i64, want: u32) -> Reply {
    lease_on(conn, key, FAST, lead_us, want).await
}

/// `lease.lua` with the gateway's arguments (site.rs).
async fn lease_on(
    conn: &mut MultiplexedConnection,
    key: &str,
    q: Quota,
    lead_us: i64,
    want: u32,
) -> Reply {
    let reply: Vec<i64> = redis::Script::new(LEASE_LUA)
        .key(key)
        .key(format!("{key}:busy"))
        .arg("lease")
        .arg(q.interval_us)
        .arg(q.tolerance_us)
        .arg(lead_us)
        .arg(want)
        .arg(SPAN_US)
        .invoke_async(conn)
        .await
        .expect("lease.lua runs");
    match reply[..] {
        [granted, frontier_us, now_us, busy, 0, 0, 0] => Reply {
            granted: u32::try_from(granted).expect("granted is a cell count"),
            frontier_us,
            now_us,
            busy: u32::try_from(busy).expect("busy is not negative"),
        },
        _ => {
            panic!(
                "lease.lua replied {reply:?}, not {{granted, frontier_us, now_us, busy, 0, 0, 0}}"
            )
        }
    }
}

/// The stored state: the GCRA `tat` in µs, as `"%.3f"` (what check.lua writes for gcra).
fn stored_tat(redis: &RedisServer, key: &str) -> f64 {
    parse_tat(key, &redis.cli(&["GET", key]))
}

fn parse_tat(key: &str, raw: &str) -> f64 {
    let (whole, frac) = raw
        .split_once('.')
        .unwrap_or_else(|| panic!("{key} holds `{raw}`, not a %.3f float"));
    assert!(
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && frac.len() == 3
            && frac.bytes().all(|b| b.is_ascii_digit()),
        "{key} holds `{raw}`, not a %.3f float of µs"
    );
    raw.parse().expect("a float")
}

/// `GET` and `PTTL` of `key` in one round trip.
async fn state_and_pttl(conn: &mut MultiplexedConnection, key: &str) -> (Option<String>, i64) {
    redis::pipe()
        .get(key)
        .pttl(key)
        .query_async(conn)
        .await
        .expect("GET and PTTL")
}

mod central;
mod grants;
