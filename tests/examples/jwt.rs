//! The JWT example keys on the token: 401s for no, forged, expired or misdirected tokens,
//! the plans' tiers from a claim and an override, response costs from the backend, and
//! `mint.py`'s tokens accepted.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;

use crate::common::process::{spawn_serve_with_env, temp_file};
use crate::common::*;
use crate::running::{Backend, header, timed};
use crate::{SECRETS, examples, read, rewrite, secret};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 token as the example's identity provider would sign it.
fn token(claims: serde_json::Value, key: &str) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(key.as_bytes()),
    )
    .unwrap()
}

fn claims(sub: &str, plan: Option<&str>) -> serde_json::Value {
    let mut c = serde_json::json!({
        "sub": sub,
        "iss": "https://auth.example.com/",
        "aud": "api.example.com",
        "exp": now() + 600,
    });
    if let Some(p) = plan {
        c["plan"] = p.into();
    }
    c
}

async fn api(addr: SocketAddr, path: &str, token: Option<&str>) -> Response<Incoming> {
    let mut req = Request::get(format!("http://{addr}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    timed(send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jwt_example_keys_on_the_token_with_tiers_and_response_costs() {
    let dir = examples().join("api-tiers-jwt");
    let backend = Backend::start(&dir.join("backend.py"));
    let cfg = rewrite(
        &read(&dir.join("tollgate.toml")),
        &[
            ("http://127.0.0.1:3000", &format!("http://{}", backend.addr)),
            ("\"127.0.0.1:8080\"", "\"127.0.0.1:0\""),
            ("\"127.0.0.1:9901\"", "\"127.0.0.1:0\""),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("jwt.toml", &cfg), SECRETS);
    let addr = gw.addr;
    let key = secret("TOLLGATE_JWT_SECRET");

    // No token, a forged one, an expired one, another audience: 401, never the backend.
    let mut expired = claims("alice", None);
    expired["exp"] = (now() - 120).into();
    let mut elsewhere = claims("alice", None);
    elsewhere["aud"] = "another.example.com".into();
    let forged = token(claims("alice", None), "not the secret, but 32 bytes long");
    let spoiled = [
        None,
        Some(forged),
        Some(token(expired, key)),
        Some(token(elsewhere, key)),
    ];
    for t in &spoiled {
        let resp = api(addr, "/v1/items", t.as_deref()).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{t:?}");
        assert_eq!(header(&resp, "www-authenticate"), "Bearer");
    }
    // The public part needs no token.
    assert_eq!(api(addr, "/", None).await.status(), StatusCode::OK);

    // No plan: 5/s, burst 10.
    let free = token(claims("alice", None), key);
    let started = Instant::now();
    let mut ok = 0;
    let mut denial = None;
    for _ in 0..12 {
        let resp = api(addr, "/v1/items", Some(&free)).await;
        match resp.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => denial = Some(resp),
            other => panic!("unexpected {other}"),
        }
    }
    let refilled = (started.elapsed().as_secs_f64() * 5.0).ceil() as usize;
    assert!((10..=10 + refilled).contains(&ok), "{ok} of 12 admitted");
    let denial = denial.expect("the free plan's burst is 10");
    assert!(header(&denial, "ratelimit-policy").contains("\"requests\";q=5;w=1"));
    assert_eq!(header(&denial, "retry-after"), "1");
    assert_eq!(
        json(denial).await["violated-policies"],
        serde_json::json!(["requests"])
    );

    // The pro plan's numbers, from the claim; partner-7's from its override.
    let pro = token(claims("bob", Some("pro")), key);
    for i in 0..30 {
        let resp = api(addr, "/v1/items", Some(&pro)).await;
        assert_eq!(resp.status(), StatusCode::OK, "pro request {i}");
        let policy = header(&resp, "ratelimit-policy");
        assert!(policy.contains("\"requests\";q=50;w=1"), "{policy}");
        assert!(policy.contains("\"units\";q=20000;w=60"), "{policy}");
    }
    let partner = token(claims("partner-7", None), key);
    let policy = header(
        &api(addr, "/v1/items", Some(&partner)).await,
        "ratelimit-policy",
    );
    assert!(policy.contains("\"requests\";q=500;w=1"), "{policy}");
    assert!(policy.contains("\"units\";q=200000;w=60"), "{policy}");

    // /v1/reports costs 250 units (the backend says so): four fill the free minute's 1000.
    let carol = token(claims("carol", None), key);
    let started = Instant::now();
    let mut reports = 0;
    let denial = loop {
        let resp = api(addr, "/v1/reports", Some(&carol)).await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            break resp;
        }
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "x-api-units"), "250");
        reports += 1;
        assert!(reports < 10, "the units policy never denied");
    };
    // 1000 units a minute refill 250 in 15 s.
    let refilled = (started.elapsed().as_secs_f64() / 15.0).ceil() as usize;
    assert!(
        (4..=4 + refilled).contains(&reports),
        "{reports} reports admitted"
    );
    assert_eq!(
        json(denial).await["violated-policies"],
        serde_json::json!(["units"])
    );

    // mint.py's token is one the gateway accepts (and its `plan` claim is read).
    let out = Command::new("python3")
        .arg(dir.join("mint.py"))
        .args(["dave", "pro"])
        .env("TOLLGATE_JWT_SECRET", key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let minted = String::from_utf8(out.stdout).unwrap();
    let resp = api(addr, "/v1/items", Some(minted.trim())).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(header(&resp, "ratelimit-policy").contains("\"requests\";q=50;w=1"));
}
