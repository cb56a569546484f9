//! The `query:NAME`, `cookie:NAME`, `path` and `jwt:CLAIM` key parts through the real
//! gateway: each value its own budget, every spelling of one value the same budget (a
//! client cannot encode, re-case or repeat its way to a fresh one), a part stated twice
//! refused with 400, a forged token no budget at all; the admin API finds the same keys,
//! and a central (Redis) policy keys a query parameter as every node does.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::config::{central_config, limited, policy};
use crate::common::redis::RedisServer;
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::Value;

const OK: StatusCode = StatusCode::OK;
const DENIED: StatusCode = StatusCode::TOO_MANY_REQUESTS;
const BAD: StatusCode = StatusCode::BAD_REQUEST;

/// GET `path` from one client address with `headers`.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> StatusCode {
    let mut req =
        Request::get(format!("http://{addr}{path}")).header("x-forwarded-for", "203.0.113.9");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .status()
}

/// An in-process gateway with one policy (2 per hour, keyed on `key`) on a catch-all route.
async fn gateway(key: &str) -> Gateway {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy("p", &[key], "gcra", 2, "1h", ""))
        .app_route("api", "policies = [\"p\"]")
        .build();
    Gateway::start(&text).await
}

/// Each of `paths` in turn, expecting `want`.
async fn expect(addr: SocketAddr, steps: &[(&str, StatusCode)], headers: &[(&str, &str)]) {
    for (i, (path, want)) in steps.iter().enumerate() {
        assert_eq!(send(addr, path, headers).await, *want, "step {i}: {path}");
    }
}

async fn admin(adm: SocketAddr, path: &str) -> (StatusCode, Value) {
    let resp = send_h1(adm, get(&format!("http://{adm}{path}"))).await;
    let status = resp.status();
    let text = text(resp).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_values_are_budgets_in_every_spelling_and_stated_once() {
    let gw = gateway("query:tenant").await;
    let addr = gw.addrs.listen;
    expect(
        addr,
        &[
            ("/x?tenant=a", OK),
            ("/x?page=2&tenant=%61", OK),
            // `a` a third time, spelled otherwise: its budget, not a fresh one.
            ("/x?TENANT=a", DENIED),
            ("/x?tenant=b", OK),
            ("/x?tenant=x+y", OK),
            ("/x?tenant=x%20y", OK),
            ("/x?tenant=x+y", DENIED),
            ("/x", OK),
            ("/x", OK),
            ("/x?other=a", OK),
        ],
        &[],
    )
    .await;
    for twice in [
        "/x?tenant=c&tenant=d",
        "/x?tenant=c;tenant=d",
        "/x?tenant=c&tenant=c",
    ] {
        assert_eq!(send(addr, twice, &[]).await, BAD, "{twice}");
    }
    // What the admin API reads for the decoded value is what requests spent.
    let adm = gw.addrs.admin_listen.unwrap();
    let (status, v) = admin(adm, "/limits/p?query.tenant=a").await;
    assert_eq!((status, &v["remaining"]), (OK, &Value::from(0)), "{v}");
    assert!(!v["key"].as_str().unwrap().contains(":a"), "hashed: {v}");
    let (_, v) = admin(adm, "/limits/p?query.tenant=x%20y").await;
    assert_eq!(v["remaining"], 0, "{v}");
    let (_, v) = admin(adm, "/limits/p?query.tenant=b").await;
    assert_eq!(v["remaining"], 1, "{v}");
    let (status, _) = admin(adm, "/limits/p").await;
    assert_eq!(status, BAD, "no tenant: no key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_values_are_budgets_and_a_second_one_is_refused() {
    let gw = gateway("cookie:sid").await;
    let addr = gw.addrs.listen;
    let cookie = |c: &'static str| [("cookie", c)];
    expect(addr, &[("/x", OK), ("/x", OK)], &cookie("sid=s1")).await;
    expect(addr, &[("/x", DENIED)], &cookie("theme=dark; sid=%731")).await;
    expect(
        addr,
        &[("/x", OK), ("/x", OK), ("/x", DENIED)],
        &cookie("sid=s2"),
    )
    .await;
    expect(
        addr,
        &[("/x", OK), ("/x", OK), ("/x", OK)],
        &cookie("theme=dark"),
    )
    .await;
    expect(addr, &[("/x", OK), ("/x", OK), ("/x", OK)], &[]).await;
    for twice in [
        &["sid=s3; sid=s4"][..],
        &["sid=s3", "sid=s4"],
        &["a=1, sid=s3; sid=s4"],
    ] {
        let headers: Vec<_> = twice.iter().map(|c| ("cookie", *c)).collect();
        assert_eq!(send(addr, "/x", &headers).await, BAD, "{twice:?}");
    }
    let adm = gw.addrs.admin_listen.unwrap();
    let (status, v) = admin(adm, "/limits/p?cookie.sid=s1").await;
    assert_eq!((status, &v["remaining"]), (OK, &Value::from(0)), "{v}");
    assert!(!v["key"].as_str().unwrap().contains("s1"), "hashed: {v}");
}

/// `path`: the canonical path, so `/api/%6Cogin` (the classic bypass), `/API/Login/` and
/// `/api/./login` all spend `/api/login`'s budget, while another endpoint has its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_is_the_canonical_path_in_every_spelling() {
    let gw = gateway("path").await;
    let addr = gw.addrs.listen;
    expect(
        addr,
        &[
            ("/api/login", OK),
            ("/api/%6Cogin", OK),
            ("/API/Login/", DENIED),
            ("/api/./login?x=1", DENIED),
            ("//api//login", DENIED),
            ("/api/logout", OK),
            ("/api/logout", OK),
            ("/api/logout", DENIED),
        ],
        &[],
    )
    .await;
    let adm = gw.addrs.admin_listen.unwrap();
    let (status, v) = admin(adm, "/limits/p?path=/api/%256Cogin").await;
    assert_eq!((status, &v["remaining"]), (OK, &Value::from(0)), "{v}");
    assert_eq!(v["key"], "p:path:/api/login", "{v}");
    let (status, _) = admin(adm, "/limits/p").await;
    assert_eq!(status, BAD, "no path: no key");
}

const SECRET: &str = "a test HS256 secret of at least 32 bytes";

fn token(claims: Value, secret: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let mut claims = claims;
    claims["exp"] = exp.into();
    let key = EncodingKey::from_secret(secret.as_bytes());
    encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

/// `jwt:org`: the verified token's `org` claim is the budget (two users of one org share
/// it; a number and its text are one org); a forged token is never "no org" (it would walk
/// around the policy): a 401 on `/open` as on `/api`, spending nobody's budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_claim_is_a_budget_only_when_the_token_verifies() {
    let up = echo_upstream().await;
    let cfg = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [account]\nheader = \"authorization\"\njwt = {{ hs256_secret_env = \"TG_JWT\" }}\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n\
         {}\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/api\" }}\nupstream = \"app\"\n\
         policies = [\"per_org\"]\nrequire_account = true\n\
         [[routes]]\nname = \"open\"\nmatch = {{ path_prefix = \"/open\" }}\nupstream = \"app\"\n\
         policies = [\"per_org\"]\n",
        policy("per_org", &["jwt:org"], "gcra", 2, "1h", "")
    );
    let cfg = process::temp_file("jwt_parts.toml", &cfg);
    let gw = process::spawn_serve_with_env(&cfg, &[("TG_JWT", SECRET)]);
    let addr = gw.addr;
    let bearer = |t: &str| format!("Bearer {t}");
    let as_token = |path: &'static str, t: String| async move {
        send(addr, path, &[("authorization", &bearer(&t))]).await
    };
    let forged = token(
        serde_json::json!({"sub": "mallory", "org": 42}),
        "another secret of at least 32 bytes!!",
    );
    for _ in 0..3 {
        assert_eq!(
            as_token("/open", forged.clone()).await,
            StatusCode::UNAUTHORIZED,
            "an unverified token is refused, never unlimited"
        );
    }
    assert_eq!(
        as_token("/api", forged.clone()).await,
        StatusCode::UNAUTHORIZED
    );
    let alice = token(serde_json::json!({"sub": "alice", "org": 42}), SECRET);
    let bob = token(serde_json::json!({"sub": "bob", "org": "42"}), SECRET);
    let carol = token(serde_json::json!({"sub": "carol", "org": "globex"}), SECRET);
    // The forgeries spent nothing of org 42's two.
    assert_eq!(as_token("/api", alice.clone()).await, OK);
    assert_eq!(as_token("/open", bob.clone()).await, OK);
    assert_eq!(as_token("/api", bob).await, DENIED, "one org, one budget");
    assert_eq!(as_token("/api", carol.clone()).await, OK);
    // A token without the claim: the policy does not apply.
    let nobody = token(serde_json::json!({"sub": "dave"}), SECRET);
    for _ in 0..3 {
        assert_eq!(as_token("/api", nobody.clone()).await, OK);
    }
    let adm = gw.admin.unwrap();
    let (status, v) = admin(adm, "/limits/per_org?jwt.org=42").await;
    assert_eq!((status, &v["remaining"]), (OK, &Value::from(0)), "{v}");
    let (_, v) = admin(adm, "/limits/per_org?jwt.org=globex").await;
    assert_eq!(v["remaining"], 1, "{v}");
}

/// A central policy keyed on a query parameter: two gateways on one Redis spend one budget
/// whatever spelling each request uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_query_key_is_one_budget_across_gateways() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let config = central_config(
        up,
        &redis.url(),
        &policy(
            "p",
            &["query:tenant"],
            "gcra",
            2,
            "1h",
            "site = \"central\"",
        ),
        "policies = [\"p\"]\non_store_error = \"closed\"",
    );
    let (one, two) = (Gateway::start(&config).await, Gateway::start(&config).await);
    assert_eq!(send(one.addrs.listen, "/x?tenant=acme", &[]).await, OK);
    assert_eq!(send(two.addrs.listen, "/x?tenant=%61cme", &[]).await, OK);
    assert_eq!(
        send(one.addrs.listen, "/x?Tenant=ac%6De", &[]).await,
        DENIED
    );
    assert_eq!(send(two.addrs.listen, "/x?tenant=other", &[]).await, OK);
    assert_eq!(
        send(two.addrs.listen, "/x?tenant=a&tenant=b", &[]).await,
        BAD
    );
    let (status, v) = admin(
        two.addrs.admin_listen.unwrap(),
        "/limits/p?query.tenant=acme",
    )
    .await;
    assert_eq!((status, &v["source"]), (OK, &Value::from("store")), "{v}");
    assert_eq!(v["remaining"], 0, "{v}");
}

/// A client naming `Cookie` in `Connection` cannot make the gateway drop the cookie it
/// keyed on: the backend sees the very session the budget was spent for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_cookie_cannot_be_stripped_by_connection() {
    let gw = gateway("cookie:sid").await;
    let req = Request::get(gw.url("/x"))
        .header("connection", "cookie")
        .header("cookie", "sid=s1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let echo = json(send_h1(gw.addrs.listen, req).await).await;
    assert_eq!(echo["headers"]["cookie"], "sid=s1", "{echo}");
}
