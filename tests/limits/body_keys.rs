//! The `form:NAME` and `json:POINTER` key parts through the real gateway: a login limited
//! per username in its body (urlencoded, multipart and JSON), each username its own
//! budget, the body forwarded byte for byte; a field or key given twice refused (400); a
//! body of another media type keying nothing; one over `max_key_body_bytes` refused (413)
//! or keyed as missing; a silent body answered 408 within `body_timeout`; a central
//! (Redis) policy keyed on a form field.

use std::net::SocketAddr;

use crate::common::config::{central_config, limited, policy};
use crate::common::redis::RedisServer;
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const OK: StatusCode = StatusCode::OK;
const DENIED: StatusCode = StatusCode::TOO_MANY_REQUESTS;
const BAD: StatusCode = StatusCode::BAD_REQUEST;

/// An upstream answering with the body it received, byte for byte.
async fn body_echo() -> SocketAddr {
    upstream(|req: Request<Incoming>| async move {
        let bytes = req.into_body().collect().await.unwrap().to_bytes();
        http::Response::new(body(bytes))
    })
    .await
}

/// A gateway whose route `login` enforces 2 per hour keyed on `key`, with route `extra`.
async fn gateway(key: &str, extra: &str) -> Gateway {
    let text = limited(body_echo().await, "")
        .text(&policy("login", &[key], "gcra", 2, "1h", ""))
        .app_route("login", &format!("policies = [\"login\"]\n{extra}"))
        .build();
    Gateway::start(&text).await
}

/// POST `body` as `content_type`: the status and what the upstream received.
async fn post(addr: SocketAddr, content_type: &str, body: &str) -> (StatusCode, String) {
    let req = Request::post(format!("http://{addr}/login"))
        .header("content-type", content_type)
        .header("x-forwarded-for", "203.0.113.9")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = send_h1(addr, req).await;
    (resp.status(), text(resp).await)
}

const FORM: &str = "application/x-www-form-urlencoded";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_login_is_limited_per_username_and_forwarded_unchanged() {
    let gw = gateway("form:username", "").await;
    let alice = "username=alice&password=hunter2";
    for want in [OK, OK, DENIED] {
        let (status, echoed) = post(gw.addrs.listen, FORM, alice).await;
        assert_eq!(status, want);
        if status == OK {
            assert_eq!(echoed, alice, "forwarded byte for byte");
        }
    }
    // The same username in another spelling shares the budget; another has its own.
    let spelled = post(gw.addrs.listen, FORM, "password=x&UserName=%61lice").await;
    assert_eq!(spelled.0, DENIED, "{}", spelled.1);
    assert_eq!(post(gw.addrs.listen, FORM, "username=bob").await.0, OK);
    // The admin API finds a username's key from its value, as the request brought it.
    let adm = gw.addrs.admin_listen.unwrap();
    for (user, left) in [("alice", 0), ("bob", 1), ("nobody", 2)] {
        let resp = send_h1(
            adm,
            get(&format!("http://{adm}/limits/login?form.username={user}")),
        )
        .await;
        let v = json(resp).await;
        assert_eq!(v["remaining"], left, "{user}: {v}");
    }
    // Twice, or once in PHP's bracket spelling too: refused, not a fresh budget.
    for twice in [
        "username=carol&username=dave",
        "username=carol&username[]=dave",
    ] {
        let (status, body) = post(gw.addrs.listen, FORM, twice).await;
        assert_eq!(status, BAD, "{twice}");
        assert!(
            body.contains("`username` form field must appear once"),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_login_is_limited_per_pointer_value() {
    let gw = gateway("json:/user/email", "").await;
    let json = "application/json; charset=utf-8";
    let body = r#"{"user":{"email":"a@example.com","password":"x"}}"#;
    assert_eq!(
        post(gw.addrs.listen, json, body).await,
        (OK, body.to_owned())
    );
    assert_eq!(post(gw.addrs.listen, json, body).await.0, OK);
    assert_eq!(post(gw.addrs.listen, json, body).await.0, DENIED);
    let adm = gw.addrs.admin_listen.unwrap();
    let at = format!("http://{adm}/limits/login?json./user/email=a@example.com");
    let v = crate::common::json(send_h1(adm, get(&at)).await).await;
    assert_eq!(v["remaining"], 0, "{v}");
    let other = r#"{"user":{"email":"b@example.com"}}"#;
    assert_eq!(
        post(gw.addrs.listen, "application/vnd.api+json", other)
            .await
            .0,
        OK
    );
    // A key twice (serde keeps the last, others the first), a padded value: 400.
    let twice = r#"{"user":{"email":"c@example.com","email":"d@example.com"}}"#;
    assert_eq!(post(gw.addrs.listen, json, twice).await.0, BAD);
    let padded = r#"{"user":{"email":"c@example.com "}}"#;
    assert_eq!(post(gw.addrs.listen, json, padded).await.0, BAD);
    assert_eq!(post(gw.addrs.listen, json, "{not json").await.0, BAD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_login_is_limited_per_field() {
    let gw = gateway("form:username", "").await;
    let multipart = "multipart/form-data; boundary=XyZ";
    let body = |user: &str| {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\n{user}\r\n--XyZ\r\nContent-Disposition: form-data; name=\"avatar\"; filename=\"a.png\"\r\n\r\nPNG\r\n--XyZ--\r\n"
        )
    };
    assert_eq!(
        post(gw.addrs.listen, multipart, &body("erin")).await,
        (OK, body("erin"))
    );
    assert_eq!(post(gw.addrs.listen, multipart, &body("erin")).await.0, OK);
    assert_eq!(
        post(gw.addrs.listen, multipart, &body("erin")).await.0,
        DENIED
    );
    assert_eq!(post(gw.addrs.listen, multipart, &body("frank")).await.0, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_another_type_keys_nothing() {
    let gw = gateway("form:username", "").await;
    // No form, so no username: the policy does not apply (`on_missing_key` decides).
    for _ in 0..3 {
        let (status, echoed) = post(gw.addrs.listen, "text/plain", "username=alice").await;
        assert_eq!((status, echoed.as_str()), (OK, "username=alice"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_read_is_refused_or_keyed_as_missing() {
    let long = format!("username=alice&padding={}", "x".repeat(200));
    let gw = gateway("form:username", "max_key_body_bytes = 64").await;
    let (status, body) = post(gw.addrs.listen, FORM, &long).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let gw = gateway(
        "form:username",
        "max_key_body_bytes = 64\non_large_key_body = \"missing\"",
    )
    .await;
    for _ in 0..3 {
        assert_eq!(post(gw.addrs.listen, FORM, &long).await, (OK, long.clone()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_over_the_read_is_forwarded_whole() {
    // Chunked (no Content-Length): read up to the limit, then the rest follows.
    let gw = gateway(
        "form:username",
        "max_key_body_bytes = 16\non_large_key_body = \"missing\"",
    )
    .await;
    let mut conn = tokio::net::TcpStream::connect(gw.addrs.listen)
        .await
        .unwrap();
    let chunks = ["username=al", "ice&padding=", &"y".repeat(5000)];
    let mut req = String::from(
        "POST /login HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/x-www-form-urlencoded\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    for c in chunks {
        req.push_str(&format!("{:x}\r\n{c}\r\n", c.len()));
    }
    req.push_str("0\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(
        answer.contains(&chunks.concat()),
        "the whole body reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_body_is_answered_408_within_body_timeout() {
    let text = limited(body_echo().await, "")
        .text(&policy("login", &["form:username"], "gcra", 2, "1h", ""))
        .app_route("login", "policies = [\"login\"]")
        .build()
        .replace("[server]\n", "[server]\nbody_timeout = \"300ms\"\n");
    let gw = Gateway::start(&text).await;
    let mut conn = tokio::net::TcpStream::connect(gw.addrs.listen)
        .await
        .unwrap();
    let head = "POST /login HTTP/1.1\r\nhost: t\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 40\r\n\r\nusername=al";
    conn.write_all(head.as_bytes()).await.unwrap();
    // The rest never comes: the answer does, bounded by a deadline far above 300 ms.
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut answer))
        .await
        .expect("answered before the deadline")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert_eq!(status(&answer), 408, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_policy_keys_a_form_field_as_every_node_does() {
    let redis = RedisServer::start();
    let up = body_echo().await;
    let policies = policy(
        "login",
        &["form:username"],
        "gcra",
        2,
        "1h",
        "site = \"central\"",
    );
    let cfg = central_config(up, &redis.url(), &policies, "policies = [\"login\"]");
    let (a, b) = (Gateway::start(&cfg).await, Gateway::start(&cfg).await);
    assert_eq!(post(a.addrs.listen, FORM, "username=gina").await.0, OK);
    assert_eq!(post(b.addrs.listen, FORM, "username=gina").await.0, OK);
    assert_eq!(post(a.addrs.listen, FORM, "username=gina").await.0, DENIED);
    assert_eq!(post(b.addrs.listen, FORM, "username=hal").await.0, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowercase_folds_a_body_part_and_only_when_asked() {
    let text = limited(body_echo().await, "")
        .text(&policy(
            "login",
            &["json:/email"],
            "gcra",
            2,
            "1h",
            "lowercase = [\"json:/email\"]",
        ))
        .app_route("login", "policies = [\"login\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let json = "application/json";
    let mails = [
        ("Ann@Example.com", OK),
        ("ann@example.com", OK),
        ("ANN@EXAMPLE.COM", DENIED),
    ];
    for (email, want) in mails {
        let body = format!(r#"{{"email":"{email}"}}"#);
        let (status, echoed) = post(gw.addrs.listen, json, &body).await;
        assert_eq!(status, want, "{email}");
        if status == OK {
            assert_eq!(echoed, body, "the body itself is forwarded as sent");
        }
    }
    // Without `lowercase`, case is part of the value: `gateway` keys `Ann` and `ann` apart.
    let gw = gateway("json:/email", "").await;
    for email in ["Ann@Example.com", "Ann@Example.com", "ann@example.com"] {
        let body = format!(r#"{{"email":"{email}"}}"#);
        assert_eq!(post(gw.addrs.listen, json, &body).await.0, OK, "{email}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_without_its_username_is_refused_with_on_missing_key_deny() {
    let text = limited(body_echo().await, "")
        .text(&policy(
            "login",
            &["form:username"],
            "gcra",
            2,
            "1h",
            "on_missing_key = \"deny\"",
        ))
        .app_route("login", "policies = [\"login\"]")
        .build();
    let gw = Gateway::start(&text).await;
    for (content_type, body) in [
        (FORM, "password=x"),
        ("application/json", r#"{"username":"a"}"#),
    ] {
        let (status, answer) = post(gw.addrs.listen, content_type, body).await;
        assert_eq!(status, BAD, "{content_type}");
        assert!(
            answer.contains("the `username` field in a form body"),
            "{answer}"
        );
    }
    assert_eq!(post(gw.addrs.listen, FORM, "username=ivy").await.0, OK);
}
