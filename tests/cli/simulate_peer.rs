//! `tollgate simulate`'s peer designs: route by key (`owner`) and gossip counters, against
//! central and the gossip bound stated in `designs_peer.rs`.

use crate::common::simulate::*;

#[test]
fn owner_admits_exactly_what_central_admits() {
    let r = report(&["--reps", "1"]);
    let (central, owner) = (row(&r, "central"), row(&r, "owner"));
    assert_eq!(u(owner, "admitted"), SEED_BOUND);
    assert_eq!(owner["bins"], central["bins"]);
    assert_eq!(u(owner, "peak_over_policy"), 0);
    assert_eq!(f(owner, "calls_per_request"), 0.0, "no store call");
    let peer = f(owner, "peer_msgs_per_request");
    assert_eq!(format!("{peer:.3}"), OWNER_PEER_PER_REQ, "{owner}");
    // Fewer than one call per request: the owner's own share costs nothing.
    assert!(peer > 0.0 && peer < 1.0, "{owner}");
}

#[test]
fn gossip_over_admission_grows_with_the_interval_within_its_bound() {
    let r = report(&["--reps", "1"]);
    check_invariants(&[], &r);
    let bound = u(&r, "bound");
    let mut previous: Option<(u64, u64)> = None;
    for (design, interval_ms) in DESIGNS[5..].iter().zip([5u64, 20, 100]) {
        let g = row(&r, design);
        assert_eq!(u(g, "gossip_interval_ns"), interval_ms * 1_000_000);
        let (admitted, peak) = (u(g, "admitted"), u(g, "peak_over_policy"));
        let over = admitted.saturating_sub(bound);
        let slack = gossip_slack(&r, interval_ms * 1_000_000);
        // (N − 1)·(burst + ⌊limit·S⌋) and offered·S with N = 8, burst 96, 1 000/s, 2 000/s
        // offered, S = interval + 1 ms: min(714, 12), min(819, 42), min(1379, 202).
        assert_eq!(
            slack,
            [12, 42, 202][DESIGNS[5..].iter().position(|d| d == design).unwrap()]
        );
        assert!(
            over <= peak && peak <= slack,
            "{design}: over {over}, peak {peak}, bound {slack}"
        );
        if let Some((over_before, peak_before)) = previous {
            assert!(over >= over_before, "{design}: over {over} < {over_before}");
            assert!(peak >= peak_before, "{design}: peak {peak} < {peak_before}");
        }
        previous = Some((over, peak));
    }
    // It does grow: slow gossip runs ahead of the policy, fast gossip barely does.
    let peak = |d: &str| u(row(&r, d), "peak_over_policy");
    assert!(peak("gossip 100ms") > 0, "{}", r["rows"]);
    assert!(peak("gossip 100ms") > peak("gossip 5ms"), "{}", r["rows"]);
    assert!(
        u(row(&r, "gossip 100ms"), "admitted") > bound,
        "{}",
        r["rows"]
    );
}

#[test]
fn peer_messages_are_counted() {
    let r = report(&["--reps", "1"]);
    let (nodes, offered) = (u(&r, "nodes"), u(&r, "offered") as f64);
    let seconds = offered / f(&r, "offered_per_second");
    assert!(
        f(row(&r, "owner"), "peer_msgs_per_request") > 0.5,
        "{}",
        r["rows"]
    );
    let mut previous = f64::INFINITY;
    for (design, interval_ms) in DESIGNS[5..].iter().zip([5.0, 20.0, 100.0]) {
        let peer = f(row(&r, design), "peer_msgs_per_request");
        // At most one push per node per interval (plus the one at the phase before the
        // first interval ends), each to N − 1 peers.
        let pushes = nodes as f64 * ((seconds * 1000.0 / interval_ms).ceil() + 1.0);
        let most = pushes * (nodes - 1) as f64 / offered;
        assert!(
            peer > 0.0 && peer <= most,
            "{design}: {peer} peer msgs/req, most {most}"
        );
        assert!(
            peer < previous,
            "{design}: slower gossip sends fewer messages"
        );
        previous = peer;
    }
    // For the non-peer designs the column is zero.
    for design in &DESIGNS[..4] {
        assert_eq!(f(row(&r, design), "peer_msgs_per_request"), 0.0, "{design}");
    }
}

#[test]
fn one_node_has_no_peers() {
    let r = check_trace(&["--nodes", "1"]);
    let central = row(&r, "central");
    for design in &DESIGNS[4..] {
        let d = row(&r, design);
        assert_eq!(d["bins"], central["bins"], "{design} alone is exact");
        assert_eq!(f(d, "peer_msgs_per_request"), 0.0, "{design}");
    }
}

#[test]
fn gossip_bound_holds_on_other_traces() {
    // check_invariants asserts the bound (total, at every instant, and per 100 ms bin);
    // these traces stress it: few nodes and long intervals, heavy overload, a small limit
    // over many nodes, no delay, a delay longer than the interval.
    for args in [
        &["--nodes", "3", "--gossip-interval", "1ms,50ms,1s"][..],
        &["--load", "4", "--gossip-interval", "5ms,100ms,1s"],
        &["--limit", "200", "--burst", "10", "--nodes", "32"],
        &["--gossip-interval", "1ms", "--peer-delay", "0s"],
        &["--gossip-interval", "20ms", "--peer-delay", "30ms"],
    ] {
        check_trace(&[&["--requests", "5000"], args].concat());
    }
}
