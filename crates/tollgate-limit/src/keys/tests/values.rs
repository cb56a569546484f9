//! Values a backend would read otherwise: the `Authorization` grammar, values a backend
//! would trim, and what the red team found (cookie escapes, `j:` cookies, `%uXXXX`).

use super::*;

/// RFC 6750's one grammar: `Bearer`, one space, a `b64token` (or a bare one); every other
/// spelling a backend might still split and strip into the token is refused.
#[test]
fn a_token_header_has_one_grammar() {
    use super::parts::{Credential, credential};
    let auth = HeaderName::from_static("authorization");
    let read = |v: &[u8]| {
        let mut h = HeaderMap::new();
        h.insert(&auth, http::HeaderValue::from_bytes(v).unwrap());
        match credential(&h, &auth) {
            Ok(Credential::Bearer(t)) => Ok(Some(t.to_owned())),
            Ok(Credential::Other) => Ok(None),
            Ok(Credential::None) => panic!("{v:?} is present"),
            Err(e) => Err(e),
        }
    };
    let tok = "eyJh.eyJz.c2ln";
    for good in [
        "Bearer eyJh.eyJz.c2ln",
        "bearer eyJh.eyJz.c2ln",
        "BEARER eyJh.eyJz.c2ln",
    ] {
        assert_eq!(read(good.as_bytes()), Ok(Some(tok.into())), "{good}");
    }
    assert_eq!(read(tok.as_bytes()), Ok(Some(tok.into())), "bare");
    assert_eq!(
        read(b"Bearer eyJh.eyJz.c2ln=="),
        Ok(Some(format!("{tok}==")))
    );
    assert_eq!(read(b"Basic dXNlcjpwYXNz"), Ok(None), "another scheme's");
    for bad in [
        &b"Bearer\teyJh.eyJz.c2ln"[..],
        b"Bearer  eyJh.eyJz.c2ln",
        b"Bearer eyJh.eyJz.c2ln\xa0",
        b"Bearer \xa0eyJh.eyJz.c2ln",
        b"eyJh.eyJz.c2ln\x85",
        b"Bearer eyJh.eyJz.c2ln\xc2\xa0",
        b"Bearer eyJh eyJz.c2ln",
        b"Bearer =eyJh",
        b"Bearer eyJh.eyJz.c2ln=x",
        b"Bearer ",
    ] {
        assert_eq!(read(bad), Err(Ambiguous::Token(auth.clone())), "{bad:?}");
    }
    let mut twice = HeaderMap::new();
    twice.append(&auth, format!("Bearer {tok}").parse().unwrap());
    twice.append(&auth, format!("Bearer {tok}").parse().unwrap());
    assert_eq!(
        credential(&twice, &auth),
        Err(Ambiguous::Header(auth.clone()))
    );
}

/// Values a backend would trim are refused in every part that reads a value.
#[test]
fn unclear_values_are_refused_in_every_part() {
    let mut h = HeaderMap::new();
    h.insert(
        "x-tenant",
        http::HeaderValue::from_bytes(b"acme\xa0").unwrap(),
    );
    h.insert(
        "cookie",
        http::HeaderValue::from_bytes(b"sid=s%E2%80%8B").unwrap(),
    );
    let tenant = KeyPart::Header(HeaderName::from_static("x-tenant"));
    assert_eq!(
        key_at(tenant, T, &h),
        Err(Ambiguous::Unclear(parts::Named::Header(
            HeaderName::from_static("x-tenant")
        )))
    );
    assert_eq!(
        key_at(KeyPart::Cookie("sid".into()), T, &h),
        Err(Ambiguous::Unclear(parts::Named::Cookie("sid".into())))
    );
    for q in [
        "k=%C2%A0v",
        "k=v+",
        "k=%E3%80%80v",
        "k=v%EF%BB%BF",
        "k=v%00",
    ] {
        let target = Target {
            path: Some("/"),
            query: Some(q),
            body: None,
        };
        assert_eq!(
            key_at(KeyPart::Query("k".into()), target, &HeaderMap::new()),
            Err(Ambiguous::Unclear(parts::Named::Query("k".into()))),
            "{q}"
        );
    }
    assert_eq!(
        Ambiguous::Unclear(parts::Named::Query("k".into())).reason(),
        "the `k` query parameter must be UTF-8 without whitespace or an invisible character at either end"
    );
}

/// What the red team found backends read otherwise (issue 30's review): a cookie's
/// backslash escapes (Python's `http.cookies`), Express's `j:` JSON cookies, Rack's `+` in
/// a cookie, classic ASP.NET's `%uXXXX` in a query value.
#[test]
fn values_some_backend_decodes_further_are_refused_or_folded() {
    let sid = KeyPart::Cookie("sid".into());
    let with_cookie = |c: &str| {
        let mut h = HeaderMap::new();
        h.insert("cookie", c.parse().unwrap());
        key_at(sid.clone(), T, &h)
    };
    for c in [
        r#"sid="\victim""#,
        r#"sid="vic\164im""#,
        r#"sid=j:"victim""#,
        "sid=j:[1]",
        "sid=victim+",
    ] {
        assert_eq!(
            with_cookie(c),
            Err(Ambiguous::Unclear(parts::Named::Cookie("sid".into()))),
            "{c}"
        );
    }
    assert_eq!(
        with_cookie("sid=vic+tim"),
        with_cookie("sid=vic%20tim"),
        "Rack's reading"
    );
    assert!(with_cookie("sid=vic+tim").unwrap().is_some());
    for q in ["tenant=vi%u0063tim", "tenant=%U0076ictim"] {
        let target = Target {
            path: Some("/"),
            query: Some(q),
            body: None,
        };
        assert_eq!(
            key_at(KeyPart::Query("tenant".into()), target, &HeaderMap::new()),
            Err(Ambiguous::Unclear(parts::Named::Query("tenant".into()))),
            "{q}"
        );
    }
}
