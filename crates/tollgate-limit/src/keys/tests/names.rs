//! Query and cookie names as backends read them (`parts.rs`: `same_name`): every spelling a
//! common backend reads as the configured name shares its key.

use http::HeaderMap;

use super::{T, key_at};
use crate::keys::KeyPart;
use crate::keys::Target;
use crate::keys::parts::Ambiguous;

/// PHP reads `api.key`, `api key` and `api[key` as `api_key`; PHP and Rails read
/// `api_key[]` as `api_key` (an array), Rack 2 and `qs` `[api_key]` too: one budget, and two
/// spellings at once are the name twice.
#[test]
fn names_are_read_as_php_and_rails_read_them() {
    let q = |q: &str| {
        let target = Target {
            path: Some("/"),
            query: Some(q),
            body: None,
        };
        key_at(KeyPart::Query("api_key".into()), target, &HeaderMap::new())
    };
    let a = q("api_key=k").unwrap().unwrap();
    for same in [
        "api.key=k",
        "api%20key=k",
        "api+key=k",
        "api[key=k",
        "api_key[]=k",
        "api_key[0]=k",
        "+api_key=k",
        "API.KEY=k",
        "api%2Ekey=k",
        "api_key%00x=k",
        "[api_key]=k",
        "]api_key=k",
        "api_key]=k",
        "[api_key=k",
        "[[api_key]][x]=k",
    ] {
        assert_eq!(q(same).unwrap().as_ref(), Some(&a), "{same}");
    }
    for other in [
        "api[key]=k",
        "apikey=k",
        "api__key=k",
        "api_keys=k",
        "api=k&key=k",
    ] {
        assert_eq!(q(other), Ok(None), "{other}");
    }
    assert_eq!(
        q("api_key=k&api.key=j"),
        Err(Ambiguous::Query("api_key".into()))
    );
    let c = |line: &str| {
        let mut h = HeaderMap::new();
        h.append(http::header::COOKIE, line.parse().unwrap());
        key_at(KeyPart::Cookie("session_id".into()), T, &h)
    };
    let s = c("session_id=s").unwrap().unwrap();
    for same in [
        "session.id=s",
        "session id=s",
        "session%2Eid=s",
        "session_id[]=s",
    ] {
        assert_eq!(c(same).unwrap().as_ref(), Some(&s), "{same}");
    }
    assert_eq!(
        c("session_id=s; session.id=t"),
        Err(Ambiguous::Cookie("session_id".into()))
    );
}

/// Classic ASP.NET's `%uXXXX`, Spring's `!` default, Unicode whitespace (Werkzeug, Django,
/// JS `trim`) and old PHP's `+` in cookie names; a configured nested name (`user[email]`)
/// is compared whole.
#[test]
fn names_are_read_as_aspnet_spring_and_python_read_them() {
    let q = |name: &str, q: &str| {
        let target = Target {
            path: Some("/"),
            query: Some(q),
            body: None,
        };
        key_at(KeyPart::Query(name.into()), target, &HeaderMap::new())
    };
    let a = q("api_key", "api_key=k").unwrap().unwrap();
    for same in [
        "api_k%u0065y=k",
        "api_k%U0065y=k",
        "!api_key=k",
        "%C2%A0api_key%E3%80%80=k",
    ] {
        assert_eq!(q("api_key", same).unwrap().as_ref(), Some(&a), "{same}");
    }
    for other in ["api_k%u00=k", "!!api_key=k", "api%C2%A0key=k"] {
        assert_eq!(q("api_key", other), Ok(None), "{other}");
    }
    let nested = q("user[email]", "user[email]=a").unwrap().unwrap();
    assert_eq!(
        q("user[email]", "USER[EMAIL]=a").unwrap(),
        Some(nested.clone())
    );
    assert_eq!(q("user[email]", "user=a&user[name]=b"), Ok(None));
    for same in [
        "user[email]x=a",
        "user[email]]=a",
        "]user[email]=a",
        "user]][email]=a",
        "user[email][]=a",
    ] {
        assert_eq!(
            q("user[email]", same).unwrap().as_ref(),
            Some(&nested),
            "{same}"
        );
    }
    assert_eq!(
        q("user[email]", "user[email]=a&user[email]x=b"),
        Err(Ambiguous::Query("user[email]".into()))
    );
    let c = |line: &[u8]| {
        let mut h = HeaderMap::new();
        h.append(
            http::header::COOKIE,
            http::HeaderValue::from_bytes(line).unwrap(),
        );
        key_at(KeyPart::Cookie("session_id".into()), T, &h)
    };
    let s = c(b"session_id=s").unwrap().unwrap();
    for same in [
        &b"session+id=s"[..],
        b"\xa0session_id\x85=s",
        b"\xef\xbb\xbfsession_id=s",
    ] {
        assert_eq!(
            c(same).unwrap().as_ref(),
            Some(&s),
            "{}",
            String::from_utf8_lossy(same)
        );
    }
    assert_eq!(
        c(b"session_id=s; \xa0session_id=t"),
        Err(Ambiguous::Cookie("session_id".into()))
    );
}

/// Spellings of a configured nested name that a mainstream parser reads as it (review-i:
/// each got a fresh budget):
/// - Express `qs`: the parent ends at the first *closed* group and children are every
///   `[…]` group anywhere after it, not only adjacent ones; an empty parent is skipped and
///   `[user]` is cleaned to `user`. So `[user]x[email]` is `req.query.user.email`.
/// - Spring's binder: a map key may be quoted (`user['email']`, `user["email"]`:
///   `AbstractNestablePropertyAccessor.getPropertyNameTokens` strips the quotes), and the
///   `!` default prefix applies to any writable path (`!user[email]`), not a plain one only.
#[test]
fn nested_names_read_by_qs_and_spring() {
    let q = |q: &str| {
        let target = Target {
            path: Some("/"),
            query: Some(q),
            body: None,
        };
        key_at(
            KeyPart::Query("user[email]".into()),
            target,
            &HeaderMap::new(),
        )
    };
    let nested = q("user[email]=a").unwrap().unwrap();
    let mut missed = Vec::new();
    for same in [
        "[user]x[email]=a",
        "user['email']=a",
        "user[%22email%22]=a",
        "!user[email]=a",
    ] {
        if q(same).ok().flatten().as_ref() != Some(&nested) {
            missed.push(same);
        }
    }
    assert!(
        missed.is_empty(),
        "read as user[email] by a backend, not by the gateway: {missed:?}"
    );
}
