//! `on_missing_key` (`missing.rs`): the key text of `shared` for each part kind that can be
//! missing, what `deny` refuses with, and `skip` as before.

use http::{HeaderMap, HeaderName, Method};

use super::{T, builder, policy};
use crate::keys::{KeyError, KeyPart, MissingKey, Target};
use crate::spec::OnMissingKey;

/// Every part a request can lack, with the tag its key text starts with.
fn missable() -> [(KeyPart, &'static str); 6] {
    [
        (KeyPart::Account, "acct"),
        (KeyPart::Header(HeaderName::from_static("x-username")), "h"),
        (KeyPart::Query("user".into()), "q"),
        (KeyPart::Cookie("session".into()), "c"),
        (KeyPart::Jwt("sub".into()), "j"),
        (KeyPart::Path, "path"),
    ]
}

/// The key of `[ip, part, route]` under `on`, for a request with no header, query or path.
fn key(part: &KeyPart, on: Option<OnMissingKey>) -> Result<Option<String>, KeyError> {
    let b = builder();
    let mut p = policy(vec![KeyPart::Ip, part.clone(), KeyPart::Route]);
    p.spec.on_missing_key = on;
    let (m, h) = (Method::POST, HeaderMap::new());
    b.key(
        &p,
        &b.facts("192.0.2.7".parse().unwrap(), "login", &m, T, &h),
    )
}

#[test]
fn shared_puts_the_missing_marker_where_the_part_would_be() {
    for (part, tag) in missable() {
        assert_eq!(
            key(&part, Some(OnMissingKey::Shared)),
            Ok(Some(format!("p:ip:192.0.2.7:{tag}:missing:login"))),
            "{part:?}"
        );
    }
}

/// A present part is its keyed hash (32 hex digits) under `shared` too: the marker is
/// never a real value's text, and `path` is a path (it starts with `/`).
#[test]
fn shared_keys_present_parts_as_before() {
    let b = builder();
    let mut h = HeaderMap::new();
    h.insert("x-api-key", "alice".parse().unwrap());
    h.insert("x-username", "missing".parse().unwrap());
    h.insert("cookie", "session=missing".parse().unwrap());
    let target = Target {
        path: Some("/missing"),
        query: Some("user=missing"),
        body: None,
    };
    let m = Method::POST;
    let facts = b.facts("192.0.2.7".parse().unwrap(), "login", &m, target, &h);
    for (part, tag) in missable() {
        if part == KeyPart::Jwt("sub".into()) {
            continue; // no `[account] jwt` in this builder: no token to read a claim from
        }
        let mut p = policy(vec![part.clone()]);
        p.spec.on_missing_key = Some(OnMissingKey::Shared);
        let k = b.key(&p, &facts).unwrap().unwrap();
        let text = k.strip_prefix(&format!("p:{tag}:")).unwrap();
        match part {
            KeyPart::Path => assert_eq!(text, "/missing"),
            _ => assert!(
                text.len() == 32 && text.bytes().all(|c| c.is_ascii_hexdigit()),
                "{k}"
            ),
        }
    }
}

#[test]
fn skip_and_unset_do_not_apply_the_policy() {
    for (part, _) in missable() {
        assert_eq!(key(&part, None), Ok(None), "{part:?}");
        assert_eq!(key(&part, Some(OnMissingKey::Skip)), Ok(None), "{part:?}");
    }
}

/// `deny`: 401 for the account and a claim (unauthenticated), 400 for the rest; the reason
/// names the policy and the part.
#[test]
fn deny_names_the_policy_and_the_part() {
    let what = [
        "an account (the `x-api-key` header)",
        "the `x-username` header",
        "the `user` query parameter",
        "the `session` cookie",
        "a verified token with the `sub` claim",
        "a path",
    ];
    for ((part, _), what) in missable().into_iter().zip(what) {
        let unauthenticated = matches!(part, KeyPart::Account | KeyPart::Jwt(_));
        let want = MissingKey {
            policy: "p".into(),
            what: what.into(),
        };
        let want = match unauthenticated {
            true => KeyError::MissingCredential(want),
            false => KeyError::Missing(want),
        };
        assert_eq!(key(&part, Some(OnMissingKey::Deny)), Err(want), "{part:?}");
    }
    let Err(KeyError::Missing(m)) = key(
        &KeyPart::Header(HeaderName::from_static("x-username")),
        Some(OnMissingKey::Deny),
    ) else {
        panic!("deny refuses");
    };
    assert_eq!(m.to_string(), "policy `p` needs the `x-username` header");
}
