//! The handle against what it owns: a reload keeps a key's spent state and runs the new
//! limiter, a change of N waits for a reload's swap, and shutdown (or drop) stops the
//! membership heartbeat on a real `redis-server`.

mod redis;
pub(crate) mod spec;

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method};
use prometheus_client::registry::Registry;

use super::LimiterHandle;
use crate::clock::ManualClock;
use crate::limiter::Limiter;
use crate::spec::Site;
use redis::RedisServer;
use spec::{policy, spec};

/// Membership's beat in the store tests: short, so a test sees several.
const HEARTBEAT: Duration = Duration::from_millis(20);
/// The sorted set membership keeps under the specs' `key_prefix`.
const MEMBERS: &str = "handle:members";

/// How many of `n` requests from `10.0.0.ip` route 0 admits.
async fn admits(l: &Limiter, ip: u8, n: usize) -> usize {
    let route: Arc<str> = Arc::from("api");
    let (method, headers) = (Method::GET, HeaderMap::new());
    let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, ip));
    let mut ok = 0;
    for _ in 0..n {
        let admission = l.check(0, &route, client, &method, &headers).await;
        ok += usize::from(admission.admitted());
    }
    ok
}

fn clock() -> Arc<ManualClock> {
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    Arc::new(clock)
}

/// A reload through the handle swaps in a limiter built on the running one's state: the
/// request path loads the new limiter (a policy the reload added decides), and a key that
/// spent its limit before the reload is still spent after it.
#[tokio::test(flavor = "current_thread")]
async fn a_reload_runs_the_new_limiter_and_keeps_a_keys_spent_state() {
    let per_ip = || policy("per_ip", 3, Site::Local);
    let mut registry = Registry::default();
    let before = spec(vec![per_ip()], None, HEARTBEAT);
    let handle = LimiterHandle::new(before, clock(), &mut registry).unwrap();
    assert_eq!(admits(&handle.load(), 1, 5).await, 3, "3 of 5 before");
    let old = handle.current();

    let after = spec(
        vec![per_ip(), policy("other", 100, Site::Local)],
        None,
        HEARTBEAT,
    );
    let (new, carried) = handle.reload(after).unwrap();
    assert_eq!(carried.len(), 2, "one carry per policy");
    assert!(
        Arc::ptr_eq(&new, &handle.current()),
        "the reloaded limiter runs"
    );
    assert!(
        !Arc::ptr_eq(&old, &handle.current()),
        "the old one no longer"
    );
    assert!(handle.load().policy_index("other").is_some());
    assert_eq!(
        admits(&handle.load(), 1, 5).await,
        0,
        "spent before, spent after"
    );
    assert_eq!(admits(&handle.load(), 2, 5).await, 3, "a fresh client: 3");
}

/// N changes from 1 to 2 while a reload is between building its limiter and swapping it
/// in (under the nodes lock, as [`LimiterHandle::reload`] holds it). The change waits for
/// the swap and lands on the new limiter: a fresh client gets the N = 2 share, 5 of 10,
/// and the client that spent all of its N = 1 share has spent all of its N = 2 share. (A
/// hostile review's finding: the new limiter kept the old N over states rescaled to the
/// new, and a fresh client got the N = 1 share at N = 2, a spent one 5 more.)
#[tokio::test(flavor = "current_thread")]
async fn a_change_of_n_during_a_reload_lands_on_the_new_limiter() {
    let split = || spec(vec![policy("per_ip", 10, Site::Split)], None, HEARTBEAT);
    let mut registry = Registry::default();
    let handle = LimiterHandle::new(split(), clock(), &mut registry).unwrap();
    assert_eq!(
        admits(&handle.load(), 1, 20).await,
        10,
        "the whole limit at N = 1"
    );
    let running = handle.running.clone();

    let held = running.hold_nodes();
    let (new, _) = running.limiter.load().reload(split()).unwrap();
    let membership = {
        let running = running.clone();
        std::thread::spawn(move || running.set_nodes(NonZeroU32::new(2).unwrap()))
    };
    // The change must wait for the swap: give it time to land early if it can.
    let started = Instant::now();
    while !membership.is_finished() && started.elapsed() < Duration::from_millis(200) {
        std::thread::yield_now();
    }
    running.limiter.store(Arc::new(new));
    drop(held);
    assert!(
        membership.join().unwrap(),
        "N changed 1 -> 2 on the running limiter"
    );

    assert_eq!(handle.nodes().get(), 2);
    assert_eq!(
        admits(&handle.load(), 2, 20).await,
        5,
        "a fresh client: 10 / 2"
    );
    assert_eq!(
        admits(&handle.load(), 1, 20).await,
        0,
        "all of 10 spent is all of 5"
    );
}

/// This node's membership entries: (member, expiry in ms).
async fn members(c: &mut ::redis::aio::MultiplexedConnection) -> Vec<(String, f64)> {
    ::redis::cmd("ZRANGE")
        .arg(MEMBERS)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(c)
        .await
        .expect("ZRANGE")
}

/// Poll (not sleep over a race) until `done` holds of the members, or panic after 5 s.
async fn until(
    c: &mut ::redis::aio::MultiplexedConnection,
    what: &str,
    done: impl Fn(&[(String, f64)]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if done(&members(c).await) {
            return;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A handle on a Redis store with a `split` policy (so membership beats every `heartbeat`).
fn on_redis(redis: &RedisServer, heartbeat: Duration) -> LimiterHandle {
    let s = spec(
        vec![policy("per_ip", 10, Site::Split)],
        Some(redis.url()),
        heartbeat,
    );
    LimiterHandle::new(s, clock(), &mut Registry::default()).unwrap()
}

/// `start` joins membership before it returns and the heartbeat renews it; `shutdown`
/// stops the heartbeat and waits for it to leave: the member is gone at once and no later
/// beat puts it back.
#[tokio::test(flavor = "current_thread")]
async fn shutdown_stops_the_heartbeat_and_leaves_membership() {
    let redis = RedisServer::start();
    let mut c = redis.connect().await;
    let handle = on_redis(&redis, HEARTBEAT);
    handle.start().await;
    let joined = members(&mut c).await;
    assert_eq!(joined.len(), 1, "one member after start: {joined:?}");
    let first = joined[0].1;
    until(&mut c, "the heartbeat renews the member", |m| {
        m.len() == 1 && m[0].1 > first
    })
    .await;

    handle.shutdown().await;
    assert_eq!(members(&mut c).await, vec![], "left when shutdown returns");
    // Five heartbeats on, a heartbeat still running would have joined again.
    tokio::time::sleep(HEARTBEAT * 5).await;
    assert_eq!(members(&mut c).await, vec![], "no beat after shutdown");
    assert_eq!(admits(&handle.load(), 1, 12).await, 10, "it still decides");
}

/// Dropping a started handle, as `DbDropGuard` does, stops its tasks: membership hears the
/// stop and leaves on its own (a task aborted or left running would keep the member until
/// it expires, three heartbeats: a minute on here, so leaving is the only way out).
#[tokio::test(flavor = "current_thread")]
async fn dropping_the_handle_stops_its_tasks() {
    let redis = RedisServer::start();
    let mut c = redis.connect().await;
    let handle = on_redis(&redis, Duration::from_secs(20));
    handle.start().await;
    assert_eq!(members(&mut c).await.len(), 1, "joined");
    drop(handle);
    until(&mut c, "the member leaves", <[_]>::is_empty).await;
}
