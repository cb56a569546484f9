//! Shared by the simulator test files: running `tollgate simulate`, reading its JSON report,
//! and the invariants every report must satisfy.
#![allow(dead_code)]

use std::process::{Command, Output};

use serde_json::Value;

/// The design document's figures for the default trace.
pub const SEED_BOUND: u64 = 10_095;
pub const SEED_STATIC: u64 = 8_997;
pub const SEED_LEASE: u64 = 10_058;
pub const SEED_LEASE_CALLS_PER_MILLE: f64 = 566.0;
/// Route by key on the default trace: the key `k` is owned by node 1 (weight 20 %), so the
/// other 80.2 % of requests ask it.
pub const OWNER_PEER_PER_REQ: &str = "0.802";

pub fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("running tollgate simulate")
}

/// `simulate --json ARGS`, parsed; panics with stderr when the run fails.
pub fn report(args: &[&str]) -> Value {
    let out = simulate(&[&["--json"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("simulate {args:?}: not JSON ({e}): {stderr}"))
}

pub fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not an unsigned integer in {v}"))
}

pub fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

pub fn rows(r: &Value) -> &Vec<Value> {
    r["rows"].as_array().expect("`rows` is an array")
}

pub fn row<'a>(r: &'a Value, design: &str) -> &'a Value {
    rows(r)
        .iter()
        .find(|row| row["design"] == design)
        .unwrap_or_else(|| panic!("no `{design}` row in {}", r["rows"]))
}

/// Gossip's stated bound on over-admission (`designs_peer.rs`): with staleness
/// `S = interval + delay`, at any instant the fleet has admitted at most what the policy
/// allows by then plus `U = min(offered arrivals in S, (N − 1)·(burst + ⌊limit·S⌋))`.
pub fn gossip_slack(r: &Value, interval_ns: u64) -> u64 {
    let s = u128::from(interval_ns + u(r, "peer_delay_ns"));
    let offered_in_s = (s as f64 * f(r, "offered_per_second") / 1e9).ceil() as u64;
    let per_node =
        u(r, "burst") + (s * u128::from(u(r, "limit_per_second")) / 1_000_000_000) as u64;
    offered_in_s.min((u(r, "nodes") - 1) * per_node)
}

/// The design names of a report run with the default gossip intervals.
pub const DESIGNS: [&str; 8] = [
    "central",
    "static L/N",
    "lease x20 (seed)",
    "tollgate lease",
    "owner",
    "gossip 5ms",
    "gossip 20ms",
    "gossip 100ms",
];

/// What every report must satisfy, whatever the trace: the bound is the most a GCRA of the
/// quota can admit over the trace, no design but gossip admits more than it (nor ever gets
/// ahead of the policy), central and owner admit exactly it, gossip stays within
/// `gossip_slack`, and each row's numbers agree with each other.
pub fn check_invariants(args: &[&str], r: &Value) {
    let offered = u(r, "offered");
    let bound = u(r, "bound");
    let burst = u(r, "burst");
    let limit = u(r, "limit_per_second");
    let rate = f(r, "offered_per_second");
    assert!(
        bound <= offered,
        "{args:?}: bound {bound} > offered {offered}"
    );

    // Recompute the bound from the trace's shape: arrivals every `interval` ns from 0.
    let interval = (1e9 / rate).round().max(1.0) as u128;
    let end = (offered as u128 - 1) * interval;
    let expected = (burst + (end * limit as u128 / 1_000_000_000) as u64).min(offered);
    assert_eq!(bound, expected, "{args:?}: bound");

    let names: Vec<&str> = rows(r)
        .iter()
        .map(|row| row["design"].as_str().unwrap())
        .collect();
    if args.contains(&"--gossip-interval") {
        assert_eq!(names[..5], DESIGNS[..5], "{args:?}");
        assert!(
            names[5..].iter().all(|n| n.starts_with("gossip ")),
            "{args:?}"
        );
    } else {
        assert_eq!(names, DESIGNS, "{args:?}");
    }

    // Any 100 ms window: at most burst + (100 ms + 50 ms) * rate, 50 ms being how long a
    // leased cell (the seed's, or tollgate's at the default lease_ttl) may outlive its
    // conformance.
    let window_cap = burst + (limit as f64 * 0.150).ceil() as u64;
    for row in rows(r) {
        let design = row["design"].as_str().unwrap();
        let admitted = u(row, "admitted");
        // Gossip may run ahead of the policy by its slack; no other design ever does.
        let (slack, window_cap) = match row["gossip_interval_ns"].as_u64() {
            Some(interval) => {
                let slack = gossip_slack(r, interval);
                (slack, burst + limit / 10 + slack)
            }
            None => {
                assert!(row["gossip_interval_ns"].is_null(), "{args:?}: {design}");
                (0, window_cap)
            }
        };
        assert!(
            admitted <= bound + slack,
            "{args:?}: {design} admitted {admitted} > bound {bound} + {slack}"
        );
        assert!(
            u(row, "peak_over_policy") <= slack,
            "{args:?}: {design} ran {} ahead of the policy, more than {slack}",
            u(row, "peak_over_policy")
        );
        let bins: Vec<u64> = row["bins"]
            .as_array()
            .expect("`bins` is an array")
            .iter()
            .map(|b| b.as_u64().unwrap())
            .collect();
        assert_eq!(
            bins.iter().sum::<u64>(),
            admitted,
            "{args:?}: {design} bins"
        );
        assert_eq!(
            bins.iter().copied().max().unwrap_or(0),
            u(row, "worst_100ms"),
            "{args:?}: {design} worst_100ms"
        );
        assert!(
            u(row, "worst_100ms") <= window_cap,
            "{args:?}: {design} admitted {} in 100 ms, more than {window_cap}",
            u(row, "worst_100ms")
        );
        let pct = (admitted as f64 / bound as f64 - 1.0) * 100.0;
        assert!(
            (f(row, "vs_bound_pct") - pct).abs() < 1e-9,
            "{args:?}: {design} vs_bound_pct"
        );
        let calls = f(row, "calls_per_request");
        assert!(
            (0.0..=1.0).contains(&calls),
            "{args:?}: {design} calls/req {calls}"
        );
        let peer = f(row, "peer_msgs_per_request");
        assert!(peer >= 0.0, "{args:?}: {design} peer msgs/req {peer}");
    }
    let central = row(r, "central");
    assert_eq!(
        u(central, "admitted"),
        bound.min(offered),
        "{args:?}: central"
    );
    assert_eq!(f(central, "calls_per_request"), 1.0, "{args:?}: central");
    assert_eq!(
        f(row(r, "static L/N"), "calls_per_request"),
        0.0,
        "{args:?}: static L/N makes no store call"
    );
    // Route by key: the owner's exact limiter decides every request, as central's store.
    let owner = row(r, "owner");
    assert_eq!(owner["bins"], central["bins"], "{args:?}: owner");
    assert_eq!(f(owner, "calls_per_request"), 0.0, "{args:?}: owner");
    // At most one peer call per request, none for the owner's own requests.
    assert!(f(owner, "peer_msgs_per_request") <= 1.0, "{args:?}: owner");
    for g in &rows(r)[5..] {
        assert_eq!(
            f(g, "calls_per_request"),
            0.0,
            "{args:?}: {g} makes no store call"
        );
    }
}

pub fn check_trace(args: &[&str]) -> Value {
    let all = [&["--reps", "1"], args].concat();
    let r = report(&all);
    check_invariants(&all, &r);
    r
}
