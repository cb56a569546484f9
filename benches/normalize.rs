//! The path canonicalizer (`tollgate::normalize::normalize_path`), the first step of every
//! request, beside the cheapest check a gateway could do instead, in the same run.
//!
//! Why: it runs once per request before routing, so the already-canonical case (nearly all
//! traffic) must cost about one pass over the bytes. Functions of the `normalize` group:
//! - `canonical`: `/api/v1/users/12345/orders`, returned borrowed by the fast path.
//! - `needs_work`: `//api/./v1/%75sers/../users/12345`, which takes the slow path
//!   (merge, dot removal, a decode, one allocation).
//! - `baseline_no_percent`: `path.bytes().all(|b| b != b'%')` on the canonical path, the
//!   floor for "look at every byte once".
//!
//! Run: `cargo bench --bench normalize` (add `-- --quick` for a short run).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate::config::PathRules;
use tollgate::normalize::normalize_path;

const CANONICAL: &str = "/api/v1/users/12345/orders";
const NEEDS_WORK: &str = "//api/./v1/%75sers/../users/12345";

fn normalize(c: &mut Criterion) {
    let rules = PathRules::default();
    let mut group = c.benchmark_group("normalize");
    group.bench_function("canonical", |b| {
        b.iter(|| normalize_path(black_box(CANONICAL), rules).map(|p| p.len()))
    });
    group.bench_function("needs_work", |b| {
        b.iter(|| normalize_path(black_box(NEEDS_WORK), rules).map(|p| p.len()))
    });
    group.bench_function("baseline_no_percent", |b| {
        b.iter(|| black_box(CANONICAL).bytes().all(|b| b != b'%'))
    });
    group.finish();
}

criterion_group!(benches, normalize);
criterion_main!(benches);
