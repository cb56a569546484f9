//! When the store cannot decide, `on_store_error` answers: OK (`open`), OVER_LIMIT
//! (`closed`), or gRPC `UNAVAILABLE` (`error`, Envoy's `failure_mode_deny` decides); and
//! decisions are counted in the metrics as a route's are.

use std::sync::Arc;

use tollgate::limit::clock::SystemClock;

use crate::common::rls::{RlsServed, codes, request};
use crate::common::{dead_port, metric_sum, metrics_text};
use crate::{MESSAGING, served, toml};

#[tokio::test(flavor = "multi_thread")]
async fn a_store_outage_answers_as_on_store_error_says() {
    let dead = dead_port().await;
    let call = request("messaging", &[&[("to_number", "1")]]);
    for (setting, want) in [
        ("open", "OK"),
        ("closed", "OVER_LIMIT"),
        ("error", "UNAVAILABLE"),
    ] {
        let extra = format!("site = \"central\"\non_store_error = \"{setting}\"");
        let store = format!(
            "\n[store]\nkind = \"redis\"\nurls = [\"redis://{dead}\"]\ntimeout = \"200ms\"\n"
        );
        let text = format!("{}{store}", toml(&extra));
        let s = RlsServed::start(&text, MESSAGING, Arc::new(SystemClock::new())).await;
        let mut c = s.client().await;
        let got = c.should_rate_limit(call.clone()).await;
        let code = match got.get("response") {
            Some(r) => r["overall_code"].as_str().unwrap_or_default().to_owned(),
            None => got["error"]["code"].as_str().unwrap_or_default().to_owned(),
        };
        assert_eq!(code, want, "on_store_error = {setting}: {got}");
    }
}

/// Each rule's decisions are `tollgate_decisions_total` of its policy, on its domain's route.
#[tokio::test(flavor = "multi_thread")]
async fn decisions_are_counted_per_rule_and_domain() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let address = request("messaging", &[&[("remote_address", "10.0.0.9")]]);
    for _ in 0..3 {
        c.answer(address.clone()).await;
    }
    assert_eq!(codes(&c.answer(address).await)[0].0, "OVER_LIMIT");
    let metrics = metrics_text(s.admin.expect("admin listener")).await;
    let labels = |outcome: &str| {
        format!(
            "tollgate_decisions_total{{route=\"messaging\",policy=\"messaging.remote_address\",outcome=\"{outcome}\"}}"
        )
    };
    assert_eq!(metric_sum(&metrics, &labels("allow")), 2.0, "{metrics}");
    assert_eq!(metric_sum(&metrics, &labels("deny")), 2.0, "{metrics}");
}
