//! `tollgate simulate` as users run it: the default run reproduces the design document's
//! figures, and no design ever admits more than the policy allows. (`--plot` and bad
//! options: `simulate_cli.rs`.)

use std::process::{Command, Output};

use serde_json::Value;

/// The design document's figures for the default trace.
const SEED_BOUND: u64 = 10_095;
const SEED_STATIC: u64 = 8_997;
const SEED_LEASE: u64 = 10_058;
const SEED_LEASE_CALLS_PER_MILLE: f64 = 566.0;

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("running tollgate simulate")
}

/// `simulate --json ARGS`, parsed; panics with stderr when the run fails.
fn report(args: &[&str]) -> Value {
    let out = simulate(&[&["--json"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("simulate {args:?}: not JSON ({e}): {stderr}"))
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not an unsigned integer in {v}"))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

fn rows(r: &Value) -> &Vec<Value> {
    r["rows"].as_array().expect("`rows` is an array")
}

fn row<'a>(r: &'a Value, design: &str) -> &'a Value {
    rows(r)
        .iter()
        .find(|row| row["design"] == design)
        .unwrap_or_else(|| panic!("no `{design}` row in {}", r["rows"]))
}

/// What every report must satisfy, whatever the trace: the bound is the most a GCRA of the
/// quota can admit over the trace, no design admits more than it, central admits exactly
/// it, and each row's numbers agree with each other.
fn check_invariants(args: &[&str], r: &Value) {
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
    assert_eq!(
        names,
        [
            "central",
            "static L/N",
            "lease x20 (seed)",
            "tollgate lease"
        ],
        "{args:?}"
    );

    // Any 100 ms window: at most burst + (100 ms + 50 ms) * rate, 50 ms being how long a
    // leased cell (the seed's, or tollgate's at the default lease_ttl) may outlive its
    // conformance.
    let window_cap = burst + (limit as f64 * 0.150).ceil() as u64;
    for row in rows(r) {
        let design = row["design"].as_str().unwrap();
        let admitted = u(row, "admitted");
        assert!(
            admitted <= bound,
            "{args:?}: {design} admitted {admitted} > bound {bound}"
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
}

#[test]
fn default_run_reproduces_the_design_document() {
    let r = report(&[]);
    check_invariants(&[], &r);
    assert_eq!(u(&r, "nodes"), 8);
    assert_eq!(
        r["weights"],
        serde_json::json!([40, 20, 10, 10, 5, 5, 5, 5])
    );
    assert_eq!(u(&r, "offered"), 20_000);
    assert_eq!(f(&r, "offered_per_second"), 2_000.0);
    assert_eq!(u(&r, "limit_per_second"), 1_000);
    assert_eq!(u(&r, "burst"), 96);
    assert_eq!(u(&r, "seed"), 0x9E37_79B9_7F4A_7C15);
    assert_eq!(u(&r, "bound"), SEED_BOUND);

    let central = row(&r, "central");
    assert_eq!(u(central, "admitted"), SEED_BOUND);
    assert_eq!(f(central, "vs_bound_pct"), 0.0);
    assert_eq!(f(central, "calls_per_request"), 1.0);

    assert_eq!(u(row(&r, "static L/N"), "admitted"), SEED_STATIC);

    let seed = row(&r, "lease x20 (seed)");
    assert_eq!(u(seed, "admitted"), SEED_LEASE);
    assert_eq!(
        (f(seed, "calls_per_request") * 1000.0).round(),
        SEED_LEASE_CALLS_PER_MILLE,
        "{seed}"
    );

    let lease = row(&r, "tollgate lease");
    let (admitted, pct, calls) = (
        u(lease, "admitted"),
        f(lease, "vs_bound_pct"),
        f(lease, "calls_per_request"),
    );
    assert!(admitted <= SEED_BOUND, "tollgate lease admitted {admitted}");
    assert!(
        pct.abs() <= 0.5,
        "tollgate lease is {pct:+.2}% off the bound"
    );
    assert!(calls <= 0.1, "tollgate lease makes {calls:.3} calls/req");
}

#[test]
fn table_output_shows_the_same_figures() {
    let out = simulate(&["--reps", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("limit bound 10095 of 20000 offered"),
        "{text}"
    );
    let line = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{text}"))[name.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(line("central")[..4], ["10095", "+0.0%", "195", "1.000"]);
    assert_eq!(line("static L/N")[..2], ["8997", "-10.9%"]);
    assert_eq!(
        line("lease x20 (seed)")[..4],
        ["10058", "-0.4%", "167", "0.566"]
    );
    assert!(line("tollgate lease").len() >= 5, "{text}");
}

fn check_trace(args: &[&str]) -> Value {
    let all = [&["--reps", "1"], args].concat();
    let r = report(&all);
    check_invariants(&all, &r);
    r
}

#[test]
fn three_equal_nodes() {
    let r = check_trace(&["--nodes", "3"]);
    assert_eq!(u(&r, "nodes"), 3);
    assert_eq!(r["weights"], serde_json::json!([1, 1, 1]));
}

#[test]
fn heavily_skewed_weights() {
    let r = check_trace(&["--weights", "70,20,10"]);
    assert_eq!(u(&r, "nodes"), 3);
    // Under skew the static split strands the idle nodes' shares.
    assert!(u(row(&r, "static L/N"), "admitted") < u(&r, "bound"));
}

#[test]
fn fourfold_overload() {
    let r = check_trace(&["--load", "4"]);
    assert_eq!(f(&r, "offered_per_second"), 4_000.0);
    assert!(u(&r, "bound") < u(&r, "offered"));
}

#[test]
fn another_seed() {
    let r = check_trace(&["--seed", "12345"]);
    assert_eq!(u(&r, "seed"), 12_345);
    let hex = check_trace(&["--seed", "0x3039"]);
    assert_eq!(r["rows"][1]["admitted"], hex["rows"][1]["admitted"]);
}

#[test]
fn normal_load_admits_everything_centrally() {
    let r = check_trace(&["--normal"]);
    assert_eq!(f(&r, "offered_per_second"), 500.0);
    assert_eq!(u(&r, "bound"), u(&r, "offered"));
    assert_eq!(u(row(&r, "central"), "admitted"), u(&r, "offered"));
}

#[test]
fn small_limit_and_burst() {
    let r = check_trace(&["--limit", "200", "--burst", "10"]);
    assert_eq!(u(&r, "limit_per_second"), 200);
    assert_eq!(u(&r, "burst"), 10);
    check_trace(&["--nodes", "3", "--limit", "200", "--burst", "10"]);
}

#[test]
fn long_lived_big_leases_stay_under_the_bound() {
    check_trace(&[
        "--lease-max",
        "500",
        "--lease-ttl",
        "50ms",
        "--lease-target",
        "50ms",
        "--requests",
        "5000",
    ]);
}

#[test]
fn lease_knobs_at_the_ends_of_their_ranges_run() {
    // The bounds themselves are accepted (the config takes them too), and whatever the
    // knobs, no design admits more than the policy allows.
    for args in [
        &["--lease-max", "1"][..],
        &["--lease-max", "100000"],
        &["--lease-ttl", "1ms", "--lease-target", "1ms"],
        &["--lease-ttl", "1h", "--lease-target", "1ms"],
        &[
            "--lease-ttl",
            "1h",
            "--lease-target",
            "1h",
            "--lease-max",
            "100000",
        ],
    ] {
        let r = report(&[&["--reps", "1", "--requests", "2000"], args].concat());
        let bound = u(&r, "bound");
        for row in rows(&r) {
            assert!(
                u(row, "admitted") <= bound,
                "{args:?}: {} admitted more than the bound {bound}",
                row["design"]
            );
        }
    }
}
