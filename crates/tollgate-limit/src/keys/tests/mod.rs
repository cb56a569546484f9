//! Unit tests of key building: each part's folding and ambiguity rules, on facts built by
//! hand (the real-socket tests are `tests/limits/limit_keys.rs` and `tests/limits/key_parts.rs`).
//! `hashing.rs`: which hash key a hashed part uses and when a new one re-keys; `names.rs`:
//! query and cookie names as backends read them; `values.rs`: the token grammar and the
//! values a backend would read otherwise (issue 30); `missing.rs`: `on_missing_key`;
//! `shown.rs`: the key as `show_values` shows it, and a value's look-up.

mod hashing;
mod missing;
mod names;
mod shown;
mod values;

use super::*;
use http::HeaderName;

/// No target: `path` and `query:` parts absent.
pub(super) const T: Target<'static> = Target {
    path: None,
    query: None,
    body: None,
};
use crate::spec::{AlgorithmName, IpKeys, Policy};
use std::num::NonZeroUsize;
use std::time::Duration;

fn builder() -> KeyBuilder {
    builder_hashing_with([7; 16])
}

/// [`builder`] with another hash key.
fn builder_hashing_with(hash_key: [u8; 16]) -> KeyBuilder {
    let ip_keys = IpKeys {
        ipv6_prefix: 64,
        shared_ranges: vec![(
            "100.64.0.0/10".parse().unwrap(),
            NonZeroU32::new(4).unwrap(),
        )],
    };
    let account = Account {
        header: http::HeaderName::from_static("x-api-key"),
        hash_key,
        jwt: None,
    };
    KeyBuilder::new(&ip_keys, Some(account))
}

fn policy(key: Vec<KeyPart>) -> PolicyRuntime {
    policy_showing(key, Vec::new())
}

/// [`policy`] with `show_values`.
fn policy_showing(key: Vec<KeyPart>, show_values: Vec<KeyPart>) -> PolicyRuntime {
    let p = Policy {
        name: "p".into(),
        key,
        algorithm: AlgorithmName::Gcra,
        limit: NonZeroU32::new(10).unwrap(),
        period: Duration::from_secs(1),
        burst: NonZeroU32::new(10).unwrap(),
        cost: NonZeroU32::MIN,
        max_delay: Duration::ZERO,
        mode: None,
        max_keys: NonZeroUsize::new(10).unwrap(),
        site: crate::spec::Site::Local,
        local_first: false,
        lease: Default::default(),
        spend: Default::default(),
        on_missing_key: None,
        show_values,
    };
    PolicyRuntime::new(0, &p, &[NonZeroU32::new(4).unwrap()]).unwrap()
}

/// NAT64 / SIIT, 6to4 and Teredo addresses key as the IPv4 client they carry.
#[test]
fn ipv6_addresses_made_from_an_ipv4_client_key_as_that_client() {
    let b = builder();
    let (m, h) = (Method::GET, HeaderMap::new());
    let p = policy(vec![KeyPart::Ip]);
    let key = |ip: &str| b.key(&p, &b.facts(ip.parse().unwrap(), "r", &m, T, &h));
    for (v6, v4) in [
        ("64:ff9b::198.51.100.7", "198.51.100.7"),
        ("64:ff9b::c633:6408", "198.51.100.8"),
        ("2002:c633:6407:1:2::3", "198.51.100.7"),
        ("2002:c633:6407:ffff::", "198.51.100.7"),
        // Teredo: server 192.0.2.45, client 198.51.100.7 inverted (39cc:9bf8).
        ("2001:0:c000:22d::39cc:9bf8", "198.51.100.7"),
    ] {
        assert_eq!(key(v6), key(v4), "{v6}");
    }
    // Neighbours of those prefixes are IPv6 clients, folded to their /64.
    assert_eq!(
        key("64:ff9b:1::c633:6407").unwrap().as_deref(),
        Some("p:ip:64:ff9b:1::/64")
    );
    assert_eq!(
        key("2001:db8::c633:6407").unwrap().as_deref(),
        Some("p:ip:2001:db8::/64")
    );
}

#[test]
fn ipv6_clients_in_one_64_share_a_key() {
    let b = builder();
    let (m, h) = (Method::GET, HeaderMap::new());
    let p = policy(vec![KeyPart::Ip]);
    let a = b.key(
        &p,
        &b.facts("2001:db8:1:2::1".parse().unwrap(), "r", &m, T, &h),
    );
    let c = b.key(
        &p,
        &b.facts("2001:db8:1:2:ffff::9".parse().unwrap(), "r", &m, T, &h),
    );
    let d = b.key(
        &p,
        &b.facts("2001:db8:1:3::1".parse().unwrap(), "r", &m, T, &h),
    );
    assert_eq!(
        a.as_ref().unwrap().as_deref(),
        Some("p:ip:2001:db8:1:2::/64")
    );
    assert_eq!(a, c);
    assert_ne!(a, d);
}

#[test]
fn cgnat_gets_headroom_and_mapped_v4_is_v4() {
    let b = builder();
    let (m, h) = (Method::GET, HeaderMap::new());
    assert_eq!(
        b.facts("100.64.1.1".parse().unwrap(), "r", &m, T, &h)
            .headroom
            .get(),
        4
    );
    let f = b.facts("::ffff:1.2.3.4".parse().unwrap(), "r", &m, T, &h);
    assert_eq!((f.ip.as_str(), f.headroom.get()), ("1.2.3.4", 1));
}

#[test]
fn account_is_hashed_and_required() {
    let b = builder();
    let m = Method::POST;
    let p = policy(vec![KeyPart::Account, KeyPart::Route]);
    let none = HeaderMap::new();
    assert_eq!(
        b.key(
            &p,
            &b.facts("1.1.1.1".parse().unwrap(), "login", &m, T, &none)
        ),
        Ok(None)
    );
    let mut h = HeaderMap::new();
    h.insert("x-api-key", "sk_live_secret".parse().unwrap());
    let k = b
        .key(&p, &b.facts("1.1.1.1".parse().unwrap(), "login", &m, T, &h))
        .unwrap()
        .unwrap();
    assert!(!k.contains("sk_live_secret"), "{k}");
    assert!(k.starts_with("p:acct:") && k.ends_with(":login"), "{k}");
}

fn key_with(
    b: &KeyBuilder,
    p: &PolicyRuntime,
    m: &Method,
    h: &HeaderMap,
) -> Result<Option<String>, Ambiguous> {
    ambiguous(b.key(p, &b.facts("1.1.1.1".parse().unwrap(), "r", m, T, h)))
}

/// A key, or the ambiguity it was refused for (no token is involved here).
fn ambiguous(r: Result<Option<String>, KeyError>) -> Result<Option<String>, Ambiguous> {
    r.map_err(|e| match e {
        KeyError::Ambiguous(a) => a,
        KeyError::Unverified => panic!("no token in these facts"),
        KeyError::MissingCredential(m) | KeyError::Missing(m) => {
            panic!("these policies skip: {m}")
        }
    })
}

#[test]
fn unknown_methods_share_one_bucket() {
    let (b, h) = (builder(), HeaderMap::new());
    let p = policy(vec![KeyPart::Method]);
    for std in [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ] {
        let m = Method::from_bytes(std.as_bytes()).unwrap();
        assert_eq!(key_with(&b, &p, &m, &h), Ok(Some(format!("p:{std}"))));
    }
    for odd in ["FOO1", "FOO2", "get", "PROPFIND", "OTHER"] {
        let m = Method::from_bytes(odd.as_bytes()).unwrap();
        assert_eq!(
            key_with(&b, &p, &m, &h),
            Ok(Some("p:other".into())),
            "{odd}"
        );
    }
}

#[test]
fn a_needed_header_stated_twice_or_as_a_list_is_ambiguous() {
    let b = builder();
    let m = Method::GET;
    let api_key = HeaderName::from_static("x-api-key");
    let tenant = HeaderName::from_static("x-tenant");
    let by_account = policy(vec![KeyPart::Account]);
    let by_tenant = policy(vec![KeyPart::Header(tenant.clone())]);
    let by_ip = policy(vec![KeyPart::Ip]);
    let mut two_lines = HeaderMap::new();
    two_lines.append(&api_key, "junk".parse().unwrap());
    two_lines.append(&api_key, "real".parse().unwrap());
    two_lines.append(&tenant, "a".parse().unwrap());
    two_lines.append(&tenant, "a".parse().unwrap());
    let mut list = HeaderMap::new();
    list.insert(&api_key, "junk, real".parse().unwrap());
    list.insert(&tenant, "a,b".parse().unwrap());
    for h in [&two_lines, &list] {
        assert_eq!(
            key_with(&b, &by_account, &m, h),
            Err(Ambiguous::Header(api_key.clone()))
        );
        assert_eq!(
            key_with(&b, &by_tenant, &m, h),
            Err(Ambiguous::Header(tenant.clone()))
        );
        // A policy that does not need the header does not care.
        assert!(key_with(&b, &by_ip, &m, h).unwrap().is_some());
    }
    assert_eq!(
        Ambiguous::Header(api_key.clone()).reason(),
        "the `x-api-key` header must appear once, with one value"
    );
    // Absent (or an empty account) keeps today's rule: the policy does not apply.
    let mut empty = HeaderMap::new();
    empty.insert(&api_key, "".parse().unwrap());
    assert_eq!(key_with(&b, &by_account, &m, &empty), Ok(None));
    assert_eq!(key_with(&b, &by_tenant, &m, &empty), Ok(None));
}

/// The key of a one-part policy for a request to `target` with `headers`.
pub(super) fn key_at(
    part: KeyPart,
    target: Target<'_>,
    headers: &HeaderMap,
) -> Result<Option<String>, Ambiguous> {
    let b = builder();
    let m = Method::GET;
    ambiguous(b.key(
        &policy(vec![part]),
        &b.facts("1.1.1.1".parse().unwrap(), "r", &m, target, headers),
    ))
}

fn query(q: &str) -> Result<Option<String>, Ambiguous> {
    let target = Target {
        path: Some("/"),
        query: Some(q),
        body: None,
    };
    key_at(KeyPart::Query("k".into()), target, &HeaderMap::new())
}

#[test]
fn query_values_are_decoded_hashed_and_stated_once() {
    let a = query("k=a").unwrap().unwrap();
    assert!(a.starts_with("p:q:") && !a.ends_with(":a"), "{a}");
    for same in ["k=%61", "x=1&k=a", "K=a", "%6B=a", "k=a&", "k=a&x=1;y"] {
        assert_eq!(query(same).unwrap().as_ref(), Some(&a), "{same}");
    }
    // `a` to Rack 2, no `k` (`;k`) to Werkzeug 3, a dropped pair to Go: read apart.
    for apart in [";k=a", "k=a;x=1", "x;k=a"] {
        assert_eq!(
            query(apart),
            Err(Ambiguous::Semicolon(parts::Named::Query("k".into()))),
            "{apart}"
        );
    }
    assert_eq!(query("k=a+b"), query("k=a%20b"), "+ is a space");
    assert_ne!(query("k=a+b"), query("k=a%2Bb"));
    assert_ne!(query("k=b").unwrap(), Some(a));
    assert_eq!(query("k="), query("k"), "the empty value, one budget");
    assert!(query("k=").unwrap().is_some());
    assert_eq!(query("x=1"), Ok(None), "absent: the policy does not apply");
    for twice in [
        "k=a&k=b",
        "k=a&k=a",
        "k=a;k=b",
        "k=a&K=b",
        "k=a&%6B=b",
        "k&k=a",
    ] {
        assert_eq!(query(twice), Err(Ambiguous::Query("k".into())), "{twice}");
    }
    assert_eq!(
        Ambiguous::Query("k".into()).reason(),
        "the `k` query parameter must appear once"
    );
}

fn cookies(lines: &[&str]) -> Result<Option<String>, Ambiguous> {
    let mut h = HeaderMap::new();
    for l in lines {
        h.append(http::header::COOKIE, l.parse().unwrap());
    }
    key_at(KeyPart::Cookie("sid".into()), T, &h)
}

#[test]
fn cookie_values_are_read_across_lines_and_stated_once() {
    let a = cookies(&["sid=abc"]).unwrap().unwrap();
    assert!(a.starts_with("p:c:") && !a.contains("abc"), "{a}");
    for same in [
        &["x=1; sid=abc"][..],
        &["x=1", "sid=abc"],
        &["sid=%61bc"],
        &["sid=\"abc\""],
        &[" sid = abc ;x=2"],
        &["SID=abc"],
    ] {
        assert_eq!(cookies(same).unwrap().as_ref(), Some(&a), "{same:?}");
    }
    assert_ne!(cookies(&["sid=abd"]).unwrap(), Some(a));
    assert_eq!(cookies(&["sidx=1; xsid=2"]), Ok(None));
    assert!(cookies(&["sid="]).unwrap().is_some());
    for twice in [
        &["sid=a; sid=b"][..],
        &["sid=a", "sid=b"],
        &["x=1, sid=a; sid=b"],
        &["sid=a; sid"],
    ] {
        assert_eq!(
            cookies(twice),
            Err(Ambiguous::Cookie("sid".into())),
            "{twice:?}"
        );
    }
}

fn path(p: &str) -> Option<String> {
    let target = Target {
        path: Some(p),
        query: None,
        body: None,
    };
    key_at(KeyPart::Path, target, &HeaderMap::new()).unwrap()
}

#[test]
fn paths_fold_case_params_and_a_trailing_slash() {
    assert_eq!(path("/api/login").as_deref(), Some("p:path:/api/login"));
    for same in ["/API/Login", "/api/login/", "/api;x=1/login;jsessionid=2"] {
        assert_eq!(path(same).as_deref(), Some("p:path:/api/login"), "{same}");
    }
    assert_eq!(path("/").as_deref(), Some("p:path:/"));
    assert_eq!(path("/a:acct:b").as_deref(), Some("p:path:/a%3aacct%3ab"));
    let long = format!("/{}", "x".repeat(1000));
    assert_eq!(path(&long).unwrap().len(), "p:path:".len() + 256);
    assert_eq!(path(&long), path(&format!("{long}y")), "bounded");
    let none = key_at(KeyPart::Path, T, &HeaderMap::new());
    assert_eq!(none, Ok(None), "no target known: absent");
}

#[test]
fn jwt_claims_key_as_text_and_only_when_verified() {
    let b = builder();
    let m = Method::GET;
    let h = HeaderMap::new();
    let p = policy(vec![KeyPart::Jwt("org".into())]);
    let mut f = b.facts("1.1.1.1".parse().unwrap(), "r", &m, T, &h);
    assert_eq!(b.key(&p, &f), Ok(None), "no token");
    let mut with = |v: serde_json::Value| {
        let mut c = Claims::new();
        c.insert("org".into(), v);
        f.token = Token::Verified(c);
        b.key(&p, &f)
    };
    let n = with(serde_json::json!(42)).unwrap().unwrap();
    assert_eq!(with(serde_json::json!("42")).unwrap(), Some(n.clone()));
    assert!(n.starts_with("p:j:") && !n.contains("42"), "{n}");
    assert!(with(serde_json::json!(true)).unwrap().is_some());
    for absent in [
        serde_json::json!(null),
        serde_json::json!(""),
        serde_json::json!({"a": 1}),
        serde_json::json!(["a"]),
    ] {
        assert_eq!(with(absent.clone()), Ok(None), "{absent}");
    }
    let amb = Ambiguous::Header(HeaderName::from_static("authorization"));
    f.token = Token::Ambiguous(amb.clone());
    assert_eq!(b.key(&p, &f), Err(amb.into()));
}
