//! Attacks on the `form:NAME` and `json:POINTER` key parts, each asserting the safe
//! behaviour: a login limited to 2 per hour per username must not get a third attempt for
//! one username by re-spelling its body, its media type, its encoding or its framing, and
//! the gateway must not key one username where a common backend reads another. Each test
//! names the backend whose reading it guards against.

use std::net::SocketAddr;

use crate::common::config::{limited, policy};
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const OK: StatusCode = StatusCode::OK;
const DENIED: StatusCode = StatusCode::TOO_MANY_REQUESTS;
const BAD: StatusCode = StatusCode::BAD_REQUEST;
const FORM: &str = "application/x-www-form-urlencoded";
const JSON: &str = "application/json";

/// An upstream answering with the body it received, byte for byte.
async fn body_echo() -> SocketAddr {
    upstream(|req: Request<Incoming>| async move {
        let bytes = req.into_body().collect().await.unwrap().to_bytes();
        http::Response::new(body(bytes))
    })
    .await
}

/// A gateway whose route `login` enforces 2 per hour keyed on `key` (`policy_extra` in the
/// policy table, `route_extra` in the route's).
async fn gateway_with(key: &str, policy_extra: &str, route_extra: &str) -> Gateway {
    let text = limited(body_echo().await, "")
        .text(&policy("login", &[key], "gcra", 2, "1h", policy_extra))
        .app_route("login", &format!("policies = [\"login\"]\n{route_extra}"))
        .build();
    Gateway::start(&text).await
}

async fn gateway(key: &str) -> Gateway {
    gateway_with(key, "", "").await
}

async fn deny(key: &str) -> Gateway {
    gateway_with(key, "on_missing_key = \"deny\"", "").await
}

/// POST `body` with `headers` (name, value): the status and the answer's body.
async fn send(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}/login"))
        .header("x-forwarded-for", "203.0.113.9");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = send_h1(addr, req.body(Full::new(body.into())).unwrap()).await;
    (resp.status(), text(resp).await)
}

async fn post(addr: SocketAddr, content_type: &str, body: &str) -> (StatusCode, String) {
    send(
        addr,
        "POST",
        &[("content-type", content_type)],
        body.to_owned(),
    )
    .await
}

/// Spend the username's two attempts with `plain`, then assert each of `spellings` is
/// refused (429 or 400), never a third attempt.
async fn no_third_attempt(gw: &Gateway, plain: (&str, &str), spellings: &[(&str, &str)]) {
    let addr = gw.addrs.listen;
    for _ in 0..2 {
        let (status, answer) = post(addr, plain.0, plain.1).await;
        assert_eq!(status, OK, "{plain:?}: {answer}");
    }
    for (content_type, body) in spellings {
        let (status, answer) = post(addr, content_type, body).await;
        assert!(
            status == DENIED || status == BAD,
            "{content_type} {body:?} got {status}: a third attempt ({answer})"
        );
    }
}

// ---- Content-Type ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_type_case_and_parameters_do_not_make_a_fresh_key() {
    let gw = gateway("form:username").await;
    no_third_attempt(
        &gw,
        (FORM, "username=alice"),
        &[
            ("APPLICATION/X-WWW-FORM-URLENCODED", "username=alice"),
            (
                "application/x-www-form-urlencoded ; charset=UTF-8",
                "username=alice",
            ),
            (
                "application/x-www-form-urlencoded;charset=\"utf-8\"",
                "username=alice",
            ),
        ],
    )
    .await;
}

/// Django decodes a form in the `charset` the Content-Type names (`request.encoding`), and
/// Express's `body-parser.json` any `utf-*` charset through iconv-lite: under UTF-7,
/// `+AGE-lice` is `alice`, a fresh gateway key per spelling. A charset other than UTF-8 is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charset_other_than_utf8_is_refused() {
    let gw = gateway("form:username").await;
    no_third_attempt(
        &gw,
        (FORM, "username=alice"),
        &[
            (
                "application/x-www-form-urlencoded; charset=utf-7",
                "username=%2BAGE-lice",
            ),
            (
                "application/x-www-form-urlencoded; charset=UTF-7",
                "username=%2BAGEAbA-ice",
            ),
        ],
    )
    .await;
    let gw = gateway("json:/username").await;
    no_third_attempt(
        &gw,
        (JSON, r#"{"username":"alice"}"#),
        &[(
            "application/json; charset=utf-7",
            r#"{"username":"+AGE-lice"}"#,
        )],
    )
    .await;
    let (status, answer) = post(
        gw.addrs.listen,
        "application/json; charset=us-ascii",
        r#"{"username":"bob"}"#,
    )
    .await;
    assert_eq!(status, BAD, "{answer}");
    assert!(answer.contains("charset"), "{answer}");
}

/// `multipart/form-data; boundary=A; boundary=B`: a body framed by both boundaries reads
/// one username under A (the part after B's close is epilogue) and another under B; which
/// one a parser takes differs. A parameter given twice is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_type_parameter_given_twice_is_refused() {
    let gw = gateway("form:username").await;
    let part = |b: &str, user: &str| {
        format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\n{user}\r\n--{b}--\r\n"
        )
    };
    let both = |user: &str| format!("{}{}", part("A", user), part("B", "alice"));
    for (ct, body) in [
        ("multipart/form-data; boundary=A; boundary=B", both("r1")),
        ("multipart/form-data; boundary=A; BOUNDARY=B", both("r2")),
        (
            "application/x-www-form-urlencoded; charset=utf-8; charset=utf-7",
            "username=%2BAGE-lice".to_owned(),
        ),
    ] {
        let (status, answer) = post(gw.addrs.listen, ct, &body).await;
        assert_eq!(status, BAD, "{ct}: {answer}");
    }
    // One quoted boundary is the boundary, as every parser reads it.
    let ok = part("XyZ", "carol");
    for want in [OK, OK, DENIED] {
        let quoted = post(
            gw.addrs.listen,
            "multipart/form-data; boundary=\"XyZ\"",
            &ok,
        )
        .await;
        assert_eq!(quoted.0, want, "{}", quoted.1);
    }
}

/// A JSON body sent as `text/plain` (Flask's `get_json(force=True)`), or without a
/// Content-Type (Express `body-parser` with `type: '*/*'`), has no fields to the gateway:
/// under `on_missing_key = "deny"` it is refused, never a free attempt. (Under the default
/// `skip` it passes this policy, as documented.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_another_type_is_refused_under_deny() {
    let gw = deny("json:/username").await;
    let addr = gw.addrs.listen;
    let body = r#"{"username":"alice"}"#;
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonx",
    ] {
        assert_eq!(post(addr, ct, body).await.0, BAD, "{ct}");
    }
    let none = send(addr, "POST", &[], body).await;
    assert_eq!(none.0, BAD, "no Content-Type: {}", none.1);
    let gw = deny("form:username").await;
    for ct in [
        "application/json",
        "text/plain",
        "multipart/mixed; boundary=x",
    ] {
        assert_eq!(
            post(gw.addrs.listen, ct, "username=alice").await.0,
            BAD,
            "{ct}"
        );
    }
}

// ---- Content-Encoding, framing, size ---------------------------------------------------

/// Express's `body-parser` inflates `Content-Encoding: gzip` and `deflate` bodies before
/// parsing them; the gateway would key the coded bytes (an ASCII-only zlib stream is a
/// valid form to it). A coded body a key reads is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_coded_body_is_refused() {
    let gw = gateway("form:username").await;
    for coding in ["gzip", "deflate", "br", "identity, gzip"] {
        let (status, answer) = send(
            gw.addrs.listen,
            "POST",
            &[("content-type", FORM), ("content-encoding", coding)],
            "username=alice",
        )
        .await;
        assert_eq!(status, BAD, "{coding}: {answer}");
        assert!(answer.contains("Content-Encoding"), "{answer}");
    }
    let identity = send(
        gw.addrs.listen,
        "POST",
        &[("content-type", FORM), ("content-encoding", "identity")],
        "username=alice",
    )
    .await;
    assert_eq!(identity.0, OK, "{}", identity.1);
}

/// A chunked body with a trailer section keys as the same body sent with a length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_with_trailers_keys_as_itself() {
    let gw = gateway("form:username").await;
    for _ in 0..2 {
        assert_eq!(post(gw.addrs.listen, FORM, "username=alice").await.0, OK);
    }
    let req = "POST /login HTTP/1.1\r\nhost: t\r\nconnection: close\r\nx-forwarded-for: 203.0.113.9\r\ncontent-type: application/x-www-form-urlencoded\r\ntransfer-encoding: chunked\r\ntrailer: x-t\r\n\r\n5\r\nusern\r\n9\r\name=alice\r\n0\r\nx-t: 1\r\n\r\n";
    let mut conn = tokio::net::TcpStream::connect(gw.addrs.listen)
        .await
        .unwrap();
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status(&answer), 429, "{answer}");
}

/// A body over the read with `on_large_key_body = "missing"` has no username: padding a
/// login past 64 bytes is refused under `deny` (under `skip` it passes, as documented).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_padded_body_is_refused_under_deny() {
    let gw = gateway_with(
        "form:username",
        "on_missing_key = \"deny\"",
        "max_key_body_bytes = 64\non_large_key_body = \"missing\"",
    )
    .await;
    let long = format!("username=alice&pad={}", "x".repeat(100));
    assert_eq!(post(gw.addrs.listen, FORM, &long).await.0, BAD);
}

/// GET with a body (Express's `body-parser` parses one) and HTTP/2 share the POST budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_with_a_body_and_http2_share_the_budget() {
    let gw = gateway("form:username").await;
    let addr = gw.addrs.listen;
    assert_eq!(post(addr, FORM, "username=alice").await.0, OK);
    let got = send(addr, "GET", &[("content-type", FORM)], "username=alice").await;
    assert_eq!(got.0, OK, "{}", got.1);
    let again = send(addr, "GET", &[("content-type", FORM)], "username=alice").await;
    assert_eq!(again.0, DENIED, "{}", again.1);
    let h2 = Request::post(format!("http://{addr}/login"))
        .header("content-type", FORM)
        .header("x-forwarded-for", "203.0.113.9")
        .body(Full::new(Bytes::from_static(b"username=alice")))
        .unwrap();
    assert_eq!(send_h2(addr, h2).await.status(), DENIED);
}

mod json_form;
