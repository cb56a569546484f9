//! `examples/grafana/tollgate-dashboard.json` asks only for metrics tollgate exports: every
//! panel target's PromQL `expr` (and every `label_values` variable query) is read, its
//! metric names taken out, and each must be a sample name a running `tollgate serve`
//! writes on `/metrics`. The names come from that process (a real `redis-server` behind a
//! central policy, a health-checked upstream, allowed, denied and shadow-denied requests, a
//! store outage and a connection cut at `header_timeout`, so every family has samples), not
//! from a list kept here: a renamed metric or a typo in a panel fails this test.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::common::config::{ConfigBuilder, policy, route};
use crate::common::process::{spawn_serve, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;

/// Every metric name a PromQL expression reads: identifiers that are not functions,
/// keywords, label names (inside `{}` and `by (...)`), strings, ranges or numbers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 6] = ["and", "or", "unless", "bool", "offset", "inf"];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Skip from an opening `open` to its matching `close`, strings inside included.
    let skip = |i: &mut usize, open: char, close: char| {
        let mut depth = 0;
        while *i < chars.len() {
            match chars[*i] {
                '"' | '\'' => {
                    let quote = chars[*i];
                    *i += 1;
                    while *i < chars.len() && chars[*i] != quote {
                        *i += if chars[*i] == '\\' { 2 } else { 1 };
                    }
                }
                c if c == open => depth += 1,
                c if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        *i += 1;
                        return;
                    }
                }
                _ => {}
            }
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            skip(&mut i, '{', '}');
        } else if c == '[' {
            skip(&mut i, '[', ']');
        } else if c == '"' || c == '\'' {
            skip(&mut i, c, c);
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            // `sum by (…) (…)`: an aggregation whose label list comes first.
            let ahead: String = chars[next..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect();
            let call = call || ahead == "by" || ahead == "without";
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    i = next;
                    skip(&mut i, '(', ')');
                }
            } else if !call && !KEYWORDS.contains(&word.to_lowercase().as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_reads_promql_as_prometheus_does() {
    let expr = "histogram_quantile(0.99, sum by (route, le) (rate(a_bucket{job=~\"$job\", \
                x=\"b_total\"}[$__rate_interval]))) / on (route) group_left b_total > bool 1e3 \
                or c offset 5m";
    let got: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(got, ["a_bucket", "b_total", "c"]);
}

/// Every `expr` anywhere in `v`, and the metric of every `label_values(METRIC…)` query.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v.as_str()) {
                    ("expr", Some(e)) => out.push(e.to_string()),
                    ("query", Some(q)) if q.starts_with("label_values(") => {
                        let inner = &q["label_values(".len()..];
                        let metric = inner.split(['{', ',', ')']).next().unwrap();
                        out.push(metric.trim().to_string());
                    }
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The sample names of a `/metrics` text (`_bucket`, `_sum`, `_count` of histograms).
fn sample_names(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_asks_only_for_exported_metrics() {
    let path = repo_path("examples/grafana/tollgate-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array();
        assert!(
            targets.is_some_and(|t| !t.is_empty()),
            "panel {:?} has no targets",
            p["title"]
        );
    }
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    let wanted: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    // What the dashboard is for (issue 34): decisions, would-be denials, traffic, the store.
    for family in [
        "tollgate_decisions_total",
        "tollgate_requests_total",
        "tollgate_request_duration_seconds_bucket",
        "tollgate_store_latency_seconds_bucket",
        "tollgate_store_errors_total",
    ] {
        assert!(wanted.contains(family), "the dashboard shows {family}");
    }
    assert!(exprs.iter().any(|e| e.contains("outcome=\"shadow_deny\"")));

    // A gateway process whose every family has samples.
    let mut redis = RedisServer::start();
    let up = echo_upstream().await;
    let toml = ConfigBuilder::new("header_timeout = \"300ms\"")
        .trust_loopback("")
        .redis(&redis.url(), "500ms")
        .text(&format!(
            "[upstreams.app]\nurls = [\"http://{up}\"]\n\
             health = {{ path = \"/\", interval = \"50ms\", timeout = \"50ms\" }}\n"
        ))
        .text(&policy("here", &["ip"], "gcra", 2, "1h", ""))
        .text(&policy("watched", &["ip"], "gcra", 2, "1h", ""))
        .text(&policy(
            "there",
            &["ip"],
            "gcra",
            2,
            "1h",
            "site = \"central\"",
        ))
        .text(&route("local", &["here"], "closed"))
        .text(&route("shadow", &["watched"], "closed"))
        .text("mode = \"shadow\"\n")
        .text(&route("central", &["there"], "open"))
        .build();
    let gw = spawn_serve(&temp_file("grafana.toml", &toml));
    let admin = gw.admin.expect("an admin listener");
    assert_eq!(admitted(gw.addr, "/local", "192.0.2.7", 3).await, 2);
    assert_eq!(admitted(gw.addr, "/shadow", "192.0.2.7", 3).await, 3);
    assert_eq!(admitted(gw.addr, "/central", "192.0.2.7", 3).await, 2);
    // The store goes away: the central route fails open, and the error is counted.
    redis.stop();
    assert_eq!(admitted(gw.addr, "/central", "192.0.2.8", 1).await, 1);
    // A connection that sends nothing is cut at header_timeout: the server closes it.
    let mut silent = TcpStream::connect(gw.addr).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut rest))
        .await
        .expect("closed at header_timeout")
        .ok();

    // Counters are written after the answer or the cut: fetch until every family shows,
    // within a bound, then name what is missing.
    let missing = |metrics: &str| -> Vec<String> {
        let exported = sample_names(metrics);
        wanted.difference(&exported).cloned().collect()
    };
    let started = std::time::Instant::now();
    let metrics = loop {
        let metrics = metrics_text(admin).await;
        if missing(&metrics).is_empty() || started.elapsed() > Duration::from_secs(10) {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let absent = missing(&metrics);
    assert!(
        absent.is_empty(),
        "the dashboard asks for {absent:?}, which tollgate does not export:\n{metrics}"
    );
}
