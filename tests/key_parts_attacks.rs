//! Attacks on issue 16's `path`, `query:` and `cookie:` key parts. Each test asserts the
//! SAFE behaviour, so a failure demonstrates a break.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::config::{limited, policy};
use common::*;
use http::{Request, StatusCode};
use http_body_util::Empty;

const OK: StatusCode = StatusCode::OK;
const DENIED: StatusCode = StatusCode::TOO_MANY_REQUESTS;

async fn send(addr: SocketAddr, path: &str) -> StatusCode {
    let req = Request::get(format!("http://{addr}{path}"))
        .header("x-forwarded-for", "203.0.113.9")
        .body(Empty::<Bytes>::new())
        .unwrap();
    send_h1(addr, req).await.status()
}

/// One policy, 2 per hour keyed on `path`, on a catch-all route.
async fn gateway() -> Gateway {
    let up = echo_upstream().await;
    // `path_parameters = "keep"`: the only mode where `;` reaches the key (the default
    // refuses it with 400, which holds).
    let text = limited(up, "")
        .text(&policy("p", &["path"], "gcra", 2, "1h", ""))
        .app_route("api", "policies = [\"p\"]")
        .build()
        .replace("[server]\n", "[server]\npath_parameters = \"keep\"\n");
    Gateway::start(&text).await
}

/// Was a break (fixed): `path_part` strips one trailing `/` *before* dropping `;params`, so a segment
/// made only of a parameter (`/;x`) leaves a `/` behind that is never folded:
/// `/api/login/;a` keys as `/api/login/`, `/api/login/;a/;b` as `/api/login//`, and so on —
/// an unbounded number of fresh budgets for one endpoint on any backend that strips
/// `;params` (servlet containers, the very case the fold exists for) and folds empty
/// segments / a trailing slash. Once `/api/login` is spent, every spelling must be denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_param_only_segments_share_the_endpoints_budget() {
    let gw = gateway().await;
    let addr = gw.addrs.listen;
    assert_eq!(send(addr, "/api/login").await, OK);
    assert_eq!(send(addr, "/api/login").await, OK);
    assert_eq!(send(addr, "/api/login").await, DENIED, "budget spent");
    // Spellings the code itself promises to fold (held):
    assert_eq!(send(addr, "/api/login/").await, DENIED);
    assert_eq!(send(addr, "/api/login;jsessionid=1").await, DENIED);
    // The break: a parameter-only segment.
    let mut fresh = Vec::new();
    for p in ["/api/login/;a", "/api/login/;a/;b", "/api/login/;a/;b/;c"] {
        if send(addr, p).await != DENIED {
            fresh.push(p);
        }
    }
    assert!(
        fresh.is_empty(),
        "spent `/api/login`, yet these spellings got a fresh budget: {fresh:?}"
    );
}

/// Was a break (fixed): PHP's `$_GET` and `$_COOKIE` read `api.key`, `api key` and `api[key`
/// as `api_key` (and PHP and Rails read `api_key[]` as `api_key`), so renaming the parameter
/// walked around its spent key. Once `api_key=k` and `session_id=s` are spent, every
/// spelling of them is too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_a_backend_reads_as_the_keys_name_share_its_budget() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy("per_key", &["query:api_key"], "gcra", 1, "1h", ""))
        .text(&policy(
            "per_session",
            &["cookie:session_id"],
            "gcra",
            1,
            "1h",
            "",
        ))
        .app_route("api", "policies = [\"per_key\", \"per_session\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    let ask = |target: &str, cookie: Option<&str>| {
        let mut req = Request::get(format!("http://{addr}{target}"));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())
    };
    assert_eq!(ask("/?api_key=k", None).await.status(), OK);
    for spelling in [
        "/?api_key=k",
        "/?api.key=k",
        "/?api%20key=k",
        "/?api+key=k",
        "/?api[key=k",
        "/?api_key[]=k",
    ] {
        assert_eq!(ask(spelling, None).await.status(), DENIED, "{spelling}");
    }
    assert_eq!(ask("/", Some("session_id=s")).await.status(), OK);
    for spelling in [
        "session_id=s",
        "session.id=s",
        "session id=s",
        "session%2Eid=s",
    ] {
        assert_eq!(
            ask("/", Some(spelling)).await.status(),
            DENIED,
            "{spelling}"
        );
    }
}

/// Was a break (fixed): Rack 2 (Rails up to 7.0) reads a name by `\A[\[\]]*([^\[\]]+)\]*`,
/// and Express's `qs` reads a leading `[name]` as `name`: to both, `[api_key]=k` is
/// `api_key=k` (and to Rack 2 `api_key]=k` and `]api_key=k` too), which the gateway did not
/// see as `api_key`: unlimited requests on a spent key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bracketed_names_rack2_and_qs_read_as_the_name_share_its_budget() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy("per_key", &["query:api_key"], "gcra", 1, "1h", ""))
        .app_route("api", "policies = [\"per_key\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    assert_eq!(send(addr, "/?api_key=k").await, OK);
    assert_eq!(send(addr, "/?api_key=k").await, DENIED);
    let mut fresh = Vec::new();
    for spelling in [
        "/?[api_key]=k",
        "/?api_key]=k",
        "/?]api_key=k",
        "/?[api_key=k",
    ] {
        if send(addr, spelling).await != DENIED {
            fresh.push(spelling);
        }
    }
    assert!(
        fresh.is_empty(),
        "spent `api_key=k`, yet these got through: {fresh:?}"
    );
}

/// Was a break (fixed): Werkzeug (Flask; `str.strip()` on the latin-1 header), Django's
/// `parse_cookie` (`str.strip()` after UTF-8 decoding) and the `cookie` npm package before
/// 0.7 (Express's cookie-parser; JS `trim()`) strip Unicode whitespace around a cookie name:
/// to them `\xa0session_id=s` (and `\x85…`, `\u3000…`, a trailing NBSP) is `session_id=s`.
/// The gateway trims ASCII whitespace only, so it sees no `session_id` at all and the
/// policy does not apply: unlimited requests on a spent session. (Werkzeug 3.1.8 checked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_names_padded_with_unicode_whitespace_share_its_budget() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "per_session",
            &["cookie:session_id"],
            "gcra",
            1,
            "1h",
            "",
        ))
        .app_route("api", "policies = [\"per_session\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    let ask = |cookie: &'static [u8]| {
        let req = Request::get(format!("http://{addr}/"))
            .header("cookie", http::HeaderValue::from_bytes(cookie).unwrap())
            .body(Empty::<Bytes>::new())
            .unwrap();
        async move { send_h1(addr, req).await.status() }
    };
    assert_eq!(ask(b"session_id=s").await, OK);
    assert_eq!(ask(b"session_id=s").await, DENIED, "budget spent");
    let mut fresh = Vec::new();
    for spelling in [
        &b"a=1; \xa0session_id=s"[..], // Werkzeug 3, cookie<0.7 (latin-1 U+00A0)
        b"a=1; session_id\xa0=s",      // Werkzeug 3 (trailing)
        b"a=1;\x85session_id=s",       // Werkzeug 3 (U+0085)
        b"a=1; \xc2\xa0session_id=s",  // Django (UTF-8 U+00A0)
        b"\xe3\x80\x80session_id=s",   // Django (UTF-8 U+3000)
    ] {
        if ask(spelling).await != DENIED {
            fresh.push(String::from_utf8_lossy(spelling).into_owned());
        }
    }
    assert!(
        fresh.is_empty(),
        "spent `session_id=s`, yet these got through: {fresh:?}"
    );
}

/// Was a break (fixed): a configured name with brackets (`query:user[email]`, Rails'
/// nested parameters, JSON:API's `page[number]`) was compared with each sent name cut at
/// its first bracket, so it matched no request and its policy applied to none. It is
/// compared whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_query_name_with_brackets_is_limited() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "per_email",
            &["query:user[email]"],
            "gcra",
            1,
            "1h",
            "",
        ))
        .app_route("api", "policies = [\"per_email\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    assert_eq!(send(addr, "/?user[email]=a").await, OK);
    assert_eq!(
        send(addr, "/?user[email]=a").await,
        DENIED,
        "the exact configured name, sent twice at 1/h"
    );
}

/// Was a break (fixed): classic ASP.NET (System.Web: `HttpValueCollection` decodes names
/// with `HttpUtility.UrlDecode`, which also reads `%uXXXX`) reads `api_k%u0065y` as
/// `api_key`; Spring's `WebDataBinder` binds `!api_key=v` as `api_key` when `api_key` is
/// absent (its field-default prefix); PHP before 7.4.31 / 8.0.24 / 8.1.11 url-decoded cookie
/// names, `+` included, so `session+id` was `$_COOKIE['session_id']` (the gateway already
/// decodes `%2E` in cookie names for that PHP, but not `+`). Each reaches the backend as
/// the spent name while the gateway sees no such name: the policy does not apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_aspnet_spring_and_older_php_read_as_the_name_share_its_budget() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy("per_key", &["query:api_key"], "gcra", 1, "1h", ""))
        .text(&policy(
            "per_session",
            &["cookie:session_id"],
            "gcra",
            1,
            "1h",
            "",
        ))
        .app_route("api", "policies = [\"per_key\", \"per_session\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    let ask = |target: &str, cookie: Option<&str>| {
        let mut req = Request::get(format!("http://{addr}{target}"));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())
    };
    assert_eq!(ask("/?api_key=k", Some("session_id=s")).await.status(), OK);
    let mut fresh = Vec::new();
    for (target, cookie) in [
        ("/?api_k%u0065y=k", None),  // classic ASP.NET
        ("/?!api_key=k", None),      // Spring data binding
        ("/", Some("session+id=s")), // PHP < 8.1.11
    ] {
        if ask(target, cookie).await.status() != DENIED {
            fresh.push(format!("{target} {cookie:?}"));
        }
    }
    assert!(
        fresh.is_empty(),
        "spent `api_key=k` and `session_id=s`, yet these got through: {fresh:?}"
    );
}

/// Was a break (fixed): a configured nested name was compared whole, byte for byte, but
/// mainstream parsers read other spellings as that very nested key. PHP (`php_register_variable_ex`:
/// after an index's `]`, anything but `[` ends the name and is ignored) and Express's `qs`
/// (text after the last bracket group is dropped) read `user[email]x` as
/// `user[email]`; PHP and Rack 2 (`\]*` after each key) read `user[email]]` so; Rack 2 also
/// skips leading brackets (`]user[email]`) and eats extra `]` after a key
/// (`user]][email]`). Each reaches the backend as the spent `user[email]` while the
/// gateway saw no such name. Names are now read as paths by each parser's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_name_spellings_share_its_budget() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "per_email",
            &["query:user[email]"],
            "gcra",
            1,
            "1h",
            "",
        ))
        .app_route("api", "policies = [\"per_email\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    assert_eq!(send(addr, "/?user[email]=a").await, OK);
    assert_eq!(send(addr, "/?user[email]=a").await, DENIED, "spent");
    let mut fresh = Vec::new();
    for q in [
        "/?user[email]x=a",
        "/?user[email]]=a",
        "/?]user[email]=a",
        "/?user]][email]=a",
    ] {
        if send(addr, q).await != DENIED {
            fresh.push(q);
        }
    }
    assert!(
        fresh.is_empty(),
        "spent `user[email]=a`, yet these got through: {fresh:?}"
    );
}
