//! The local rate-limit decision: tollgate's `LocalStore::check` beside the same decision on
//! `governor`'s keyed limiter, in the same run, so the two are comparable on one machine.
//!
//! Why: the limit step runs once per request on the proxy's hot path, and `governor` is the
//! usual in-process Rust rate limiter. tollgate's site does more per check (all-or-nothing
//! over several keys, a commit plan, header snapshots), so this shows what that costs where
//! both do the same job: one key, one cell, always admitted.
//!
//! Groups, each with a `tollgate` and a `governor` function:
//! - `hot_key`: one check on the same key over and over (shard lock / map entry stays hot).
//! - `random_100k`: one check on a key drawn from 100 000 distinct keys (`per_ip:ip:10.x.y.z`,
//!   the shape `keys.rs` builds) by a xorshift index; both sides see the same sequence, and
//!   both stores hold all 100 000 keys before timing starts (the two random groups share
//!   the stores).
//! - `two_threads`: two threads each doing half of the checks on random keys from that set
//!   (different seeds per thread, the same two for both sides); the whole is timed.
//!
//! Quotas never deny, so every check takes the admit-and-write path: tollgate GCRA 1e9 per
//! second with a burst of 1e9, governor `Quota::per_second(1e9)` (its burst defaults to the
//! same 1e9). Each reads its production clock (tollgate `SystemClock`, governor its default
//! `QuantaClock`).
//!
//! Fairness: tollgate's `CheckItem` owns its key `String`, so every tollgate check includes
//! one key clone (a request builds its key string anyway). governor's `check_key` borrows,
//! so its side ALSO clones the key per check and passes `&cloned`: both measure "decide on a
//! freshly built key string".
//!
//! The policy is built from TOML through `parse_str` + `validate`, as the gateway builds it.
//!
//! Run: `cargo bench --bench limiter` (about 1.5 minutes: 30 samples, 1 s warm-up and 3 s of
//! measurement per function). Under `cargo test --all-targets` criterion runs each function
//! once and setup is only generating the 100 000 key strings.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tollgate::config::{AlgorithmName, KeyPart, Policy};
use tollgate::limit::clock::SystemClock;
use tollgate::limit::local::{CheckItem, ItemResult, LocalStore};
use tollgate::limit::metrics::PolicyGauges;
use tollgate::limit::policy::PolicyRuntime;

/// Distinct keys of the random groups.
const KEYS: usize = 100_000;
/// Cells per second and burst on both sides: high enough that no check is ever denied.
const RATE: u32 = 1_000_000_000;

/// Seeds of the key sequences: one per thread (`random_100k` uses the first).
const SEEDS: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xD1B5_4A32_D192_ED03];

/// xorshift64: a few cycles per draw, the same sequence for both sides.
#[derive(Clone, Copy)]
struct Rng(u64);

impl Rng {
    /// Next index in `0..KEYS` (multiply-shift instead of `%`).
    #[inline]
    fn index(&mut self) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (((x >> 32) * KEYS as u64) >> 32) as usize
    }
}

/// `per_ip:ip:10.x.y.z` for `0..KEYS`.
fn make_keys() -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("per_ip:ip:10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff))
        .collect()
}

/// The bench policy, as a config file would give it: building it through `parse_str` and
/// `validate` keeps this file compiling while `Policy` gains fields, and checks the quota is
/// one the gateway accepts.
const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"

[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 1000000000
period = "1s"
burst = 1000000000
max_keys = 1000000

[upstreams.app]
urls = ["http://127.0.0.1:9"]

[[routes]]
name = "all"
match = { path_prefix = "/" }
upstream = "app"
policies = ["per_ip"]
"#;

fn bench_policy() -> Policy {
    let origin = Path::new("benches/limiter.rs");
    let raw = tollgate::config::parse_str(CONFIG, origin).expect("bench config parses");
    let cfg = tollgate::config::validate(raw, origin).expect("bench config is valid");
    let policy = cfg.policies.into_iter().next().expect("one policy");
    assert_eq!(
        (policy.algorithm, policy.limit.get(), policy.burst.get()),
        (AlgorithmName::Gcra, RATE, RATE)
    );
    assert_eq!(policy.key, [KeyPart::Ip]);
    policy
}

fn tollgate_store() -> LocalStore {
    let policy = bench_policy();
    let runtime = PolicyRuntime::new(0, &policy, &[]).expect("valid quota");
    let policies: Arc<[PolicyRuntime]> = vec![runtime].into();
    LocalStore::new(
        policies,
        Arc::new(SystemClock::new()),
        Arc::new(PolicyGauges::detached(1)),
    )
}

/// governor's keyed limiter as most users build it (DashMap store, quanta clock).
type Limiter = DefaultKeyedRateLimiter<String>;

fn governor_limiter() -> Limiter {
    RateLimiter::keyed(Quota::per_second(NonZeroU32::new(RATE).expect("non-zero")))
}

/// One tollgate decision on `key`, committed when admitted (what the limit step does for a
/// request with one local key: `LocalStore::check_single`). The clone is the key the
/// request built.
#[inline]
fn tollgate_check(store: &LocalStore, key: &str) -> ItemResult {
    store.check_single(
        &CheckItem {
            policy: 0,
            headroom: NonZeroU32::MIN,
            key: key.to_owned(),
            cost: 1,
            fallback: false,
        },
        |v| v.admits(),
    )
}

/// One governor decision on `key`, with the same per-check key clone as tollgate's side.
#[inline]
fn governor_check(limiter: &Limiter, key: &str) -> bool {
    let cloned = key.to_owned();
    limiter.check_key(&cloned).is_ok()
}

fn hot_key(c: &mut Criterion) {
    let key = "per_ip:ip:10.0.0.1";
    let store = tollgate_store();
    let limiter = governor_limiter();
    assert!(tollgate_check(&store, key).committed);
    assert!(governor_check(&limiter, key));

    let mut g = c.benchmark_group("hot_key");
    g.throughput(Throughput::Elements(1));
    g.bench_function("tollgate", |b| {
        b.iter(|| black_box(tollgate_check(&store, black_box(key))))
    });
    g.bench_function("governor", |b| {
        b.iter(|| black_box(governor_check(&limiter, black_box(key))))
    });
    g.finish();
}

/// Both stores for the random groups. When benchmarking, every key is checked once first so
/// timing sees lookups of existing keys from the first sample on; under `cargo test` (no
/// `--bench` argument) criterion runs each function once, so the stores are left empty and
/// setup is just the 100 000 strings.
fn filled(keys: &[String]) -> (LocalStore, Limiter) {
    let store = tollgate_store();
    let limiter = governor_limiter();
    if std::env::args().any(|a| a == "--bench") {
        for k in keys {
            assert!(tollgate_check(&store, k).committed);
            assert!(governor_check(&limiter, k));
        }
    }
    (store, limiter)
}

fn random_100k(c: &mut Criterion, keys: &[String], store: &LocalStore, limiter: &Limiter) {
    let mut g = c.benchmark_group("random_100k");
    g.throughput(Throughput::Elements(1));
    g.bench_function("tollgate", |b| {
        let mut rng = Rng(SEEDS[0]);
        b.iter(|| black_box(tollgate_check(store, &keys[rng.index()])))
    });
    g.bench_function("governor", |b| {
        let mut rng = Rng(SEEDS[0]);
        b.iter(|| black_box(governor_check(limiter, &keys[rng.index()])))
    });
    g.finish();
}

/// Time `iters` checks split over two threads, from a common start to the last finish.
fn two_threads_run(iters: u64, keys: &[String], check: impl Fn(&str) + Sync) -> Duration {
    let start_line = Barrier::new(3);
    let per_thread = iters.div_ceil(2);
    std::thread::scope(|s| {
        for seed in SEEDS {
            let (start_line, check) = (&start_line, &check);
            s.spawn(move || {
                let mut rng = Rng(seed);
                start_line.wait();
                for _ in 0..per_thread {
                    check(&keys[rng.index()]);
                }
            });
        }
        start_line.wait();
        let started = Instant::now();
        // Leaving the scope joins both threads.
        started
    })
    .elapsed()
}

fn two_threads(c: &mut Criterion, keys: &[String], store: &LocalStore, limiter: &Limiter) {
    let mut g = c.benchmark_group("two_threads");
    g.throughput(Throughput::Elements(1));
    g.bench_function("tollgate", |b| {
        b.iter_custom(|iters| {
            two_threads_run(iters, keys, |k| {
                black_box(tollgate_check(store, k));
            })
        })
    });
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            two_threads_run(iters, keys, |k| {
                black_box(governor_check(limiter, k));
            })
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let keys = make_keys();
    hot_key(c);
    let (store, limiter) = filled(&keys);
    random_100k(c, &keys, &store, &limiter);
    two_threads(c, &keys, &store, &limiter);
}

criterion_group! {
    name = limiter;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = benches
}
criterion_main!(limiter);
