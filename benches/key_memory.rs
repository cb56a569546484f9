//! Memory a limited key costs, and that it follows the live keys under churn (issue 47's
//! soak: `tollgate_limiter_keys` and RSS grew with every client ever seen). The limiter in
//! this process on a manual clock, behind an allocator wrapper that keeps the bytes in use
//! (allocated minus freed), so the figures are the limiter's own heap, not RSS's pages.
//!
//! Rows:
//! - `per key`: bytes in use per key held, after `KEYS` distinct clients of one local
//!   policy, one request each, the clock frozen (every key live): an `ip` key (its text
//!   fits a key's inline 24 bytes) and a `header:` key (a keyed hash: 32 hex digits and
//!   the policy's name, on the heap).
//! - `churn`: a new client every request, `PER_PERIOD` of them a period of the policy
//!   (each key is below full for a tenth of it: one cell of 10 a minute), for `PERIODS`
//!   periods; the keys
//!   held and the bytes in use at the end of each tenth of the run. Flat once the churn is
//!   steady, where before the sweep they grew with every client.
//!
//! Run: `cargo bench --bench key_memory` (a minute). `cargo test --benches` runs a tenth
//! and checks that the churn rows stay near the live keys. Byte counts depend on the
//! allocator's size classes only through the requested sizes counted here, so they repeat
//! from run to run.

use std::alloc::{GlobalAlloc, Layout};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method};
use mimalloc::MiMalloc;
use tollgate::limit::Limiter;
use tollgate::limit::clock::ManualClock;

/// Keeps the bytes in use, then hands each call to mimalloc.
struct InUse;

static IN_USE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed unchanged to mimalloc, a correct allocator; the counter is
// an atomic that never allocates.
unsafe impl GlobalAlloc for InUse {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        IN_USE.fetch_add(layout.size() as i64, Relaxed);
        unsafe { MiMalloc.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        IN_USE.fetch_add(layout.size() as i64, Relaxed);
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size() as i64, Relaxed);
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        IN_USE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: InUse = InUse;

/// Distinct clients of the per-key rows, under `cargo bench`.
const KEYS: u32 = 200_000;
/// New clients a period in the churn row, and periods it runs, under `cargo bench`.
const PER_PERIOD: u32 = 20_000;
const PERIODS: u32 = 120;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[account]
header = "x-api-key"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1m"
[policies.per_user]
key = ["header:x-user"]
algorithm = "gcra"
limit = 10
period = "1m"
[[routes]]
name = "ip"
upstream = "app"
policies = ["per_ip"]
[[routes]]
name = "user"
match = { path_prefix = "/user" }
upstream = "app"
policies = ["per_user"]
"#;

fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn main() {
    let scale = match std::env::args().any(|a| a == "--bench") {
        true => 1,
        false => 10,
    };
    let origin = Path::new("benches/key_memory.rs");
    let raw = tollgate::config::parse_str(CONFIG, origin).expect("the bench config parses");
    let config = tollgate::config::validate(raw, origin).expect("the bench config is valid");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let method = Method::GET;
    let ip_route: Arc<str> = Arc::from("ip");
    let user_route: Arc<str> = Arc::from("user");

    println!("| row | keys held | bytes in use | bytes a key |");
    println!("|---|---|---|---|");
    for (name, route, index) in [
        ("per key: ip", &ip_route, 0),
        ("per key: header", &user_route, 1),
    ] {
        let clock = ManualClock::new();
        let mut registry = prometheus_client::registry::Registry::default();
        let limiter =
            Limiter::new(&config, Arc::new(clock.clone()), &mut registry).expect("a limiter");
        let before = IN_USE.load(Relaxed);
        let keys = KEYS / scale;
        let mut headers = HeaderMap::new();
        for i in 0..keys {
            headers.insert("x-user", HeaderValue::from(i));
            let a = rt.block_on(limiter.check(index, route, client(i), &method, &headers));
            assert!(a.admitted());
        }
        let held = limiter.local().key_count(index);
        let bytes = IN_USE.load(Relaxed) - before;
        assert_eq!(held, keys as usize, "{name}: every key is live");
        println!(
            "| {name} | {held} | {bytes} | {:.1} |",
            bytes as f64 / held as f64
        );
    }

    let clock = ManualClock::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let limiter = Limiter::new(&config, Arc::new(clock.clone()), &mut registry).expect("a limiter");
    let per_period = PER_PERIOD / scale;
    let total = per_period * PERIODS;
    let step = Duration::from_secs(60) / per_period;
    let before = IN_USE.load(Relaxed);
    let headers = HeaderMap::new();
    println!();
    println!("churn: a new client every request, {per_period} a period of 1m, {PERIODS} periods");
    println!();
    println!("| clients seen | keys held | bytes in use |");
    println!("|---|---|---|");
    for i in 0..total {
        let a = rt.block_on(limiter.check(0, &ip_route, client(i), &method, &headers));
        assert!(a.admitted());
        clock.advance(step);
        if (i + 1) % (total / 10) == 0 {
            let held = limiter.local().key_count(0);
            println!("| {} | {held} | {} |", i + 1, IN_USE.load(Relaxed) - before);
            // One request spends one cell of 10 a minute: a key is back to full 6 s after
            // it, so about a tenth of a period's clients are live. The sweep holds each of
            // the 64 tables near 4/3 of its live keys, plus up to 12.
            let live = per_period as usize / 10;
            assert!(
                held <= live * 4 / 3 + 64 * 13,
                "{held} keys held with {live} live"
            );
        }
    }
}
