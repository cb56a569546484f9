//! The top-keys summaries (`limit/top/`) under key churn: what recording one decision costs
//! the limit step when every denial is from a key never seen before (each one replaces the
//! least entry of a full table), beside the hot key of an attack (one key, always found)
//! and an allowed decision of an enforcing policy (its key hashed into the minute's keys
//! seen and allowed count, lock-free, then one atomic read when nothing was denied this
//! minute, a lookup when something was).
//!
//! Why: every decision of every site is recorded here (`check_report.rs`), so the 429 path
//! pays for it, and a flood of fresh keys (rotating IPv6 /64s, junk accounts) is the case
//! that must neither slow it down nor grow memory. After the run the bench asserts the
//! policy's tables hold at most 2 × 16 × `CAPACITY` keys.
//!
//! Groups:
//! - `churn`: a denial (`deny`) or a shadow denial (`shadow_deny`, which also feeds the
//!   requests ring) from the next of 1 000 000 distinct keys (`per_ip:ip:10.x.y.z`).
//! - `hot_key`: a denial of the same key over and over.
//! - `allowed`: an allowed decision of an enforcing policy with no denial this minute
//!   (`quiet`) and after one (`after_a_denial`: the key is looked up, not found).
//!
//! Run: `cargo bench --bench top_keys` (under a minute). Under `cargo test --all-targets`
//! criterion runs each function once.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate::config::Mode;
use tollgate::limit::clock::ManualClock;
use tollgate::limit::metrics::PolicyOutcome;
use tollgate::limit::policy::PolicyRuntime;
use tollgate::limit::top::{CAPACITY, Seed, TopKeys};

const KEYS: usize = 1_000_000;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100
period = "1s"
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[[routes]]
name = "all"
upstream = "app"
policies = ["per_ip"]
"#;

/// One policy's summaries on a clock that never moves (one minute's table takes it all).
fn summaries() -> TopKeys {
    let origin = Path::new("benches/top_keys.rs");
    let raw = tollgate::config::parse_str(CONFIG, origin).expect("bench config parses");
    let cfg = tollgate::config::validate(raw, origin).expect("bench config is valid");
    let policies: Vec<PolicyRuntime> = cfg
        .policies
        .iter()
        .enumerate()
        .map(|(i, p)| PolicyRuntime::new(i, p, &[]).expect("valid quota"))
        .collect();
    TopKeys::new(Seed::new(Arc::new(ManualClock::new())), &policies, |_| true)
}

fn make_keys() -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("per_ip:ip:10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff))
        .collect()
}

fn churn(c: &mut Criterion, keys: &[String]) {
    let mut group = c.benchmark_group("churn");
    group.throughput(Throughput::Elements(1));
    for (name, outcome, mode) in [
        ("deny", PolicyOutcome::Deny, Mode::Enforce),
        ("shadow_deny", PolicyOutcome::ShadowDeny, Mode::Shadow),
    ] {
        let top = summaries();
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                top.record(0, black_box(&keys[i % KEYS]), None, outcome, mode);
                i += 1;
            })
        });
        let held = top.keys_held("per_ip").expect("a policy");
        assert!(
            held <= 2 * 16 * CAPACITY,
            "{held} keys held after {i} fresh keys"
        );
    }
    group.finish();
}

fn hot_and_allowed(c: &mut Criterion, keys: &[String]) {
    let mut group = c.benchmark_group("hot_key");
    group.throughput(Throughput::Elements(1));
    let top = summaries();
    group.bench_function("deny", |b| {
        b.iter(|| {
            top.record(
                0,
                black_box(&keys[0]),
                None,
                PolicyOutcome::Deny,
                Mode::Enforce,
            )
        })
    });
    group.finish();
    let mut group = c.benchmark_group("allowed");
    let quiet = summaries();
    group.bench_function("quiet", |b| {
        b.iter(|| {
            quiet.record(
                0,
                black_box(&keys[1]),
                None,
                PolicyOutcome::Allow,
                Mode::Enforce,
            )
        })
    });
    group.bench_function("after_a_denial", |b| {
        b.iter(|| {
            top.record(
                0,
                black_box(&keys[1]),
                None,
                PolicyOutcome::Allow,
                Mode::Enforce,
            )
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let keys = make_keys();
    churn(c, &keys);
    hot_and_allowed(c, &keys);
}

criterion_group! {
    name = top_keys;
    config = Criterion::default().sample_size(30);
    targets = benches
}
criterion_main!(top_keys);
