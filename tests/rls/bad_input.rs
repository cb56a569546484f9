//! Malformed or oversized calls get a gRPC error naming what is wrong, never a panic; the
//! health service answers on the same port.

use serde_json::json;

use crate::common::rls::request;
use crate::{MESSAGING, served};

#[tokio::test(flavor = "multi_thread")]
async fn bad_calls_get_grpc_errors_naming_the_bound() {
    let s = served(
        "max_descriptors = 2\nmax_entries = 2\nmax_value_bytes = 9",
        MESSAGING,
    )
    .await;
    let mut c = s.client().await;
    let entry: &[(&str, &str)] = &[("to_number", "1")];
    let cases = [
        (request("", &[entry]), "INVALID_ARGUMENT", "domain"),
        (
            json!({"domain": "messaging"}),
            "INVALID_ARGUMENT",
            "descriptor",
        ),
        (
            json!({"domain": "messaging", "descriptors": [{"entries": []}]}),
            "INVALID_ARGUMENT",
            "descriptors[0]",
        ),
        (
            request("messaging", &[entry, entry, entry]),
            "RESOURCE_EXHAUSTED",
            "max_descriptors (2)",
        ),
        (
            request("messaging", &[&[("a", "1"), ("b", "2"), ("c", "3")]]),
            "RESOURCE_EXHAUSTED",
            "max_entries (2)",
        ),
        (
            request("messaging", &[&[("to_number", "1234567890")]]),
            "INVALID_ARGUMENT",
            "max_value_bytes (9)",
        ),
    ];
    for (call, code, fragment) in cases {
        let got = c.should_rate_limit(call.clone()).await;
        assert_eq!(got["error"]["code"], code, "{call}: {got}");
        let details = got["error"]["details"].as_str().unwrap_or_default();
        assert!(details.contains(fragment), "{call}: {got}");
    }
    // Still serving after every refusal.
    let r = c.answer(request("messaging", &[entry])).await;
    assert_eq!(r["overall_code"], "OK");
}

#[tokio::test(flavor = "multi_thread")]
async fn health_says_serving_on_the_same_port() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    assert_eq!(c.health("").await, "SERVING");
    assert_eq!(
        c.health("envoy.service.ratelimit.v3.RateLimitService")
            .await,
        "SERVING"
    );
}
