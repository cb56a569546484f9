//! The key as `show_values` shows it (`keys/shown.rs`) and the needles a value is looked up
//! by, on the shared builder (its hash key `[7; 16]`).

use super::*;
use http::{HeaderMap, HeaderValue, Method};

/// The shown key puts the listed parts in clear, the others as the stored key has them;
/// the stored key is the same with or without `show_values`; a value's needles find
/// both forms.
#[test]
fn shown_parts_are_in_clear_and_the_stored_key_does_not_change() {
    let b = builder();
    let tenant = KeyPart::Header(http::HeaderName::from_static("x-tenant"));
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", HeaderValue::from_static("k-123"));
    headers.insert("x-tenant", HeaderValue::from_static("acme"));
    let m = Method::GET;
    let target = Target::default();
    let facts = b.facts("192.0.2.1".parse().unwrap(), "r", &m, target, &headers);
    let key = vec![KeyPart::Ip, KeyPart::Account, tenant.clone()];
    let hidden = policy(key.clone());
    let shown = policy_showing(key.clone(), vec![tenant.clone()]);
    let all = policy_showing(key, vec![KeyPart::Account, tenant]);
    let stored = b.key(&hidden, &facts).unwrap().unwrap();
    assert_eq!(b.key(&shown, &facts).unwrap().unwrap(), stored);
    assert_eq!(b.shown_key(&hidden, &facts), None);
    let account_hash = stored
        .split(":acct:")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap();
    assert_eq!(
        b.shown_key(&shown, &facts).unwrap(),
        format!("p:ip:192.0.2.1:acct:{account_hash}:h:acme")
    );
    assert_eq!(
        b.shown_key(&all, &facts).unwrap(),
        "p:ip:192.0.2.1:acct:k-123:h:acme"
    );
    let holds = |key: &str, value: &str| {
        b.needles(&all.spec, value)
            .iter()
            .any(|n| crate::top::holds(key, n))
    };
    for key in [stored.as_str(), "p:ip:192.0.2.1:acct:k-123:h:acme"] {
        assert!(holds(key, "k-123"), "{key}");
        assert!(holds(key, "192.0.2.1"), "{key}");
        assert!(!holds(key, "k-12"), "{key}: a prefix is not the value");
    }
    assert!(holds("p:ip:192.0.2.1:acct:k-123:h:acme", "acme"));
}
