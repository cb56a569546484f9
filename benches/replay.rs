//! `tollgate replay`'s throughput in log lines per second, beside its own parser alone, in
//! the same run, so the cost of deciding (normalize, route, limiter) reads as a ratio.
//!
//! Why: replay is meant for whole days of a fleet's logs; the issue asks for ≥ 1 M lines/s
//! per core. One thread does everything here (reading, parsing, deciding), so the lines/s
//! figure is per core.
//!
//! Input: 200 000 generated combined-format lines (2 000 under `cargo test --benches`) (and the same requests as tollgate JSON
//! access-log lines), 1 000 lines per second of virtual time from 20 000 clients (IPv4 and
//! IPv6), routes `/api` (two policies: per ip and per account) and `/` (none), 1 in 8
//! requests with an account. Groups, each with `Throughput::Elements(lines)`:
//! - `combined/parse`: `parse_line` over every line, nothing else (the peer);
//! - `combined/replay`: `replay::run` over the same bytes (read, parse, clock, normalize,
//!   route, limiter, tallies);
//! - `json/parse`, `json/replay`: the same for tollgate's JSON access log.
//!
//! Run: `cargo bench --bench replay` (about a minute). Under `cargo test --benches`
//! criterion runs each function once.

use std::hint::black_box;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate::cli::replay::{Format, Input, Options, parse_line, run};

/// Lines per run when benchmarking.
const LINES: usize = 200_000;
/// Lines per run under `cargo test --benches` (criterion runs each function once, in a
/// debug build): enough to walk every path, small enough to take well under a second.
const TEST_LINES: usize = 2_000;

/// How many lines this run uses.
fn lines() -> usize {
    match std::env::args().any(|a| a == "--bench") {
        true => LINES,
        false => TEST_LINES,
    }
}
/// Distinct clients.
const CLIENTS: u64 = 20_000;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"

[account]
header = "x-api-key"

[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 20
period = "1s"
burst = 10

[policies.per_account]
key = ["account"]
algorithm = "sliding_window"
limit = 100
period = "1m"

[upstreams.app]
urls = ["http://127.0.0.1:9"]

[[routes]]
name = "api"
match = { path_prefix = "/api" }
upstream = "app"
policies = ["per_ip", "per_account"]

[[routes]]
name = "default"
upstream = "app"
"#;

/// xorshift64: the same lines every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x % n
    }
}

/// The requests: (second offset, millis, client, account, path).
fn requests() -> Vec<(u64, u64, String, Option<String>, String)> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let paths = [
        "/api/items",
        "/api/items/42?full=1",
        "/api/cart",
        "/",
        "/static/app.js",
    ];
    (0..lines() as u64)
        .map(|i| {
            let c = rng.below(CLIENTS);
            let ip = match c % 4 {
                0 => format!("2001:db8:{:x}::{:x}", c, rng.below(16)),
                _ => format!("10.{}.{}.{}", c >> 16, (c >> 8) & 0xff, c & 0xff),
            };
            let account = (rng.below(8) == 0).then(|| format!("key-{}", rng.below(500)));
            let path = paths[rng.below(paths.len() as u64) as usize].to_owned();
            (i / 1000, i % 1000, ip, account, path)
        })
        .collect()
}

fn combined_log() -> Vec<u8> {
    let mut out = String::new();
    for (s, _, ip, account, path) in requests() {
        let (m, sec) = (s / 60, s % 60);
        let user = account.as_deref().unwrap_or("-");
        out.push_str(&format!(
            "{ip} - {user} [30/Nov/2026:{:02}:{:02}:{sec:02} +0000] \"GET {path} HTTP/1.1\" 200 512 \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n",
            10 + m / 60,
            m % 60
        ));
    }
    out.into_bytes()
}

fn json_log() -> Vec<u8> {
    let mut out = String::new();
    for (s, ms, ip, account, path) in requests() {
        let (m, sec) = (s / 60, s % 60);
        let path = path.split('?').next().unwrap_or("/");
        let account = account.map_or(String::new(), |a| format!(",\"account\":\"{a}\""));
        out.push_str(&format!(
            "{{\"timestamp\":\"2026-11-30T{:02}:{:02}:{sec:02}.{ms:03}512Z\",\"level\":\"INFO\",\"route\":\"api\",\"method\":\"GET\",\"path\":\"{path}\",\"status\":200,\"duration_ms\":0.8{account},\"client\":\"{ip}\",\"target\":\"tollgate::access\"}}\n",
            10 + m / 60,
            m % 60
        ));
    }
    out.into_bytes()
}

/// Parse every line; the number of records, so nothing is optimised away.
fn parse_all(log: &[u8], format: Format) -> usize {
    log.split(|&b| b == b'\n')
        .filter(|l| matches!(parse_line(format, l, "account"), Ok(Some(_))))
        .count()
}

fn group(c: &mut Criterion, name: &str, log: Vec<u8>, format: Format) {
    let origin = Path::new("benches/replay.rs");
    let raw = tollgate::config::parse_str(CONFIG, origin).expect("bench config parses");
    let config = tollgate::config::validate(raw, origin).expect("bench config is valid");
    let log: Arc<[u8]> = log.into();
    let lines = lines();
    assert_eq!(parse_all(&log, format), lines, "every line is a request");
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(lines as u64));
    g.bench_function("parse", |b| b.iter(|| black_box(parse_all(&log, format))));
    g.bench_function("replay", |b| {
        b.iter(|| {
            let input = Input::from_reader(name.into(), Cursor::new(log.clone())).expect("input");
            let report = run(&config, &Options::default(), vec![input]).expect("replay");
            assert_eq!(report.requests, lines as u64);
            black_box(report.denied)
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    group(c, "combined", combined_log(), Format::Combined);
    group(c, "json", json_log(), Format::Json);
}

criterion_group! {
    name = replay;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .sample_size(10);
    targets = benches
}
criterion_main!(replay);
