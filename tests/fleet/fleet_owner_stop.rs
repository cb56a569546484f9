//! An owner that is stopped (SIGSTOP for 3 s, then SIGCONT), not killed, under overload,
//! on three real gateway processes (issue 47). Its peers count it out and the key moves to
//! an interim owner, which starts it from full: one burst, as documented. Before the fix the
//! woken owner decided the requests queued at it, and new ones, on its own state (refilled
//! to full while it was stopped) while its peers kept asking the interim owner until their
//! next ping reached it: two deciders at once, a second burst and the rate times the
//! overlap over the bound. Now it learns it may have been counted out (its fleet loop
//! stalled), sends its keys to the interim owner until every peer counts it in again, and
//! takes the key up from the interim owner's count: the bound is burst + rate·t + one
//! burst for the one move.

use std::time::{Duration, Instant};

use crate::common::config::{policy, route};
use crate::common::peers;
use crate::common::*;
use http::StatusCode;
use tollgate::limit::fleet::ring::{node_hash, pick};

const RATE: f64 = 50.0;
const BURST: f64 = 20.0;
const IP: &str = "198.51.100.47";
/// The peer call timeout: the owner's peers count it out within a few of them, so few of
/// their asks wait at it (each would spend a cell there when it wakes).
const TIMEOUT: &str = "20ms";

/// One answer: when it could have been decided at the earliest (sent, or the owner's
/// resume for a request queued at it while stopped), when it arrived, and what it was.
type Timed = (Instant, Instant, StatusCode);

/// The worst excess, over the trace, of what was admitted by each answer's arrival over
/// `burst + rate·t` (t since `started`, before the first decision), and when.
fn worst_prefix(answers: &[Timed], started: Instant) -> (f64, f64) {
    let (mut seen, mut worst, mut worst_at) = (0.0, f64::MIN, 0.0);
    for (_, at, _) in answers.iter().filter(|a| a.2 == StatusCode::OK) {
        seen += 1.0;
        let t = at.duration_since(started).as_secs_f64();
        let excess = seen - (BURST + RATE * t);
        if excess > worst {
            (worst, worst_at) = (excess, t);
        }
    }
    (worst, worst_at)
}

/// The worst excess over `burst + rate·span` of the admitted answers of any stretch of the
/// trace (by arrival) whose decisions all came after `from`: span runs from the earliest
/// such decision could have been to the last arrival. With answers sorted by arrival.
fn worst_window(answers: &[Timed], from: Instant) -> (f64, usize) {
    let ok: Vec<&Timed> = answers.iter().filter(|a| a.2 == StatusCode::OK).collect();
    let (mut worst, mut count) = (f64::MIN, 0);
    for i in 0..ok.len() {
        let mut earliest = ok[i].0;
        for (j, last) in ok.iter().enumerate().skip(i) {
            earliest = earliest.min(last.0);
            if earliest < from {
                break;
            }
            let span = last.1.duration_since(earliest).as_secs_f64();
            let n = (j - i + 1) as f64;
            if n - (BURST + RATE * span) > worst {
                (worst, count) = (n - (BURST + RATE * span), j - i + 1);
            }
        }
    }
    (worst, count)
}

/// 50 per second, burst 20, one key owned by one of three nodes, each offered 40 requests
/// a second (2.4 times the rate in all) for 8 s; the owner stopped from 2 s to 5 s. At
/// every instant t of the trace the fleet has admitted at most burst + rate·t + one burst
/// (the move to the interim owner), give or take 5 (see below); and any stretch that starts
/// after the interim owner spent its first burst holds burst + rate·span (one decider). Before the fix, 4 runs: 72.5 to 78.4 over
/// burst + rate·t, stretches 29.8 to 42.8 over (a second burst and two deciders for a
/// heartbeat or two); with it, 11 of 12 runs 13.3 to 16.7 over burst + rate·t (within the
/// move's burst of 20), one 22.5, no stretch over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_owner_hands_its_key_back_without_a_second_decider() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy(
            "per_ip",
            &["ip"],
            "gcra",
            50,
            "1s",
            "burst = 20\nsite = \"owner\""
        ),
        route("api", &["per_ip"], "closed")
    );
    // The default heartbeat (1 s): how long the peers took to ping the woken owner back in.
    let cluster = "gossip_interval = \"20ms\"";
    let fleet = peers::start_with_timeout(3, up, cluster, TIMEOUT, &limits, "owner-stop");
    fleet.settled().await;
    let key = format!("per_ip:ip:{IP}");
    let owner = fleet.owner_of(&key);
    let interim = pick(
        &key,
        (0..3)
            .filter(|&n| n != owner)
            .map(|n| (n, node_hash(&fleet.peers[n].to_string()))),
    )
    .unwrap();
    let rejoins_before = fleet.metric("tollgate_peer_rejoins_total").await;
    let every = Duration::from_millis(25);
    let started = Instant::now();
    let until = started + Duration::from_secs(8);
    let runs: Vec<_> = fleet
        .nodes
        .iter()
        .map(|n| peers::paced(n.addr, IP, every, until))
        .collect();
    tokio::time::sleep_until((started + Duration::from_secs(2)).into()).await;
    let pid = fleet.nodes[owner].child.id();
    peers::signal(pid, "-STOP");
    let stopped = Instant::now();
    // The peers count the owner out (its asks time out) and the interim owner decides.
    let admin = fleet.nodes[interim].admin.unwrap();
    eventually(
        "the interim owner counts the owner out",
        Duration::from_secs(5),
        || async move {
            metrics_text(admin)
                .await
                .contains("tollgate_peers_live 2\n")
        },
    )
    .await;
    // Offered 2.4 times the rate, the interim owner has spent its first burst within
    // 0.3 s: from here on one decider admits at most burst + rate·span in any stretch.
    let drained = Instant::now() + Duration::from_secs(1);
    tokio::time::sleep_until((stopped + Duration::from_secs(3)).into()).await;
    let resumed = Instant::now();
    peers::signal(pid, "-CONT");
    let mut statuses = Vec::new();
    for r in runs {
        statuses.push(r.await.unwrap());
    }
    let d = started.elapsed().as_secs_f64();
    // A request queued at the stopped owner was decided after it woke, at the earliest.
    let mut answers: Vec<Timed> = statuses
        .iter()
        .enumerate()
        .flat_map(|(n, s)| {
            s.iter().map(
                move |&(sent, at, status)| match n == owner && sent > stopped {
                    true => (sent.max(resumed), at, status),
                    false => (sent, at, status),
                },
            )
        })
        .collect();
    answers.sort_by_key(|a| a.1);
    for (_, _, s) in &answers {
        assert!(
            [
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::SERVICE_UNAVAILABLE
            ]
            .contains(s),
            "unexpected {s}"
        );
    }
    let ok = |s: &Vec<peers::Answered>| s.iter().filter(|(_, _, s)| *s == StatusCode::OK).count();
    let per_node: Vec<usize> = statuses.iter().map(ok).collect();
    let admitted: usize = per_node.iter().sum();
    let queued_ok = statuses[owner]
        .iter()
        .filter(|(sent, _, s)| (stopped..resumed).contains(sent) && *s == StatusCode::OK)
        .count();
    let (worst, worst_at) = worst_prefix(&answers, started);
    // What each node saw: its rejoins (a start, the stop, any other) and peer errors.
    let mut seen = Vec::new();
    for n in &fleet.nodes {
        let m = metrics_text(n.admin.unwrap()).await;
        seen.push((
            metric_sum(&m, "tollgate_peer_rejoins_total"),
            metric_sum(&m, "tollgate_peer_errors_total"),
        ));
    }
    eprintln!("stopped owner: (rejoins, peer errors) per node {seen:?}");
    let (window, window_n) = worst_window(&answers, drained);
    let statuses_of = |n: usize| {
        let mut counts = std::collections::BTreeMap::new();
        for (_, _, s) in &statuses[n] {
            *counts.entry(s.as_u16()).or_insert(0) += 1;
        }
        counts
    };
    eprintln!(
        "stopped owner: admitted {admitted} of {} in {d:.2}s (per node {per_node:?}, owner \
         {owner} {:?}, interim {interim}); worst prefix {worst:+.1} over burst + rate·t at \
         {worst_at:.2}s; worst stretch after the interim's burst {window:+.1} over burst + \
         rate·span ({window_n} admitted); the owner admitted {queued_ok} of the requests \
         queued at it",
        answers.len(),
        statuses_of(owner),
    );
    if std::env::var_os("OWNER_STOP_TRACE").is_some() {
        for (n, s) in statuses.iter().enumerate() {
            for (sent, at, st) in s {
                let t = |i: &Instant| i.duration_since(started).as_secs_f64();
                eprintln!(
                    "trace node {n} sent {:.3} at {:.3} {}",
                    t(sent),
                    t(at),
                    st.as_u16()
                );
            }
        }
        eprintln!(
            "trace stopped {:.3} resumed {:.3} drained {:.3}",
            stopped.duration_since(started).as_secs_f64(),
            resumed.duration_since(started).as_secs_f64(),
            drained.duration_since(started).as_secs_f64()
        );
    }
    // Allowed 5 more: an answer may arrive after a later decision's, and an ask a peer sent
    // the interim owner just before it counted the owner in may be decided there after the
    // owner read the interim's count (a loaded test machine: 22.5 once in 12 runs).
    let one_move = BURST;
    assert!(
        worst <= one_move + 5.0,
        "by {worst_at:.2}s the fleet had admitted {worst:.1} more than burst + rate·t (per \
         node {per_node:?}): the bound with one move is one burst more, {one_move}"
    );
    assert!(
        window <= 2.0,
        "{window_n} admitted in a stretch after the interim owner spent its first burst, \
         {window:.1} more than burst + rate·span: a second decider (the woken owner)"
    );
    // Not starved: once the key moved, the fleet admitted at the rate again.
    assert!(
        admitted as f64 >= 0.7 * RATE * d,
        "admitted only {admitted} of {} in {d:.2}s",
        answers.len()
    );
    // It knew: the woken owner rejoined its peers (and every node did at start).
    let rejoins = fleet.metric("tollgate_peer_rejoins_total").await;
    assert!(
        rejoins > rejoins_before,
        "no rejoin after the stop ({rejoins_before} before, {rejoins} after)"
    );
}

/// An owner slowed, not stopped, hears it was counted out from its peer's next ping (a ping
/// to a peer counted out says so): it quarantines itself before it answers and rejoins
/// every peer (`tollgate_peer_rejoins_total`). Here the ping is sealed by hand with the
/// fleet's secret, as a peer that counts the owner out sends it; a plain ping (what a peer
/// that counts it in sends) changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_told_it_was_counted_out_rejoins_its_peers() {
    use tollgate::limit::peer::wire::{self, Item, Op, Secret};
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy("per_ip", &["ip"], "gcra", 5, "1h", "site = \"owner\""),
        route("api", &["per_ip"], "closed")
    );
    let fleet = peers::start(3, up, "heartbeat = \"100ms\"", &limits, "owner-told");
    fleet.settled().await;
    let admin = fleet.nodes[0].admin.unwrap();
    let rejoins =
        || async move { metric_sum(&metrics_text(admin).await, "tollgate_peer_rejoins_total") };
    let secret = Secret::new(peers::SECRET.as_bytes()).unwrap();
    let (to, from) = (fleet.peers[0], fleet.peers[1].to_string());
    let ping = |nonce: u64, data: &'static [u8]| {
        let (_, message) = wire::seal_request(
            &secret,
            &from,
            &to.to_string(),
            wire::now_ms(),
            nonce,
            &[Item {
                op: Op::Ping,
                data: bytes::Bytes::from_static(data),
            }],
        );
        async move { peers::post_raw(to, &message).await }
    };
    let before = rejoins().await;
    let nonce = u64::from(std::process::id()) << 20;
    assert_eq!(ping(nonce, b"").await, 200);
    assert_eq!(rejoins().await, before, "a plain ping is no news");
    // "I count you out." A word that comes within a call timeout of the peer's answer to
    // this node's last rejoin (its start's) was sent before it and is ignored: the word is
    // said again, as a peer's pings say it each heartbeat.
    let next = std::sync::atomic::AtomicU64::new(nonce + 1);
    eventually(
        "the owner rejoined its peers",
        Duration::from_secs(5),
        || async {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(ping(n, b"\x01").await, 200);
            rejoins().await > before
        },
    )
    .await;
    let m = metrics_text(admin).await;
    assert!(
        m.contains("tollgate_peer_quarantined 0\n"),
        "the quarantine ended"
    );
    assert!(m.contains("tollgate_peers_live 3\n"));
}
