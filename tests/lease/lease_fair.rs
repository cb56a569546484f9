//! Fair shares of a contended leased key (`lease/fair.rs`, issue 47): gateway processes
//! on one overloaded key (three or four at equal load, 50/30/20, seeded Poisson arrivals)
//! each get their demand-weighted share within a quarter over every 2 s, and `lease.lua`
//! keeps the key's demand as the in-process coordinator does.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::config::fleet;
use crate::common::echo_upstream;
use crate::common::process::{spawn_serve, temp_file};
use crate::common::redis::RedisServer;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tollgate::limit::lease::{LEASE_LUA, LeaseParams, MemoryCoordinator, RefillAsk, script_args};

/// The key: 100/s, burst 20, the default lease knobs (TTL 50 ms).
const LIMIT: f64 = 100.0;
const BURST: f64 = 20.0;
const TTL_S: f64 = 0.05;
/// Four windows of 2 s.
const WINDOW: Duration = Duration::from_secs(2);
const WINDOWS: usize = 4;

/// Each gateway's clients: 83 requests a second (the shape: 250/s on a 100/s key).
const GAP: Duration = Duration::from_micros(12_048);

/// Three gateways, one leased key, each sent 83 requests a second: in every 2 s window of
/// the test's own sends each gateway's admissions are within ±25 % of its demand-weighted
/// share of the fleet's (its requests sent in the window over all sent: a third, less what
/// a stalled client did not send), and the fleet admits no more than the documented bound
/// for the window (`burst + (D + lease_ttl)·rate`, `D` the window and the slowest answer).
/// Before the fair shares, the gateway that asked first after each cell conformed took
/// nearly all of them (575, 77 and 67 in 7 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_gateways_get_equal_shares_of_a_contended_key() {
    let sends = (0..3).map(|n| every(GAP, GAP * n / 3)).collect();
    fair_shares(sends).await;
}

/// Four gateways at 62.5 requests a second each (250/s on the 100/s key): each holds a
/// quarter of the demand, which the quarter-of-demand rule (`fair::RESERVE_SHARE`) only
/// reached while noise put a node over it; the standing rule (`Fair::owed`,
/// `Fair::ahead`) evens any number of nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_equal_gateways_get_equal_shares_of_a_contended_key() {
    let gap = Duration::from_millis(16);
    let sends = (0..4).map(|n| every(gap, gap * n / 4)).collect();
    fair_shares(sends).await;
}

/// 50/30/20 of 2.5 times the limit (125, 75 and 50 requests a second): each gateway's
/// admissions within ±25 % of its demand-weighted share. Without the rule the busiest
/// took most cells (its reservations held the key's horizon) and the 20 % gateway next
/// to nothing. (60/30/10, whose 10 % gateway's share is some 20 admissions a window, is
/// `fair.rs`' in-process test: on this machine, with other gateway tests running beside
/// it, a count that small strayed past a quarter in one run of three.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_gateways_get_demand_weighted_shares_of_a_contended_key() {
    let sends = [125u32, 75, 50]
        .iter()
        .enumerate()
        .map(|(n, &rate)| {
            let gap = Duration::from_secs(1) / rate;
            every(gap, Duration::from_millis(4) * n as u32)
        })
        .collect();
    fair_shares(sends).await;
}

/// Four gateways, each with its own seeded Poisson arrivals at 62.5 requests a second:
/// bursts and gaps of a real client mix instead of a metronome, the same shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_gateways_get_demand_weighted_shares_of_a_contended_key() {
    let sends = (0..4)
        .map(|n| {
            poisson(
                62.5,
                0x9E37_79B9_7F4A_7C15u64.wrapping_mul(2 * n as u64 + 3),
            )
        })
        .collect();
    fair_shares(sends).await;
}

/// Sends every `gap` from `first` until the last window ends (offsets from the start).
fn every(gap: Duration, first: Duration) -> Vec<Duration> {
    let end = WINDOW * WINDOWS as u32;
    std::iter::successors(Some(first), |&t| Some(t + gap))
        .take_while(|&t| t < end)
        .collect()
}

/// Seeded Poisson arrivals at `rate` a second until the last window ends (xorshift64, as
/// `tollgate simulate`'s traces: a fixed seed is the same run every time).
fn poisson(rate: f64, seed: u64) -> Vec<Duration> {
    let (end, mut s, mut t) = ((WINDOW * WINDOWS as u32).as_secs_f64(), seed | 1, 0.0);
    let mut out = Vec::new();
    loop {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        // Uniform in (0, 1]: never ln 0.
        let u = ((s >> 11) + 1) as f64 / (1u64 << 53) as f64;
        t -= u.ln() / rate;
        if t >= end {
            return out;
        }
        out.push(Duration::from_secs_f64(t));
    }
}

/// One gateway process per entry of `sends` (each request's offset from the start), one
/// leased key: in every 2 s window each gateway's admissions are within ±25 % of its
/// demand-weighted share of the fleet's (its requests sent in the window over all sent),
/// and the fleet admits no more than the documented bound for the window
/// (`burst + (D + lease_ttl)·rate`, `D` the window and the slowest answer).
async fn fair_shares(sends: Vec<Vec<Duration>>) {
    // One fleet at a time: the shares are counted in time windows, and two fleets of
    // gateways at once on this two-core machine stalled a window's answers (a fleet that
    // admitted 139 of its 200 in one window, the thin gateway's reserved cells the most
    // of them).
    static ONE_FLEET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _fleet = ONE_FLEET.lock().await;
    let n_gw = sends.len();
    let redis = RedisServer::start();
    let cfg = temp_file(
        "fair.toml",
        &fleet(echo_upstream().await, "")
            .patient_redis(&redis.url(), "1s")
            .policy(
                "shared",
                &["route"],
                "gcra",
                100,
                "1s",
                "burst = 20\nsite = \"lease\"",
            )
            .route("api", &["shared"], "closed")
            .build(),
    );
    let nodes: Vec<_> = (0..n_gw).map(|_| spawn_serve(&cfg)).collect();
    // One HTTP/2 connection per gateway: a fresh connection per request cost this
    // two-core machine more than the gateways did.
    let mut senders = Vec::new();
    for node in &nodes {
        let stream = TcpStream::connect(node.addr)
            .await
            .expect("the gateway listens");
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("an HTTP/2 connection");
        tokio::spawn(conn);
        senders.push((sender, node.addr));
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (n, ((sender, addr), offsets)) in senders.into_iter().zip(sends).enumerate() {
        tasks.spawn(async move {
            let mut sent = tokio::task::JoinSet::new();
            for offset in offsets {
                tokio::time::sleep_until((start + offset).into()).await;
                let mut sender = sender.clone();
                sent.spawn(async move {
                    let at = Instant::now();
                    let req = http::Request::get(format!("http://{addr}/api"))
                        .body(Empty::<Bytes>::new())
                        .expect("a request");
                    let status = sender.send_request(req).await.expect("an answer").status();
                    (n, at - start, status, at.elapsed())
                });
            }
            sent.join_all().await
        });
    }
    let answers: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
    let (mut admitted, mut sent) = (
        vec![vec![0u32; n_gw]; WINDOWS + 1],
        vec![vec![0u32; n_gw]; WINDOWS + 1],
    );
    let mut slowest = Duration::ZERO;
    for &(n, at, status, took) in &answers {
        let w = ((at.as_secs_f64() / WINDOW.as_secs_f64()) as usize).min(WINDOWS);
        sent[w][n] += 1;
        match status {
            StatusCode::OK => admitted[w][n] += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("gateway {n} answered {other} at {at:?} (took {took:?})"),
        }
        slowest = slowest.max(took);
    }
    let bound = BURST + (WINDOW.as_secs_f64() + slowest.as_secs_f64() + TTL_S) * LIMIT;
    eprintln!(
        "per 2 s window and gateway: admitted {admitted:?}, sent {sent:?}; slowest answer {slowest:?}"
    );
    for w in 0..WINDOWS {
        let (a, s) = (&admitted[w], &sent[w]);
        let total: u32 = a.iter().sum();
        assert!(
            f64::from(total) <= bound,
            "window {w}: {a:?}, {total} over the bound {bound:.0}"
        );
        assert!(total > 0, "window {w}: nothing admitted");
        let offered: u32 = s.iter().sum();
        for n in 0..n_gw {
            let fair = f64::from(total) * f64::from(s[n]) / f64::from(offered);
            let share = f64::from(a[n]) / fair;
            assert!(
                (0.75..=1.25).contains(&share),
                "window {w}: admitted {a:?} of {s:?}: gateway {n} got {share:.2} of its share"
            );
        }
    }
}

/// `lease.lua`'s seventh value: the key's demand, from what the calls report, agrees
/// with the in-process coordinator's (`grant.rs`, the memory store's and the simulator's)
/// call after call, both at Redis TIME.
#[tokio::test]
async fn the_script_keeps_the_demand_as_the_memory_coordinator_does() {
    let server = RedisServer::start();
    let client = ::redis::Client::open(server.url()).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers");
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    let ms = Duration::from_millis;
    let p = LeaseParams::new(nz(100), ms(1000), nz(20), ms(50), ms(20), nz(50)).expect("valid");
    let memory = Arc::new(MemoryCoordinator::new());
    let script = ::redis::Script::new(LEASE_LUA);
    let mut seen = Vec::new();
    for (i, reported) in [5u32, 0, 9, 3, 0, 12, 1, 7].into_iter().enumerate() {
        let ask = RefillAsk {
            want: 1,
            lead: 0,
            demand: reported,
            ..RefillAsk::default()
        };
        let reply: Vec<i64> = script
            .key("k")
            .key("~busy:k")
            .key("~hold:k")
            .key("~ret:k")
            .key("~want:k")
            .arg("lease")
            .arg(&script_args(&p, ask)[..])
            .invoke_async(&mut conn)
            .await
            .expect("lease.lua runs");
        assert_eq!(reply.len(), 7, "lease.lua replied {reply:?}");
        let now = u64::try_from(reply[2]).expect("after 1970") * 1_000;
        let g = memory.grant("k", &p, ask, now);
        let lua = u32::try_from(reply[6]).expect("not negative");
        assert!(
            g.demand.abs_diff(lua) <= 1,
            "call {i}: lease.lua {lua}, in-process {}",
            g.demand
        );
        seen.push(lua);
        // A few milliseconds apart, so the average decays between calls.
        tokio::time::sleep(Duration::from_millis(3 * i as u64)).await;
    }
    // 37 requests reported within a few tens of ms: well over a quarter of the 20 cells
    // a 200 ms span allows.
    assert!(
        seen.last().copied().unwrap_or(0) > 1_000,
        "the demand after every report: {seen:?}"
    );
}
