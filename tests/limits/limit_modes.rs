//! Modes through the real gateway: shadow counts but changes nothing a client sees, `off`
//! asks nothing, a policy's own mode overrides the route's, and shadow and enforcing policies
//! on one route each do their own job.

use crate::common::limits::*;
use crate::common::*;
use http::StatusCode;
use tollgate::limit::clock::ManualClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_forwards_and_hides_but_counts() {
    let clock = ManualClock::new();
    let gw = gateway(
        echo_upstream().await,
        PER_IP,
        "policies = [\"per_ip\"]\nmode = \"shadow\"",
        &clock,
    )
    .await;
    for _ in 0..5 {
        let r = call(&gw, "198.51.100.9", None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(
            r.headers().get("ratelimit").is_none(),
            "shadow mode changes nothing a client sees"
        );
        assert!(r.headers().get("ratelimit-policy").is_none());
    }
    let m = metrics(&gw).await;
    assert!(m.contains("outcome=\"shadow_deny\"} 3"), "{m}");
    assert!(m.contains("outcome=\"allow\"} 2"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_mode_asks_no_policy() {
    let clock = ManualClock::new();
    let gw = gateway(
        echo_upstream().await,
        PER_IP,
        "policies = [\"per_ip\"]\nmode = \"off\"",
        &clock,
    )
    .await;
    for _ in 0..5 {
        let r = call(&gw, "198.51.100.9", None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("ratelimit").is_none());
    }
    assert!(!metrics(&gw).await.contains("tollgate_decisions_total{"));
}

/// A policy in shadow by its own `mode` on an enforcing route, beside an enforcing policy.
const MIXED: &str = r#"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 2
period = "1s"
burst = 2
mode = "shadow"

[policies.per_acct]
key = ["account"]
algorithm = "gcra"
limit = 3
period = "1m"
burst = 3
"#;

/// The shadow policy (mode set on the policy, overriding the enforcing route) counts its
/// denials and blocks nothing; the enforcing one still denies, alone in the headers and the
/// problem body; the shadow key spends only when every policy allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_level_shadow_beside_an_enforcing_policy() {
    policy_level_shadow_beside_an_enforcing_policy_on(MIXED).await;
}

/// The same at the central site (on the in-process memory store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_level_shadow_beside_an_enforcing_policy_central() {
    let central = MIXED.replace("period =", "site = \"central\"\nperiod =")
        + "\n[store]\nkind = \"memory\"\n";
    policy_level_shadow_beside_an_enforcing_policy_on(&central).await;
}

/// The same at the lease site (cells leased from the in-process memory coordinator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_level_shadow_beside_an_enforcing_policy_lease() {
    // A generous timeout: a loaded test machine must not turn a lease wait into
    // `on_store_error`.
    let lease = MIXED.replace("period =", "site = \"lease\"\nperiod =")
        + "\n[store]\nkind = \"memory\"\ntimeout = \"5s\"\n";
    policy_level_shadow_beside_an_enforcing_policy_on(&lease).await;
}

async fn policy_level_shadow_beside_an_enforcing_policy_on(policies: &str) {
    let clock = ManualClock::new();
    let gw = gateway(
        echo_upstream().await,
        policies,
        "policies = [\"per_ip\", \"per_acct\"]",
        &clock,
    )
    .await;
    // 1-2: both allow. 3: per_ip would deny (shadow), per_acct allows: forwarded.
    for i in 0..3 {
        let r = call(&gw, "198.51.100.9", Some("key-a")).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        // One item, per_acct's (its `pk` partition follows; `ratelimit_fields.rs`).
        let policy = header(&r, "ratelimit-policy").unwrap();
        assert!(!policy.contains(','), "one item: {policy}");
        assert_eq!(
            policy.split(";pk=").next(),
            Some("\"per_acct\";q=3;w=60"),
            "only enforcing policies are shown: {policy}"
        );
    }
    // 4-5: per_acct is spent and denies; per_ip's shadow denial is not named.
    for i in 3..5 {
        let r = call(&gw, "198.51.100.9", Some("key-a")).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "request {i}");
        assert_eq!(json(r).await["policies"], serde_json::json!(["per_acct"]));
    }
    let m = metrics(&gw).await;
    let count = |policy: &str, outcome: &str| {
        metric_sum(
            &m,
            &format!(
                "tollgate_decisions_total{{route=\"api\",policy=\"{policy}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(count("per_acct", "allow"), 3.0, "{m}");
    assert_eq!(count("per_acct", "deny"), 2.0, "{m}");
    assert_eq!(count("per_ip", "allow"), 2.0, "{m}");
    assert_eq!(count("per_ip", "shadow_deny"), 3.0, "{m}");
    assert_eq!(count("per_ip", "deny"), 0.0, "{m}");

    // The shadow key spent only on the two requests every policy allowed: with no account
    // (per_acct does not apply) it is still exhausted, and still only shadow-denies.
    let r = call(&gw, "198.51.100.9", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("ratelimit").is_none());
    let m = metrics(&gw).await;
    assert_eq!(
        metric_sum(
            &m,
            "tollgate_decisions_total{route=\"api\",policy=\"per_ip\",outcome=\"shadow_deny\"}"
        ),
        4.0,
        "{m}"
    );
}
