//! `tollgate shadow-report --admin URL [--token-env VAR] [--json] [--value V]`: what the
//! policies in shadow mode would have denied, as the table people write by hand before
//! enforcing them, from a running gateway's `GET /shadow` (asked as `tollgate reload`
//! asks: [`ask`]). `--value` looks one sent value up (`GET /shadow?value=V`): each
//! policy's keys holding it, denied or not, or a line saying no key does.

use std::fmt::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use http::{Method, Uri};
use serde_json::Value;

use super::reload_request::{AskError, ask};

/// `tollgate shadow-report` options.
#[derive(Debug, clap::Args)]
pub struct ShadowReportArgs {
    /// The gateway's admin listener (`[server] admin_listen`), e.g. http://127.0.0.1:9901.
    #[arg(long)]
    admin: String,
    /// Environment variable holding the admin bearer token (as `[server] admin_token_env`).
    #[arg(long)]
    token_env: Option<String>,
    /// Print the JSON the gateway answered instead of the table.
    #[arg(long)]
    json: bool,
    /// Look one sent value up (a username, an API key): list each policy's keys that hold
    /// it, found by its keyed hash (or in clear with `show_values`).
    #[arg(long)]
    value: Option<String>,
}

/// Why there is no report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("--admin {0}: give the admin listener as http://HOST:PORT")]
    BadUrl(String),
    #[error("--admin {0}: cannot resolve: {1}")]
    Resolve(String, String),
    #[error("--token-env {0}: the variable is not set")]
    NoToken(String),
    #[error(transparent)]
    Ask(#[from] AskError),
    /// The status, the answer, and what to do about it (`--token-env` for a 401).
    #[error("GET /shadow answered {0}: {1}{2}")]
    Refused(u16, String, String),
    #[error("GET /shadow answered something that is not the shadow report: {0}")]
    BadAnswer(String),
}

/// Run `tollgate shadow-report`: the table (or JSON) on stdout, exit 0; else the reason on
/// stderr, exit 1.
pub fn shadow_report(args: ShadowReportArgs) -> ExitCode {
    let asked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(fetch(&args)).map_err(|e| e.to_string()));
    match asked {
        Ok(view) if args.json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&view).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Ok(view) => {
            match &args.value {
                Some(value) => print!("{}", looked_up(&view, value)),
                None => print!("{}", table(&view)),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `GET /shadow` from `--admin`, parsed.
async fn fetch(args: &ShadowReportArgs) -> Result<Value, ReportError> {
    let addr = resolve(&args.admin).await?;
    let token = match &args.token_env {
        Some(var) => Some(std::env::var(var).map_err(|_| ReportError::NoToken(var.to_string()))?),
        None => None,
    };
    let path = match &args.value {
        Some(v) => format!(
            "/shadow?{}",
            form_urlencoded::Serializer::new(String::new())
                .append_pair("value", v)
                .finish()
        ),
        None => "/shadow".to_string(),
    };
    let (status, body) = ask(addr, Method::GET, &path, token.as_deref()).await?;
    if status != 200 {
        let hint = match (status, &args.token_env) {
            (401, None) => " (the admin listener wants its bearer token: give --token-env VAR, VAR holding it, as [server] admin_token_env names it)".into(),
            (401, Some(var)) => format!(" (the token in ${var} was refused: is it the one [server] admin_token_env names?)"),
            _ => String::new(),
        };
        return Err(ReportError::Refused(status, body.trim().to_string(), hint));
    }
    let view: Value =
        serde_json::from_str(&body).map_err(|e| ReportError::BadAnswer(e.to_string()))?;
    if !view["policies"].is_array() {
        return Err(ReportError::BadAnswer("no `policies` list".into()));
    }
    Ok(view)
}

/// `http://HOST:PORT` (or `HOST:PORT`) as one address.
async fn resolve(admin: &str) -> Result<SocketAddr, ReportError> {
    let bad = || ReportError::BadUrl(admin.to_string());
    let with_scheme = match admin.contains("://") {
        true => admin.to_string(),
        false => format!("http://{admin}"),
    };
    let uri: Uri = with_scheme.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("http") || !matches!(uri.path(), "" | "/") {
        return Err(bad());
    }
    let host = uri.host().ok_or_else(bad)?.trim_matches(['[', ']']);
    let port = uri.port_u16().unwrap_or(80);
    let resolve_error = |e: String| ReportError::Resolve(admin.to_string(), e);
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| resolve_error(e.to_string()))?
        .next()
        .ok_or_else(|| resolve_error("no address".into()))
}

/// The report as a Markdown table: one row per shadow policy and window, then what a
/// suggested limit means, then each policy's top keys over 15 minutes.
pub fn table(view: &Value) -> String {
    let empty = Vec::new();
    let policies = view["policies"].as_array().unwrap_or(&empty);
    if policies.is_empty() {
        return "no policy runs in shadow mode\n".into();
    }
    let mut out = String::from(
        "| policy | window | seen | would-be denials | keys denied / seen | top keys' share (1 / 3 / 10) | suggested limit (at most the top 1 / 3 / 10 denied) |\n\
         | --- | --- | ---: | ---: | ---: | --- | --- |\n",
    );
    for p in policies {
        for window in ["1m", "15m"] {
            row(&mut out, p, window);
        }
    }
    out.push_str(SUGGESTED);
    for p in policies {
        if let Some(means) = p["suggestion_means"].as_str() {
            let _ = writeln!(
                out,
                "{} ({}): {means}",
                text(&p["policy"]),
                text(&p["algorithm"])
            );
        }
    }
    for p in policies {
        let top = p["windows"]["15m"]["top"].as_array().unwrap_or(&empty);
        if top.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n{} — top keys over 15m (would-be denials, share, requests, peak):",
            text(&p["policy"])
        );
        keys(&mut out, top);
    }
    out
}

/// What the report says a suggested limit is: true whether the peaks were counted in all
/// the time seen (exact) or in windows aligned to the clock (a range).
const SUGGESTED: &str = "\nA suggested limit is the next key's most requests in one period. When no more than a period was seen it is exact (all the time seen is one window). Else the windows are aligned to the clock and a burst across an edge is split, so it is a range: low, the busiest aligned window (the truth is at least this), to high, the most any sliding period can hold (at most this); one number when they meet. Under the high figure, at most the top keys are refused.\n";

/// `--value V`: per shadow policy, its keys holding the value over 15 minutes, or a line
/// saying none does (never the whole table: it is not about the value).
pub fn looked_up(view: &Value, value: &str) -> String {
    let empty = Vec::new();
    let policies = view["policies"].as_array().unwrap_or(&empty);
    if policies.is_empty() {
        return "no policy runs in shadow mode\n".into();
    }
    let mut out = String::new();
    for p in policies {
        let policy = text(&p["policy"]);
        let top = p["windows"]["15m"]["top"].as_array().unwrap_or(&empty);
        if top.is_empty() {
            let _ = writeln!(out, "no key of {policy} holds `{value}` in the 15m window");
            continue;
        }
        let _ = writeln!(
            out,
            "{policy} — keys holding `{value}` over 15m (would-be denials, share, requests, peak):"
        );
        keys(&mut out, top);
    }
    out
}

/// One line per key: would-be denials, share, requests, peak (`low–high` when aligned
/// windows leave a range) and the key.
fn keys(out: &mut String, top: &[Value]) {
    for k in top {
        let _ = writeln!(
            out,
            "  {:>8}  {:>6}  {:>8}  {:>6}  {}",
            number(&k["would_be_denials"]),
            percent(&k["share"]),
            number(&k["requests"]),
            range(&k["peak"], &k["peak_upper"]),
            text(&k["key"])
        );
    }
}

/// `low` alone, or `low–high` when `high` is above it; `-` when there is none.
fn range(low: &Value, high: &Value) -> String {
    match (low.as_u64(), high.as_u64()) {
        (Some(l), Some(h)) if h > l => format!("{l}–{h}"),
        (Some(l), _) => l.to_string(),
        (None, _) => "-".into(),
    }
}

fn row(out: &mut String, p: &Value, window: &str) {
    let w = &p["windows"][window];
    let by_top = w["by_top"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let shares: Vec<String> = by_top.iter().map(|t| percent(&t["share"])).collect();
    let limits: Vec<String> = (by_top.iter())
        .map(|t| range(&t["suggested_limit"], &t["suggested_limit_upper"]))
        .collect();
    let period = p["period_seconds"]
        .as_f64()
        .filter(|s| *s > 0.0)
        .map(|s| humantime::format_duration(Duration::from_secs_f64(s)).to_string());
    let limit = match period {
        Some(period) => format!(
            "{} per {period} (now {})",
            limits.join(" / "),
            number(&p["limit"])
        ),
        None => "- (concurrency)".into(),
    };
    let approximate = |exact: &str, n: &str| match w[exact].as_bool() {
        Some(false) => format!("~{}", number(&w[n])),
        _ => number(&w[n]),
    };
    let keys = format!(
        "{} / {}",
        approximate("distinct_keys_exact", "keys_denied"),
        approximate("keys_seen_exact", "keys_seen")
    );
    let seen = w["seen_seconds"]
        .as_f64()
        .map_or_else(|| "?".into(), |s| format!("{s:.0} s"));
    let _ = writeln!(
        out,
        "| {} | {window} | {seen} | {} | {keys} | {} | {limit} |",
        text(&p["policy"]),
        number(&w["would_be_denials"]),
        shares.join(" / "),
    );
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("?").to_string()
}

fn number(v: &Value) -> String {
    v.as_u64().map_or_else(|| "?".into(), |n| n.to_string())
}

fn percent(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "?".into(), |s| format!("{:.1} %", s * 100.0))
}
