//! Attacks on issue 16's `path`, `query:` and `cookie:` key parts. Each test asserts the
//! SAFE behaviour, so a failure demonstrates a break.

use std::net::SocketAddr;

use crate::common::config::{limited, policy};
use crate::common::*;
use bytes::Bytes;
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

/// One gcra policy of 1 per hour per key part (`p0`, `p1`, …), all on one route.
async fn one_per_hour(parts: &[&str]) -> Gateway {
    let up = echo_upstream().await;
    let mut cfg = limited(up, "");
    let names: Vec<String> = (0..parts.len()).map(|i| format!("\"p{i}\"")).collect();
    for (i, part) in parts.iter().enumerate() {
        cfg = cfg.text(&policy(&format!("p{i}"), &[part], "gcra", 1, "1h", ""));
    }
    let text = cfg
        .app_route("api", &format!("policies = [{}]", names.join(", ")))
        .build();
    Gateway::start(&text).await
}

/// GET `target`, with a `Cookie` line of these bytes when given: the status.
async fn ask(addr: SocketAddr, target: &str, cookie: Option<&[u8]>) -> StatusCode {
    let mut req = Request::get(format!("http://{addr}{target}"));
    if let Some(c) = cookie {
        req = req.header("cookie", http::HeaderValue::from_bytes(c).unwrap());
    }
    send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .status()
}

/// The spellings (target, cookie) that got through on a spent key: each should be denied.
async fn through(addr: SocketAddr, spellings: &[(&str, Option<&[u8]>)]) -> Vec<String> {
    let mut fresh = Vec::new();
    for &(target, cookie) in spellings {
        if ask(addr, target, cookie).await != DENIED {
            let cookie = cookie.map(String::from_utf8_lossy);
            fresh.push(format!("{target} {cookie:?}"));
        }
    }
    fresh
}

/// Was a break (fixed): PHP's `$_GET` and `$_COOKIE` read `api.key`, `api key` and `api[key`
/// as `api_key` (and PHP and Rails read `api_key[]` as `api_key`), so renaming the parameter
/// walked around its spent key. Once `api_key=k` and `session_id=s` are spent, every
/// spelling of them is too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_a_backend_reads_as_the_keys_name_share_its_budget() {
    let gw = one_per_hour(&["query:api_key"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/?api_key=k", None).await, OK);
    let queries = [
        "/?api_key=k",
        "/?api.key=k",
        "/?api%20key=k",
        "/?api+key=k",
        "/?api[key=k",
        "/?api_key[]=k",
    ];
    let spellings: Vec<_> = queries.iter().map(|q| (*q, None)).collect();
    assert_eq!(through(addr, &spellings).await, Vec::<String>::new());
    let gw = one_per_hour(&["cookie:session_id"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/", Some(b"session_id=s")).await, OK);
    let cookies: [&[u8]; 4] = [
        b"session_id=s",
        b"session.id=s",
        b"session id=s",
        b"session%2Eid=s",
    ];
    let spellings: Vec<_> = cookies.iter().map(|c| ("/", Some(*c))).collect();
    assert_eq!(through(addr, &spellings).await, Vec::<String>::new());
}

/// Was a break (fixed): Rack 2 (Rails up to 7.0) reads a name by `\A[\[\]]*([^\[\]]+)\]*`,
/// and Express's `qs` reads a leading `[name]` as `name`: to both, `[api_key]=k` is
/// `api_key=k` (and to Rack 2 `api_key]=k` and `]api_key=k` too), which the gateway did not
/// see as `api_key`: unlimited requests on a spent key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bracketed_names_rack2_and_qs_read_as_the_name_share_its_budget() {
    let gw = one_per_hour(&["query:api_key"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/?api_key=k", None).await, OK);
    let queries = [
        "/?api_key=k",
        "/?[api_key]=k",
        "/?api_key]=k",
        "/?]api_key=k",
        "/?[api_key=k",
    ];
    let spellings: Vec<_> = queries.iter().map(|q| (*q, None)).collect();
    assert_eq!(through(addr, &spellings).await, Vec::<String>::new());
}

/// Was a break (fixed): Werkzeug (Flask; `str.strip()` on the latin-1 header), Django's
/// `parse_cookie` (`str.strip()` after UTF-8 decoding) and the `cookie` npm package before
/// 0.7 (Express's cookie-parser; JS `trim()`) strip Unicode whitespace around a cookie name:
/// to them `\xa0session_id=s` (and `\x85…`, `\u3000…`, a trailing NBSP) is `session_id=s`.
/// The gateway trimmed ASCII whitespace only, so it saw no `session_id` at all and the
/// policy did not apply. (Werkzeug 3.1.8 checked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_names_padded_with_unicode_whitespace_share_its_budget() {
    let gw = one_per_hour(&["cookie:session_id"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/", Some(b"session_id=s")).await, OK);
    let cookies: [&[u8]; 6] = [
        b"session_id=s",
        b"a=1; \xa0session_id=s", // Werkzeug 3, cookie<0.7 (latin-1 U+00A0)
        b"a=1; session_id\xa0=s", // Werkzeug 3 (trailing)
        b"a=1;\x85session_id=s",  // Werkzeug 3 (U+0085)
        b"a=1; \xc2\xa0session_id=s", // Django (UTF-8 U+00A0)
        b"\xe3\x80\x80session_id=s", // Django (UTF-8 U+3000)
    ];
    let spellings: Vec<_> = cookies.iter().map(|c| ("/", Some(*c))).collect();
    assert_eq!(through(addr, &spellings).await, Vec::<String>::new());
}

/// Was a break (fixed): a configured name with brackets (`query:user[email]`, Rails'
/// nested parameters, JSON:API's `page[number]`) was compared with each sent name cut at
/// its first bracket, so it matched no request and its policy applied to none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_query_name_with_brackets_is_limited() {
    let gw = one_per_hour(&["query:user[email]"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/?user[email]=a", None).await, OK);
    assert_eq!(
        ask(addr, "/?user[email]=a", None).await,
        DENIED,
        "sent twice at 1/h"
    );
}

/// Was a break (fixed): classic ASP.NET (System.Web: `HttpValueCollection` decodes names
/// with `HttpUtility.UrlDecode`, which also reads `%uXXXX`) reads `api_k%u0065y` as
/// `api_key`; Spring's `WebDataBinder` binds `!api_key=v` as `api_key` when `api_key` is
/// absent (its field-default prefix); PHP before 7.4.31 / 8.0.24 / 8.1.11 url-decoded cookie
/// names, `+` included, so `session+id` was `$_COOKIE['session_id']`. Each reached the
/// backend as the spent name while the gateway saw no such name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_aspnet_spring_and_older_php_read_as_the_name_share_its_budget() {
    let gw = one_per_hour(&["query:api_key", "cookie:session_id"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/?api_key=k", Some(b"session_id=s")).await, OK);
    let spellings: [(&str, Option<&[u8]>); 3] = [
        ("/?api_k%u0065y=k", None),   // classic ASP.NET
        ("/?!api_key=k", None),       // Spring data binding
        ("/", Some(b"session+id=s")), // PHP < 8.1.11
    ];
    assert_eq!(through(addr, &spellings).await, Vec::<String>::new());
}

/// Was a break (fixed): a configured nested name was compared whole, byte for byte, but
/// mainstream parsers read other spellings as that very nested key. PHP
/// (`php_register_variable_ex`: after an index's `]`, anything but `[` ends the name) and
/// Express's `qs` read `user[email]x` as `user[email]`; PHP and Rack 2 (`\]*` after each
/// key) read `user[email]]` so; Rack 2 also skips leading brackets (`]user[email]`) and eats
/// extra `]` after a key (`user]][email]`). Names are now read as paths by each parser's
/// rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_name_spellings_share_its_budget() {
    let gw = one_per_hour(&["query:user[email]"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/?user[email]=a", None).await, OK);
    let queries = [
        "/?user[email]=a",
        "/?user[email]x=a",
        "/?user[email]]=a",
        "/?]user[email]=a",
        "/?user]][email]=a",
    ];
    let spellings: Vec<_> = queries.iter().map(|q| (*q, None)).collect();
    assert_eq!(through(addr, &spellings).await, Vec::<String>::new());
}

/// Issue 46: a raw `;` is read three ways — `?k=a;x=1` is `a;x=1` to Werkzeug 3, Django and
/// PHP, `a` to Rack 2, and no `k` at all to Go — so it is refused (400), not keyed `a` as
/// the gateway did. A `;` in another parameter, or sent as `%3B`, is read one way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_semicolon_in_the_keyed_parameter_is_refused() {
    let gw = one_per_hour(&["query:k"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(ask(addr, "/?k=a;x=1", None).await, StatusCode::BAD_REQUEST);
    assert_eq!(ask(addr, "/?x=1;k=a", None).await, StatusCode::BAD_REQUEST);
    assert_eq!(ask(addr, "/?k=a&note=x;y", None).await, OK);
    assert_eq!(ask(addr, "/?k=a", None).await, DENIED, "that was `a`");
    assert_eq!(ask(addr, "/?k=a%3Bx%3D1", None).await, OK, "`a;x=1`, a key");
    assert_eq!(ask(addr, "/?k=a%3Bx%3D1", None).await, DENIED);
}
