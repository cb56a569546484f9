//! The replay's answer: built from the [`Tally`] once the logs are read, printed as tables
//! (`Display`) or as JSON (`--json`, serde). Names and modes are the config's as written,
//! so the report reads against the file the user gave.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::tally::{MINUTE, Minute, Tally};
use super::time::format_utc;
use crate::config::{AlgorithmName, Config, Mode};

/// What one file held.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub file: String,
    /// `combined` or `json`; `null` for a file without a non-blank line.
    pub format: Option<&'static str>,
    pub gzip: bool,
    pub lines: u64,
    pub requests: u64,
    pub malformed: u64,
    /// Lines that are no request: blank, or JSON lines of another target.
    pub skipped: u64,
}

/// A malformed line, as shown.
#[derive(Debug, Clone, Serialize)]
pub struct MalformedLine {
    pub file: String,
    pub line: u64,
    pub reason: &'static str,
}

/// One policy of one route.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub policy: String,
    pub algorithm: &'static str,
    pub limit: u32,
    /// Humantime form (`1s`, `1m`); `null` for concurrency.
    pub period: Option<String>,
    /// As configured; replay decides every site as exact local state.
    pub site: &'static str,
    pub allowed: u64,
    pub denied: u64,
}

/// One route.
#[derive(Debug, Clone, Serialize)]
pub struct RouteRow {
    pub route: String,
    /// As configured; `shadow` is replayed as `enforce`.
    pub mode: &'static str,
    pub requests: u64,
    pub allowed: u64,
    pub denied: u64,
    pub bad_request: u64,
    /// 401: no account on a `require_account` route (or for an account-keyed
    /// `on_missing_key = "deny"` policy).
    pub unauthorized: u64,
    pub policies: Vec<PolicyRow>,
}

/// A key denied often.
#[derive(Debug, Clone, Serialize)]
pub struct KeyRow {
    pub policy: String,
    /// As the limiter builds it: accounts and header values are keyed hashes.
    pub key: String,
    pub denied: u64,
}

/// The minute with the most requests.
#[derive(Debug, Clone, Serialize)]
pub struct BusiestMinute {
    /// Its start, UTC.
    pub start: String,
    pub requests: u64,
    pub denied: u64,
}

/// Everything the replay found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub files: Vec<FileReport>,
    pub lines: u64,
    pub requests: u64,
    pub allowed: u64,
    pub denied: u64,
    /// 400 before routing (a path or request line the gateway refuses) or after it (an
    /// ambiguous account).
    pub bad_request: u64,
    pub no_route: u64,
    /// 401: no account on a route with `require_account` (or for an account-keyed
    /// `on_missing_key = "deny"` policy).
    pub unauthorized: u64,
    pub malformed: u64,
    pub out_of_order: u64,
    /// First and last moment on the virtual clock, UTC.
    pub first: Option<String>,
    pub last: Option<String>,
    pub routes: Vec<RouteRow>,
    pub top_denied_keys: Vec<KeyRow>,
    pub busiest_minute: Option<BusiestMinute>,
    pub malformed_lines: Vec<MalformedLine>,
    /// Denials per minute per policy, for `--plot`.
    #[serde(skip)]
    pub minutes: Vec<Minute>,
    /// Policy names in config order (the index of `minutes[_].denied`).
    #[serde(skip)]
    pub policies: Vec<String>,
    /// How long the replay took.
    #[serde(skip)]
    pub elapsed: Duration,
}

impl Report {
    /// `config` is the one the user gave (modes and sites as written).
    pub fn new(
        config: &Config,
        tally: Tally,
        files: Vec<FileReport>,
        malformed_lines: Vec<MalformedLine>,
        top: usize,
    ) -> Report {
        let names: Vec<String> = config.policies.iter().map(|p| p.name.clone()).collect();
        let routes: Vec<RouteRow> = config
            .routes
            .iter()
            .zip(&tally.routes)
            .map(|(r, t)| RouteRow {
                route: r.name.clone(),
                mode: mode(r.mode),
                requests: t.requests,
                allowed: t.allowed,
                denied: t.denied,
                bad_request: t.bad_request,
                unauthorized: t.unauthorized,
                policies: r
                    .policies
                    .iter()
                    .zip(&t.policies)
                    .map(|(&i, &(allowed, denied))| policy_row(config, i, allowed, denied))
                    .collect(),
            })
            .collect();
        let top_denied_keys = tally
            .top_keys(top)
            .into_iter()
            .map(|(p, key, denied)| KeyRow {
                policy: names[p].clone(),
                key: key.to_owned(),
                denied,
            })
            .collect();
        let busiest_minute = tally.busiest_minute().map(|m| BusiestMinute {
            start: format_utc(m.minute * MINUTE),
            requests: m.requests,
            denied: m.denied_requests,
        });
        Report {
            lines: files.iter().map(|f| f.lines).sum(),
            malformed: files.iter().map(|f| f.malformed).sum(),
            files,
            requests: tally.requests,
            allowed: routes.iter().map(|r| r.allowed).sum(),
            denied: routes.iter().map(|r| r.denied).sum(),
            bad_request: tally.bad_request + routes.iter().map(|r| r.bad_request).sum::<u64>(),
            no_route: tally.no_route,
            unauthorized: routes.iter().map(|r| r.unauthorized).sum(),
            out_of_order: tally.out_of_order,
            first: tally.first.map(format_utc),
            last: tally.last.map(format_utc),
            routes,
            top_denied_keys,
            busiest_minute,
            malformed_lines,
            minutes: tally.minutes,
            policies: names,
            elapsed: Duration::ZERO,
        }
    }
}

fn policy_row(config: &Config, i: usize, allowed: u64, denied: u64) -> PolicyRow {
    let p = &config.policies[i];
    let concurrency = p.algorithm == AlgorithmName::Concurrency;
    PolicyRow {
        policy: p.name.clone(),
        algorithm: match p.algorithm {
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::LeakyBucket => "leaky_bucket",
            AlgorithmName::Concurrency => "concurrency",
        },
        limit: p.limit.get(),
        period: (!concurrency).then(|| humantime::format_duration(p.period).to_string()),
        site: p.site.name(),
        allowed,
        denied,
    }
}

fn mode(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
        Mode::Off => "off",
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = match (&self.first, &self.last) {
            (Some(a), Some(b)) => format!(" from {a} to {b}"),
            _ => String::new(),
        };
        writeln!(
            f,
            "replayed {} requests{span} ({} lines in {} files; {} malformed, {} out of order)",
            self.requests,
            self.lines,
            self.files.len(),
            self.malformed,
            self.out_of_order
        )?;
        writeln!(
            f,
            "allowed {}, denied {} (429), bad request {} (400), no route {} (404){}\n",
            self.allowed,
            self.denied,
            self.bad_request,
            self.no_route,
            match self.unauthorized {
                0 => String::new(),
                n => format!(", unauthorized {n} (401)"),
            }
        )?;
        writeln!(
            f,
            "{:<16} {:<8} {:<22} {:<26} {:>10} {:>10} {:>10}",
            "route", "mode", "policy", "limit", "requests", "allowed", "denied"
        )?;
        for r in &self.routes {
            writeln!(
                f,
                "{:<16} {:<8} {:<22} {:<26} {:>10} {:>10} {:>10}",
                r.route, r.mode, "(route)", "", r.requests, r.allowed, r.denied
            )?;
            for p in &r.policies {
                let limit = match &p.period {
                    Some(period) => format!("{} {}/{period} {}", p.algorithm, p.limit, p.site),
                    None => format!("{} {} {}", p.algorithm, p.limit, p.site),
                };
                writeln!(
                    f,
                    "{:<16} {:<8} {:<22} {:<26} {:>10} {:>10} {:>10}",
                    "", "", p.policy, limit, "", p.allowed, p.denied
                )?;
            }
        }
        self.fmt_tail(f)
    }
}

impl Report {
    /// Top keys, busiest minute, timing.
    fn fmt_tail(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.top_denied_keys.is_empty() {
            writeln!(f, "\ntop denied keys:")?;
            for k in &self.top_denied_keys {
                writeln!(f, "  {:>10}  {}", k.denied, k.key)?;
            }
        }
        if let Some(m) = &self.busiest_minute {
            writeln!(
                f,
                "\nbusiest minute: {} with {} requests, {} denied",
                m.start, m.requests, m.denied
            )?;
        }
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            writeln!(
                f,
                "\n{} lines in {secs:.2} s ({:.0} lines/s)",
                self.lines,
                self.lines as f64 / secs
            )?;
        }
        Ok(())
    }
}
