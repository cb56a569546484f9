//! Issue 31: `/metrics` as Prometheus' own linter (`promtool check metrics`) reads it, over
//! real sockets: a gateway with a local and a central policy (a real `redis-server`) and a
//! health-checked upstream serves allowed and denied requests, so the request, decision,
//! store and health families all have samples; a node of a fleet of two (`tollgate serve`
//! processes, an owner and a gossip policy) adds the peer and gossip families. Each family
//! must be typed under the name the README promises (its samples' name, `_total` and all),
//! and `build_info` and the `process_*` metrics must be there with plausible values.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::config::{ConfigBuilder, policy, route};
use crate::common::peers;
use crate::common::redis::RedisServer;
use crate::common::*;

/// `promtool check metrics` on `text`: `Err` with what it said unless it exits 0.
fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!(
            "promtool (Debian package prometheus) is missing ({e}): run scripts/test.sh, \
             which installs it"
        ),
    };
    let mut stdin = child.stdin.take().expect("promtool's stdin");
    stdin
        .write_all(text.as_bytes())
        .expect("metrics to promtool");
    drop(stdin);
    let out = child.wait_with_output().expect("promtool ran");
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "promtool check metrics: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Fail with promtool's complaints and the text it read.
fn assert_promtool_accepts(text: &str) {
    if let Err(e) = promtool_check(text) {
        panic!("{e}\n--- /metrics ---\n{text}");
    }
}

/// The value of the one sample named exactly `name` (no labels).
fn sample(metrics: &str, name: &str) -> f64 {
    let prefix = format!("{name} ");
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no sample {name} in\n{metrics}"));
    line[prefix.len()..].trim().parse().expect("a number")
}

/// The families every gateway exports, as the README names them, with their types. (A
/// family with no series yet is not written at all: `tollgate_timeouts_total` before a
/// first cut, the `*_errors_total` before a first error.)
const EVERY_GATEWAY: [(&str, &str); 8] = [
    ("tollgate_requests_total", "counter"),
    ("tollgate_request_duration_seconds", "histogram"),
    ("tollgate_upstream_duration_seconds", "histogram"),
    ("tollgate_decisions_total", "counter"),
    ("tollgate_limiter_keys", "gauge"),
    ("tollgate_limiter_evictions_total", "counter"),
    ("tollgate_cluster_nodes", "gauge"),
    ("tollgate_config_reloads_total", "counter"),
];

/// Each of `families` has its `# TYPE` line under its README name.
fn assert_typed(metrics: &str, families: &[(&str, &str)]) {
    for (name, kind) in families {
        let line = format!("# TYPE {name} {kind}\n");
        assert!(metrics.contains(&line), "no {line:?} in\n{metrics}");
    }
}

/// `tollgate_build_info` says 1 and names this crate's version; the process metrics
/// describe a live process started within the last hour.
fn assert_build_and_process(metrics: &str) {
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let build = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_build_info{"))
        .unwrap_or_else(|| panic!("no tollgate_build_info in\n{metrics}"));
    assert!(build.contains(&version), "{build}");
    assert!(build.ends_with("} 1"), "{build}");

    let rss = sample(metrics, "process_resident_memory_bytes");
    assert!(rss > 0.0, "rss {rss}");
    assert!(sample(metrics, "process_virtual_memory_bytes") >= rss);
    let fds = sample(metrics, "process_open_fds");
    assert!(fds > 0.0, "open fds {fds}");
    assert!(sample(metrics, "process_max_fds") >= fds);
    assert!(sample(metrics, "process_cpu_seconds_total") >= 0.0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let start = sample(metrics, "process_start_time_seconds");
    let age = now.as_secs_f64() - start;
    assert!((-1.0..3600.0).contains(&age), "started {age} s ago");
}

/// A policy of 2 requests an hour per client IP, decided at `site`.
fn per_ip(name: &str, site: &str) -> String {
    policy(
        name,
        &["ip"],
        "gcra",
        2,
        "1h",
        &format!("site = \"{site}\""),
    )
}

/// Four requests of client 192.0.2.7 on `path`, whose limit is 2: two allowed, two denied.
async fn allowed_and_denied(gw: SocketAddr, path: &str) {
    let admitted = admitted(gw, path, "192.0.2.7", 4).await;
    assert_eq!(admitted, 2, "{path}: two of four admitted");
}

/// No label carries a limited key (a label per client would grow without bound).
fn assert_no_key(metrics: &str) {
    assert!(
        !metrics.contains("192.0.2.7"),
        "a client's key in\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_a_store_exports_what_promtool_accepts() {
    let redis = RedisServer::start();
    let toml = ConfigBuilder::new("")
        .trust_loopback("")
        .redis(&redis.url(), "500ms")
        .text(&format!(
            "[upstreams.app]\nurls = [\"http://{}\"]\n\
             health = {{ path = \"/\", interval = \"50ms\", timeout = \"50ms\" }}\n",
            echo_upstream().await
        ))
        .text(&per_ip("here", "local"))
        .text(&per_ip("there", "central"))
        .text(&route("local", &["here"], "closed"))
        .text(&route("central", &["there"], "closed"))
        .build();
    let gw = Gateway::start(&toml).await;
    allowed_and_denied(gw.addrs.listen, "/local").await;
    allowed_and_denied(gw.addrs.listen, "/central").await;
    let metrics = metrics_text(gw.addrs.admin_listen.expect("an admin listener")).await;
    let denied = "tollgate_decisions_total{route=\"central\",policy=\"there\",outcome=\"deny\"} 2";
    assert!(metrics.contains(denied), "{denied} in\n{metrics}");
    assert_typed(&metrics, &EVERY_GATEWAY);
    assert_typed(
        &metrics,
        &[
            ("tollgate_store_calls_total", "counter"),
            ("tollgate_store_latency_seconds", "histogram"),
            ("tollgate_store_breaker_open", "gauge"),
            ("tollgate_store_debt_keys", "gauge"),
            ("tollgate_store_debt_dropped_total", "counter"),
            ("tollgate_upstream_healthy", "gauge"),
            ("tollgate_upstream_requests_total", "counter"),
            ("tollgate_upstream_failures_total", "counter"),
            ("tollgate_upstream_in_flight", "gauge"),
            ("tollgate_upstream_ejected", "gauge"),
            ("tollgate_upstream_ejections_total", "counter"),
            ("tollgate_upstream_retries_total", "counter"),
            ("tollgate_upstream_retries_refused_total", "counter"),
        ],
    );
    assert_no_key(&metrics);
    assert_promtool_accepts(&metrics);
    assert_build_and_process(&metrics);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_node_exports_what_promtool_accepts() {
    let limits = format!(
        "{}{}{}{}",
        per_ip("owned", "owner"),
        per_ip("spread", "gossip"),
        route("owner", &["owned"], "closed"),
        route("gossip", &["spread"], "closed"),
    );
    let fleet = peers::start(2, echo_upstream().await, "", &limits, "lint");
    let node = &fleet.nodes[0];
    allowed_and_denied(node.addr, "/owner").await;
    allowed_and_denied(node.addr, "/gossip").await;
    let admin = node.admin.expect("an admin listener");
    let metrics = metrics_text(admin).await;
    assert!(
        metrics.contains("tollgate_peer_calls_total{op=\"ask\"}"),
        "{metrics}"
    );
    assert_typed(&metrics, &EVERY_GATEWAY);
    assert_typed(
        &metrics,
        &[
            ("tollgate_peer_calls_total", "counter"),
            ("tollgate_peer_latency_seconds", "histogram"),
            ("tollgate_peers_live", "gauge"),
            ("tollgate_gossip_sent_cells_total", "counter"),
            ("tollgate_gossip_dropped_total", "counter"),
        ],
    );
    assert_no_key(&metrics);
    assert_promtool_accepts(&metrics);
    assert_build_and_process(&metrics);
    // A second scrape reads /proc again: the CPU counter does not go back.
    let cpu = sample(&metrics, "process_cpu_seconds_total");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(sample(&metrics_text(admin).await, "process_cpu_seconds_total") >= cpu);
}
