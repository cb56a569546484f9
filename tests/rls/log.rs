//! Each call's access-log line, as a route's request has it: the domain as the route, the
//! limiter's decision, its deciding policy and key.

use std::time::{Duration, Instant};

use crate::MESSAGING;
use crate::common::peers::free_ports;
use crate::common::process::spawn_serve_with_env;
use crate::common::rls::{RlsClient, codes, request};
use crate::common::temp::TempDir;

#[tokio::test(flavor = "multi_thread")]
async fn each_call_has_an_access_log_line_with_its_decision() {
    let dir = TempDir::new("rls-log");
    let yaml = dir.file("ratelimit.yaml", MESSAGING.as_bytes());
    let log = dir.0.join("access.log");
    let rls = free_ports(1)[0];
    let toml = format!(
        "[server]\naccess_log = \"{}\"\n\n[rls]\nlisten = \"{rls}\"\nconfig = \"{}\"\n",
        log.display(),
        yaml.display()
    );
    let config = dir.file("tollgate.toml", toml.as_bytes());
    // The harness turns the access log off by default; this test reads it.
    let _gw = spawn_serve_with_env(&config, &[("RUST_LOG", "info")]);
    let mut c = RlsClient::start(rls).await;
    let address = request("messaging", &[&[("remote_address", "10.0.0.1")]]);
    for _ in 0..2 {
        c.answer(address.clone()).await;
    }
    assert_eq!(codes(&c.answer(address).await)[0].0, "OVER_LIMIT");
    // The access log is buffered and flushed on its own schedule: poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines.len() >= 3 || Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(lines.len(), 3, "{lines:?}");
    let field = |l: &serde_json::Value, k: &str| {
        let v = l.get(k).or_else(|| l["fields"].get(k));
        v.and_then(|v| v.as_str()).unwrap_or_default().to_owned()
    };
    let decisions: Vec<String> = lines.iter().map(|l| field(l, "decision")).collect();
    assert_eq!(decisions, ["allow", "allow", "deny"], "{lines:?}");
    let last = &lines[2];
    assert_eq!(field(last, "route"), "messaging", "{last}");
    assert_eq!(field(last, "policy"), "messaging.remote_address", "{last}");
    assert_eq!(
        field(last, "path"),
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    );
    assert!(
        field(last, "key").contains("remote_address_10.0.0.1"),
        "{last}"
    );
}
