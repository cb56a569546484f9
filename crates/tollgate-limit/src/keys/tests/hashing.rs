//! The hash key of hashed parts: one key with or without `[account]`, and a new key
//! re-keys hashed parts only (a reload then resets those policies and says why).

use super::*;
use http::HeaderName;

/// Another hash key re-keys every hashed part (a reload cannot carry those keys' state);
/// `path` and the other plain parts keep their keys.
#[test]
fn a_new_hash_key_rekeys_hashed_parts_only() {
    let (old, next) = (builder(), builder_hashing_with([8; 16]));
    for hashed in [
        KeyPart::Account,
        KeyPart::Header(HeaderName::from_static("x-tenant")),
        KeyPart::Query("k".into()),
        KeyPart::Cookie("sid".into()),
        KeyPart::Jwt("org".into()),
    ] {
        assert!(
            old.rekeys(&next, &[KeyPart::Path, hashed.clone()]),
            "{hashed:?}"
        );
    }
    assert!(!old.rekeys(&next, &[KeyPart::Path, KeyPart::Route, KeyPart::Method]));
    assert!(!old.rekeys(&builder(), &[KeyPart::Query("k".into())]));
}

/// An `[account]` without a hash key of its own hashes with the same default key as no
/// `[account]` at all: writing the section re-keys no `header:` / `query:` / `form:` part
/// (a reload that adds it keeps their state), and both build the same key strings.
#[test]
fn the_default_hash_key_does_not_depend_on_an_account_section() {
    let ip_keys = IpKeys::default();
    let account = |hash_key| Account {
        header: HeaderName::from_static("x-api-key"),
        hash_key,
        jwt: None,
    };
    let without = KeyBuilder::new(&ip_keys, None);
    let with = KeyBuilder::new(&ip_keys, Some(account(crate::spec::default_hash_key())));
    let part = KeyPart::Header(HeaderName::from_static("x-user"));
    assert!(!without.rekeys(&with, std::slice::from_ref(&part)));
    let p = policy(vec![part.clone()]);
    let mut headers = http::HeaderMap::new();
    headers.insert("x-user", "alice".parse().unwrap());
    let method = http::Method::POST;
    let key = |b: &KeyBuilder| {
        b.key(
            &p,
            &b.facts("127.0.0.1".parse().unwrap(), "r", &method, T, &headers),
        )
    };
    let (a, b) = (key(&without), key(&with));
    assert!(matches!(&a, Ok(Some(_))), "{a:?}");
    assert_eq!(a, b);
    // A key of the operator's own is another meaning: that does re-key.
    let own = KeyBuilder::new(&ip_keys, Some(account([9; 16])));
    assert!(without.rekeys(&own, &[part]));
    assert_ne!(key(&own), a);
}
