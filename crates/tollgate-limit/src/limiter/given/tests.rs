//! `Limiter::check_keys` on the local site: per-ask results, all or nothing, shadow mode,
//! the same key asked twice, and the spec rules of given-key policies.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;

use super::{KeyAsk, KeyAskError, Keyed};
use crate::admission::Answer;
use crate::clock::ManualClock;
use crate::handle::tests::spec::{policy, spec};
use crate::limiter::{Limiter, LimiterError};
use crate::spec::{KeyPart, LimiterSpec, Mode, Policy, Site};

fn given(name: &str, limit: u32) -> Policy {
    Policy {
        key: vec![KeyPart::Given],
        ..policy(name, limit, Site::Local)
    }
}

fn build(spec: LimiterSpec) -> Result<Limiter, LimiterError> {
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    Limiter::new(spec, Arc::new(clock), &mut Registry::default())
}

/// Route `api` asks `policies`, on the memory store.
fn limiter(policies: Vec<Policy>) -> Limiter {
    build(spec(policies, None, Duration::from_secs(1))).expect("a valid spec")
}

fn ask<'a>(policy: &'a str, key: &'a str, cost: u32) -> KeyAsk<'a> {
    KeyAsk {
        policy,
        key,
        cost: NonZeroU32::new(cost).expect("not zero"),
    }
}

async fn check(l: &Limiter, asks: &[KeyAsk<'_>]) -> Keyed {
    let route = l.route_index("api").expect("route api");
    l.check_keys(route, asks).await.expect("known policies")
}

/// Allowed, remaining of each ask.
fn figures(k: &Keyed) -> Vec<(bool, Option<u64>)> {
    k.asks.iter().map(|r| (r.allowed, r.remaining)).collect()
}

#[tokio::test]
async fn each_ask_gets_its_limit_and_what_remains() {
    let l = limiter(vec![given("a", 3), given("b", 5)]);
    let k = check(&l, &[ask("a", "x", 1), ask("b", "y", 2)]).await;
    assert!(k.admission.admitted());
    assert_eq!(figures(&k), [(true, Some(2)), (true, Some(3))]);
    assert_eq!((k.asks[0].limit, k.asks[1].limit), (3, 5));
    assert_eq!(k.asks[0].period, Duration::from_secs(60));
    // Another key of the same policy is another budget.
    let k = check(&l, &[ask("a", "other", 1)]).await;
    assert_eq!(figures(&k), [(true, Some(2))]);
}

/// A request one policy refuses spends nothing on the others; the refusing ask says how
/// long until a request of its cost would pass.
#[tokio::test]
async fn a_refused_request_spends_nothing() {
    let l = limiter(vec![given("a", 2), given("b", 5)]);
    for _ in 0..2 {
        assert!(
            check(&l, &[ask("a", "x", 1), ask("b", "y", 1)])
                .await
                .admission
                .admitted()
        );
    }
    let k = check(&l, &[ask("a", "x", 1), ask("b", "y", 1)]).await;
    assert!(matches!(k.admission.answer, Answer::Deny { .. }));
    assert!(!k.asks[0].allowed);
    assert!(k.asks[0].retry_after.is_some_and(|t| t > 0));
    assert_eq!(k.asks[0].remaining, Some(0));
    // b was left at 3 by the two admitted requests; the refused one did not spend it.
    let k = check(&l, &[ask("b", "y", 1)]).await;
    assert_eq!(figures(&k), [(true, Some(2))]);
}

/// A cost the policy can never pass is refused without touching the other asks either.
#[tokio::test]
async fn the_cost_is_the_asks_own() {
    let l = limiter(vec![given("a", 4), given("b", 5)]);
    let k = check(&l, &[ask("a", "x", 3), ask("b", "y", 1)]).await;
    assert_eq!(figures(&k), [(true, Some(1)), (true, Some(4))]);
    let k = check(&l, &[ask("a", "x", 2), ask("b", "y", 1)]).await;
    assert!(!k.admission.admitted());
    assert!(!k.asks[0].allowed);
    let k = check(&l, &[ask("a", "x", 1), ask("b", "y", 1)]).await;
    assert_eq!(figures(&k), [(true, Some(0)), (true, Some(3))]);
}

/// A shadow policy's no admits the request, and its spend follows the all-or-nothing rule.
#[tokio::test]
async fn a_shadow_policy_says_no_without_refusing() {
    let shadow = Policy {
        mode: Some(Mode::Shadow),
        ..given("s", 1)
    };
    let l = limiter(vec![shadow, given("b", 5)]);
    let first = check(&l, &[ask("s", "x", 1), ask("b", "y", 1)]).await;
    assert_eq!(figures(&first), [(true, Some(0)), (true, Some(4))]);
    let k = check(&l, &[ask("s", "x", 1), ask("b", "y", 1)]).await;
    assert!(k.admission.admitted());
    assert_eq!(k.asks[0].mode, Mode::Shadow);
    assert!(!k.asks[0].allowed);
    assert_eq!(
        k.asks[1],
        crate::KeyResult {
            remaining: Some(3),
            ..k.asks[1]
        }
    );
}

/// The same key asked twice is one ask of both costs, and both get its result.
#[tokio::test]
async fn the_same_key_twice_is_counted_twice() {
    let l = limiter(vec![given("a", 3)]);
    let k = check(&l, &[ask("a", "x", 1), ask("a", "x", 1)]).await;
    assert_eq!(figures(&k), [(true, Some(1)), (true, Some(1))]);
    let k = check(&l, &[ask("a", "x", 1), ask("a", "x", 1)]).await;
    assert!(!k.admission.admitted());
    let k = check(&l, &[ask("a", "x", 1)]).await;
    assert_eq!(figures(&k), [(true, Some(0))]);
}

/// Given-key policies are asked only by their key: a policy keyed otherwise cannot be, and
/// the proxy's requests on their route are asked nothing.
#[tokio::test]
async fn only_given_key_policies_are_asked_by_key() {
    let l = limiter(vec![given("a", 1)]);
    let route = l.route_index("api").expect("route api");
    assert_eq!(
        l.check_keys(route, &[ask("b", "x", 1)]).await.err(),
        Some(KeyAskError::NoPolicy {
            route: "api".into(),
            policy: "b".into()
        })
    );
    assert!(l.route_index("web").is_none());
    let (client, name) = ("192.0.2.1".parse().expect("ip"), Arc::from("api"));
    for _ in 0..3 {
        let a = l
            .check(
                route,
                &name,
                client,
                &http::Method::GET,
                &http::HeaderMap::new(),
            )
            .await;
        assert!(a.admitted() && a.decision.policy.is_none());
    }
    let ip = limiter(vec![policy("per_ip", 1, Site::Local)]);
    assert!(matches!(
        ip.check_keys(0, &[ask("per_ip", "x", 1)]).await,
        Err(KeyAskError::NoPolicy { .. })
    ));
}

#[test]
fn a_given_key_is_the_whole_key_and_its_route_asks_nothing_else() {
    let mixed = Policy {
        key: vec![KeyPart::Given, KeyPart::Ip],
        ..given("a", 1)
    };
    let err = |policies| build(spec(policies, None, Duration::from_secs(1))).err();
    assert!(matches!(err(vec![mixed]), Some(LimiterError::Spec(_))));
    let both = vec![given("a", 1), policy("per_ip", 1, Site::Local)];
    assert!(matches!(err(both), Some(LimiterError::Spec(_))));
    let deny = Policy {
        on_missing_key: Some(crate::spec::OnMissingKey::Deny),
        ..given("a", 1)
    };
    assert!(matches!(err(vec![deny]), Some(LimiterError::Spec(_))));
    assert!(err(vec![given("a", 1), given("b", 2)]).is_none());
}
