//! Writes `examples/replay/access.log`, the sample log the README replays against the
//! shipped `config.toml`: ten minutes of nginx combined-format traffic, deterministic (a
//! fixed xorshift seed), with the shapes a limit is for.
//!
//! `cargo run --example replay > examples/replay/access.log`
//!
//! - ordinary visitors (IPv4 and IPv6) browsing `/`, `/api/…` and uploading now and then;
//! - a scraper, 198.51.100.23, fetching `/api/items` at 50/s for 20 s in minute 4 (the
//!   `per_ip` policy allows 20/s with a burst of 10);
//! - a password-guessing run on one account, `admin`, from rotating addresses in minute 7
//!   (`per_account_login`: 5 a minute per account; `$remote_user` is the account);
//! - a TLS handshake sent to the plain port and a path with `%2F` (both 400 at the
//!   gateway), and a last line cut off mid-write (malformed).

use std::fmt::Write;

/// 2026-11-30 10:00:00 in the log's zone (+0100): seconds since that day's midnight.
const START: u32 = 10 * 3600;
const MINUTES: u32 = 10;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One line at `t` seconds after 10:00 (fractions are dropped, as nginx does).
fn line(out: &mut String, t: f64, ip: &str, user: &str, request: &str, status: u16) {
    let s = START + t as u32;
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    let _ = writeln!(
        out,
        "{ip} - {user} [30/Nov/2026:{h:02}:{m:02}:{sec:02} +0100] \"{request}\" {status} {} \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\"",
        200 + (s % 1700)
    );
}

fn visitors(rng: &mut Rng, events: &mut Vec<(f64, String, String, String, u16)>) {
    let pages = [
        "/",
        "/about",
        "/api/items",
        "/api/items/42",
        "/api/cart",
        "/static/app.js",
    ];
    for i in 0..1500 {
        let t = rng.below(u64::from(MINUTES) * 60_000) as f64 / 1000.0;
        let client = rng.below(60);
        let ip = match client % 3 {
            0 => format!("2001:db8:{:x}::{:x}", client, rng.below(9) + 1),
            _ => format!("192.0.2.{}", client + 10),
        };
        let (request, status) = match i % 50 {
            0 => ("POST /upload/photo HTTP/1.1".to_owned(), 201),
            _ => {
                let page = pages[rng.below(pages.len() as u64) as usize];
                (format!("GET {page}?v={} HTTP/1.1", rng.below(1000)), 200)
            }
        };
        events.push((t, ip, "-".into(), request, status));
    }
}

fn attacks(rng: &mut Rng, events: &mut Vec<(f64, String, String, String, u16)>) {
    // The scraper: 50/s for 20 s from 4 minutes in.
    for k in 0..1000 {
        let t = 240.0 + f64::from(k) / 50.0;
        let request = format!("GET /api/items?page={k} HTTP/1.1");
        events.push((t, "198.51.100.23".into(), "-".into(), request, 200));
    }
    // Password guessing on `admin`: 40 tries over 30 s from rotating addresses.
    for k in 0..40 {
        let t = 420.0 + f64::from(k) * 0.75;
        let ip = format!("203.0.113.{}", rng.below(200) + 1);
        events.push((t, ip, "admin".into(), "POST /login HTTP/1.1".into(), 401));
    }
    // Honest logins.
    for k in 0..12 {
        let t = 30.0 + f64::from(k) * 47.0;
        let ip = format!("192.0.2.{}", 10 + k);
        let user = format!("user{k}");
        events.push((t, ip, user, "POST /login HTTP/1.1".into(), 200));
    }
    events.push((
        301.0,
        "192.0.2.99".into(),
        "-".into(),
        r"\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03".into(),
        400,
    ));
    events.push((
        302.0,
        "192.0.2.98".into(),
        "-".into(),
        "GET /api/..%2Fadmin HTTP/1.1".into(),
        400,
    ));
}

fn main() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut events = Vec::new();
    visitors(&mut rng, &mut events);
    attacks(&mut rng, &mut events);
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = String::new();
    for (t, ip, user, request, status) in &events {
        line(&mut out, *t, ip, user, request, *status);
    }
    // A line cut off mid-write, as a crash or a full disk leaves one.
    out.push_str("192.0.2.17 - - [30/Nov/2026:10:09:59 +0100] \"GET /api/ca\n");
    print!("{out}");
}
