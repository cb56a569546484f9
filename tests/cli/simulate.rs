//! `tollgate simulate` as users run it: the default run reproduces the design document's
//! figures and no design but gossip ever admits more than the policy allows. (Route by key and
//! gossip: `simulate_peer.rs`; `--plot` and bad options: `simulate_cli.rs`.)

use crate::common::simulate::*;

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
    assert!(line("tollgate lease").len() >= 6, "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("calls/req") && l.contains("peer msgs/req")),
        "{text}"
    );
    // admitted, vs bound, worst100ms, calls/req, peer msgs/req.
    assert_eq!(
        line("owner")[..5],
        ["10095", "+0.0%", "195", "0.000", OWNER_PEER_PER_REQ]
    );
    for gossip in &DESIGNS[5..] {
        let cells = line(gossip);
        assert_eq!(cells[3], "0.000", "{gossip}: {text}");
        assert_ne!(cells[4], "0.000", "{gossip}: {text}");
    }
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
        // (Gossip, which may exceed the bound by its slack, has no lease knob.)
        for row in rows(&r)
            .iter()
            .filter(|row| row["gossip_interval_ns"].is_null())
        {
            assert!(
                u(row, "admitted") <= bound,
                "{args:?}: {} admitted more than the bound {bound}",
                row["design"]
            );
        }
    }
}
