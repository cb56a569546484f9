//! Lease books are bounded like the local site's keys: a flood of distinct keys holds at
//! most `max_keys` books per policy on a node (live ones evicted once idle ones are gone),
//! and every key still gets its answer.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::common::config::ConfigBuilder;
use crate::common::*;
use http::{HeaderMap, Method};
use tollgate::limit::clock::ManualClock;

/// A leased policy keyed by client IP on the memory store (this process is the
/// coordinator), holding at most `max_keys` books.
fn config(max_keys: usize) -> String {
    let extra = format!("burst = 5\nsite = \"lease\"\nmax_keys = {max_keys}");
    // The route must come after the policy table it names.
    ConfigBuilder::new("")
        .text("[store]\nkind = \"memory\"\n")
        .upstream(([127, 0, 0, 1], 9).into())
        .policy("leased", &["ip"], "gcra", 10, "1s", &extra)
        .app_route(
            "api",
            "match = { path_prefix = \"/\" }\npolicies = [\"leased\"]",
        )
        .build()
}

/// 20 000 clients, one request each, on a frozen clock: every book keeps the cells of its
/// first grant (none is idle), so only eviction can bound them. Before, books were never
/// dropped while live: 20 000 books.
#[tokio::test]
async fn a_flood_of_distinct_keys_keeps_the_books_bounded() {
    const MAX_KEYS: usize = 640;
    let clock = ManualClock::new();
    let gw = Gateway::start_with_clock(&config(MAX_KEYS), Arc::new(clock)).await;
    let route: Arc<str> = Arc::from("api");
    let lease = gw.limiter.lease().clone();
    for i in 0..20_000u32 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i));
        let a = gw
            .limiter
            .check(0, &route, ip, &Method::GET, &HeaderMap::new())
            .await;
        assert!(a.admitted(), "client {i}: a new key starts full");
        assert!(
            lease.book_count() <= MAX_KEYS,
            "{} books",
            lease.book_count()
        );
    }
    // About 20 000 − 640 evictions: each new key past the bound costs about one.
    assert!(lease.evictions() >= 19_000, "{}", lease.evictions());
}

/// The evictions are exported, as the local site's are. (Needs the limiter to hand the
/// lease site its gauges: `LeaseSite::redis(..)` / `memory(..)` `.with_gauges(gauges.clone())`
/// in `limiter.rs`.)
#[tokio::test]
async fn evictions_are_counted_in_the_metric() {
    let gw = Gateway::start_with_clock(&config(64), Arc::new(ManualClock::new())).await;
    let route: Arc<str> = Arc::from("api");
    for i in 0..1_000u32 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i));
        let headers = HeaderMap::new();
        gw.limiter
            .check(0, &route, ip, &Method::GET, &headers)
            .await;
    }
    let evicted = gw.limiter.lease().evictions() as f64;
    assert!(evicted > 0.0);
    let metrics = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let line = "tollgate_limiter_evictions_total{policy=\"leased\"}";
    assert_eq!(metric_sum(&metrics, line), evicted, "{metrics}");
}
