//! What each descriptor is answered, as envoyproxy/ratelimit's README examples state it, and
//! the one deliberate difference: a refused request spends nothing.

use serde_json::json;

use crate::common::rls::{codes, request};
use crate::{MESSAGING, served};

fn ok(n: u64) -> (String, u64) {
    ("OK".into(), n)
}

fn over() -> (String, u64) {
    ("OVER_LIMIT".into(), 0)
}

/// Example 4's two descriptors: the most specific rule for each, its limit in
/// `current_limit`, what is left after this request.
#[tokio::test(flavor = "multi_thread")]
async fn each_descriptor_gets_its_rule_and_what_remains() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let any: &[(&str, &str)] = &[("to_number", "2061111111")];
    let r = c.answer(request("messaging", &[marketing, any])).await;
    assert_eq!(r["overall_code"], "OK");
    assert_eq!(codes(&r), [ok(4), ok(99)]);
    assert_eq!(
        r["statuses"][0]["current_limit"],
        json!({"requests_per_unit": 5, "unit": "DAY"})
    );
    assert_eq!(
        r["statuses"][1]["current_limit"],
        json!({"requests_per_unit": 100, "unit": "DAY"})
    );
    // Another number is another budget.
    let other: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2062222222")];
    assert_eq!(
        codes(&c.answer(request("messaging", &[other])).await),
        [ok(4)]
    );
}

/// ★ The sixth marketing message is refused, and spends nothing on the other descriptor:
/// its remaining stays where the fifth left it (envoyproxy/ratelimit would count it).
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_request_spends_nothing() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let any: &[(&str, &str)] = &[("to_number", "2061111111")];
    for n in 0..5 {
        let r = c.answer(request("messaging", &[marketing, any])).await;
        assert_eq!(codes(&r), [ok(4 - n), ok(99 - n)]);
    }
    let r = c.answer(request("messaging", &[marketing, any])).await;
    assert_eq!(r["overall_code"], "OVER_LIMIT");
    assert_eq!(codes(&r)[0], over());
    assert_eq!(
        codes(&r)[1],
        ok(95),
        "the refused request spent nothing: {r}"
    );
    // The wait until one more would pass: a sliding window of 5 a day.
    let wait = r["statuses"][0]["duration_until_reset"]
        .as_str()
        .unwrap_or("0s");
    assert!(wait != "0s", "{r}");
    let r = c.answer(request("messaging", &[any])).await;
    assert_eq!(codes(&r), [ok(94)]);
}

/// `hits_addend` is the request's cost (0 means 1), and the refusal is for that cost.
#[tokio::test(flavor = "multi_thread")]
async fn hits_addend_is_the_cost() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let address: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    let mut two = request("messaging", &[address]);
    two["hits_addend"] = json!(2);
    let r = c.answer(two.clone()).await;
    assert_eq!(codes(&r), [ok(0)]);
    assert_eq!(
        r["statuses"][0]["current_limit"],
        json!({"name": "per_address", "requests_per_unit": 2, "unit": "MINUTE"})
    );
    assert_eq!(codes(&c.answer(two).await), [over()]);
    let mut zero = request("messaging", &[&[("remote_address", "10.0.0.2")]]);
    zero["hits_addend"] = json!(0);
    assert_eq!(codes(&c.answer(zero.clone()).await), [ok(1)]);
    assert_eq!(codes(&c.answer(zero.clone()).await), [ok(0)]);
    assert_eq!(codes(&c.answer(zero).await), [over()]);
}

/// Unlimited: OK with `limit_remaining` at u32::MAX and no limit; shadow: counted, never
/// OVER_LIMIT; a limit of 0: always OVER_LIMIT; an unknown domain or an unmatched
/// descriptor: OK with no limit.
#[tokio::test(flavor = "multi_thread")]
async fn unlimited_shadow_zero_and_unmatched() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let r = c
        .answer(request("messaging", &[&[("unlimited_key", "x")]]))
        .await;
    assert_eq!(codes(&r), [ok(u64::from(u32::MAX))]);
    assert!(r["statuses"][0].get("current_limit").is_none(), "{r}");
    for n in 0..3 {
        let r = c.answer(request("messaging", &[&[("shadow", "x")]])).await;
        assert_eq!(r["overall_code"], "OK", "shadow call {n}: {r}");
        assert_eq!(r["statuses"][0]["code"], "OK");
    }
    let r = c.answer(request("messaging", &[&[("blocked", "x")]])).await;
    assert_eq!(r["overall_code"], "OVER_LIMIT");
    for domain in ["nowhere", "messaging"] {
        let r = c.answer(request(domain, &[&[("no_such_key", "x")]])).await;
        assert_eq!(r["overall_code"], "OK");
        assert_eq!(codes(&r), [ok(0)]);
        assert!(r["statuses"][0].get("current_limit").is_none(), "{r}");
    }
}

/// `[rls] headers = true`: the draft RateLimit headers of the descriptor closest to its
/// limit, in `response_headers_to_add`.
#[tokio::test(flavor = "multi_thread")]
async fn headers_describe_the_closest_limit() {
    let s = served("headers = true", MESSAGING).await;
    let mut c = s.client().await;
    let r = c
        .answer(request(
            "messaging",
            &[&[("to_number", "1")], &[("remote_address", "10.0.0.1")]],
        ))
        .await;
    let headers: Vec<(String, String)> = r["response_headers_to_add"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap_or_default().to_owned();
            (s("key"), s("value"))
        })
        .collect();
    assert_eq!(headers[0], ("RateLimit-Limit".into(), "2, 2;w=60".into()));
    assert_eq!(headers[1], ("RateLimit-Remaining".into(), "1".into()));
    assert_eq!(headers[2].0, "RateLimit-Reset");
}

/// `duration_until_reset` stays within the rule's window, as envoyproxy/ratelimit's does
/// (Envoy passes it on as `x-ratelimit-reset`): on OK at most one unit, though a sliding
/// window's full recovery takes longer; on OVER_LIMIT at most two, even for a cost no
/// window can ever hold.
#[tokio::test(flavor = "multi_thread")]
async fn reset_stays_within_the_rules_window() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let seconds = |r: &serde_json::Value| -> f64 {
        let d = r["statuses"][0]["duration_until_reset"]
            .as_str()
            .unwrap_or("0s");
        d.trim_end_matches('s').parse().unwrap()
    };
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let r = c.answer(request("messaging", &[marketing])).await;
    assert_eq!(codes(&r), [ok(4)]);
    let day = seconds(&r);
    assert!(day > 0.0 && day <= 86_400.0, "OK on 5 a day: {r}");
    let mut huge = request("messaging", &[&[("remote_address", "10.0.0.9")]]);
    huge["hits_addend"] = json!(u32::MAX);
    let r = c.answer(huge).await;
    // Refused, and nothing spent: both requests of the minute are still there.
    assert_eq!(codes(&r), [("OVER_LIMIT".into(), 2)]);
    let wait = seconds(&r);
    assert!(wait > 0.0 && wait <= 120.0, "OVER on 2 a minute: {r}");
}
