use super::*;
use crate::config::{Balance, Retry};

fn upstream(urls: usize, outlier: Outlier) -> Upstream {
    Upstream {
        name: "app".into(),
        urls: (0..urls)
            .map(|i| format!("http://10.0.0.{i}:80").parse().unwrap())
            .collect(),
        max_connections: std::num::NonZeroUsize::MIN,
        tls: None,
        health: None,
        protocol: Default::default(),
        weights: vec![1; urls],
        balance: Balance::RoundRobin,
        retry: Retry {
            retries: 0,
            on_status: vec![],
            budget_ratio: 0.2,
            budget_min_per_second: 0,
            backoff: Duration::from_millis(25),
        },
        outlier,
    }
}

fn outlier(consecutive_5xx: u32, max_ejected_percent: u32) -> Outlier {
    Outlier {
        consecutive_5xx,
        consecutive_connect_failures: 1,
        base_ejection: Duration::from_secs(2),
        max_ejection: Duration::from_secs(5),
        max_ejected_percent,
    }
}

fn backends(urls: usize, o: Outlier) -> Backends {
    let mut registry = prometheus_client::registry::Registry::default();
    Backends::new(
        &upstream(urls, o),
        &UpstreamMetrics::register(&mut registry),
    )
}

#[test]
fn five_5xx_in_a_row_eject_and_a_success_resets() {
    let b = backends(4, outlier(3, 50));
    for _ in 0..2 {
        b.record_at(0, Outcome::Answered(503), 1000);
    }
    b.record_at(0, Outcome::Answered(200), 1000);
    b.record_at(0, Outcome::Answered(500), 1000);
    assert!(b.is_in(0, 1000), "a success between breaks the run");
    b.record_at(0, Outcome::Answered(502), 1000);
    b.record_at(0, Outcome::Answered(504), 1000);
    assert!(!b.is_in(0, 1000), "3 in a row eject");
    assert!(!b.is_in(0, 2999));
    assert!(b.is_in(0, 3000), "back after base_ejection (2 s)");
    // 4xx are the client's: never counted.
    for _ in 0..10 {
        b.record_at(1, Outcome::Answered(429), 1000);
    }
    assert!(b.is_in(1, 1000));
}

#[test]
fn ejections_in_a_row_grow_and_are_forgiven() {
    let b = backends(2, outlier(0, 50));
    b.record_at(0, Outcome::Unreachable, 0);
    assert!(!b.is_in(0, 1999) && b.is_in(0, 2000), "first: 2 s");
    b.record_at(0, Outcome::Unreachable, 2000);
    assert!(
        !b.is_in(0, 5999) && b.is_in(0, 6000),
        "second in a row: 4 s"
    );
    b.record_at(0, Outcome::Broken, 6000);
    assert!(
        b.is_in(0, 11_000),
        "third: 6 s, capped at max_ejection (5 s)"
    );
    assert!(!b.is_in(0, 10_999));
    // Back at 11 s; 4 s (two base intervals) in service forgive two of the three: the
    // next ejection is the second in a row again.
    b.record_at(0, Outcome::Unreachable, 15_000);
    assert!(!b.is_in(0, 18_999) && b.is_in(0, 19_000), "4 s");
}

#[test]
fn at_most_the_share_is_ejected() {
    // 4 URLs, 50 %: two may be out, a third failing one stays in.
    let b = backends(4, outlier(0, 50));
    for i in 0..3 {
        b.record_at(i, Outcome::Unreachable, 100);
    }
    let out: Vec<_> = (0..4).filter(|&i| !b.is_in(i, 100)).collect();
    assert_eq!(out, vec![0, 1]);
    // Once one is back, the third can go.
    b.record_at(2, Outcome::Unreachable, 2100);
    assert!(!b.is_in(2, 2100));
    // A small share still allows one URL out; 0 % turns ejection off.
    let b = backends(3, outlier(0, 10));
    b.record_at(0, Outcome::Unreachable, 0);
    b.record_at(1, Outcome::Unreachable, 0);
    assert_eq!((0..3).filter(|&i| !b.is_in(i, 0)).count(), 1);
    let b = backends(3, outlier(0, 0));
    b.record_at(0, Outcome::Unreachable, 0);
    assert!(b.is_in(0, 0));
}

#[test]
fn in_flight_counts_until_dropped() {
    let b = backends(2, outlier(0, 10));
    let one = b.start(1);
    let two = b.start(1);
    assert_eq!((b.in_flight(0), b.in_flight(1)), (0, 2));
    drop(one);
    assert_eq!(b.in_flight(1), 1);
    drop(two);
    assert_eq!(b.in_flight(1), 0);
}

#[test]
fn a_client_body_fault_neither_counts_nor_breaks_a_run() {
    let mut o = outlier(0, 50);
    o.consecutive_connect_failures = 3;
    let b = backends(2, o);
    // Any number of the client's faults: the URL stays in.
    for fault in [
        BodyFault::Malformed,
        BodyFault::Gone,
        BodyFault::Stalled(Duration::from_secs(1)),
        BodyFault::TooLarge(10),
    ] {
        for _ in 0..5 {
            b.client_body_error(fault);
        }
    }
    assert!(b.is_in(0, 0) && b.is_in(1, 0));
    // Nor do they end the URL's own run of failures: they say nothing about it.
    b.record_at(0, Outcome::Broken, 0);
    b.record_at(0, Outcome::Broken, 0);
    b.client_body_error(BodyFault::Gone);
    assert!(b.is_in(0, 0));
    b.record_at(0, Outcome::Broken, 0);
    assert!(!b.is_in(0, 0), "three broken in a row eject");
}
