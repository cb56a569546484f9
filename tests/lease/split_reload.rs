//! A reload while N changes: the reloaded limiter is built at the node's N and shares the
//! kept policies' L/N tables with the old one, so a change of N must land on the limiter
//! that runs after the swap — not on the old one while the new one keeps the old N over
//! states rescaled to the new (a hostile review's finding: a fresh client then got the N = 1
//! share at N = 2, and a spent one 5 more). `server/reload.rs` holds the limiter's nodes
//! lock across the reload and the swap; membership sets N through `set_running_nodes`,
//! which takes it.

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::{HeaderMap, Method};
use tollgate::limit::clock::ManualClock;
use tollgate::limit::{Limiter, set_running_nodes};

const TEXT: &str = r#"
[server]
listen = "127.0.0.1:0"
[store]
kind = "memory"
[cluster]
expected_nodes = 1
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[policies.per_ip]
key = ["ip"]
algorithm = "sliding_window"
limit = 10
period = "1m"
site = "split"
[[routes]]
name = "api"
upstream = "app"
policies = ["per_ip"]
"#;

async fn admits(l: &Limiter, ip: u8, n: usize) -> usize {
    let route: Arc<str> = Arc::from("api");
    let (method, headers) = (Method::GET, HeaderMap::new());
    let mut ok = 0;
    for _ in 0..n {
        let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, ip));
        ok += usize::from(
            l.check(0, &route, client, &method, &headers)
                .await
                .admitted(),
        );
    }
    ok
}

/// N changes from 1 to 2 while a reload is between building its limiter and swapping it
/// in, as `server/reload.rs` does it (under the nodes lock). The change waits for the swap
/// and lands on the new limiter: a fresh client gets the N = 2 share, 5 of 10, and the
/// client that spent all of its N = 1 share has spent all of its N = 2 share.
#[tokio::test(flavor = "current_thread")]
async fn a_change_of_n_during_a_reload_lands_on_the_new_limiter() {
    let origin = Path::new("split_reload.toml");
    let raw = tollgate::config::parse_str(TEXT, origin).unwrap();
    let cfg = tollgate::config::validate(raw, origin).unwrap();
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    let mut registry = prometheus_client::registry::Registry::default();
    let old = Limiter::new(&cfg, Arc::new(clock.clone()), &mut registry).unwrap();
    assert_eq!(admits(&old, 1, 20).await, 10, "the whole limit at N = 1");
    let running = Arc::new(ArcSwap::from_pointee(old));

    let lock = running.load().nodes_lock();
    let held = lock.lock().unwrap();
    let (new, _) = running.load().reload(&cfg).unwrap();
    let membership = {
        let running = running.clone();
        std::thread::spawn(move || set_running_nodes(&running, NonZeroU32::new(2).unwrap()))
    };
    // The change must wait for the swap: give it time to land early if it can.
    let started = Instant::now();
    while !membership.is_finished() && started.elapsed() < Duration::from_millis(200) {
        std::thread::yield_now();
    }
    running.store(Arc::new(new));
    drop(held);
    assert!(
        membership.join().unwrap(),
        "N changed 1 -> 2 on the running limiter"
    );

    let now = running.load_full();
    assert_eq!(now.nodes().get(), 2);
    assert_eq!(admits(&now, 2, 20).await, 5, "a fresh client: 10 / 2");
    assert_eq!(admits(&now, 1, 20).await, 0, "all of 10 spent is all of 5");
}
