//! `[policies.NAME.tiers]` with `tier_header` / `tier_claim`, and `overrides`, over real
//! sockets: each tier gets its own numbers (shown in `RateLimit-Policy` under the policy's
//! own name), an unknown or absent tier the policy's, an override beats the tier, and the
//! same holds on the central site with a real Redis.

use std::net::SocketAddr;

use crate::common::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use jsonwebtoken::{EncodingKey, Header, encode};

/// A per-account policy (2 an hour) with tiers, an override by raw value and one by hash.
fn config(up: SocketAddr, extra_store: &str, site: &str, hash: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{extra_store}\
         [account]\nheader = \"x-api-key\"\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n\
         [policies.api]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\n\
         site = \"{site}\"\ntier_header = \"x-plan\"\n\
         tiers = {{ pro = {{ limit = 5 }}, team = {{ limit = 3, burst = 4 }} }}\n\
         overrides = {{ partner = {{ limit = 7 }}, \"hash:{hash}\" = {{ tier = \"pro\" }} }}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n\
         policies = [\"api\"]\n"
    )
}

async fn send(addr: SocketAddr, account: &str, plan: Option<&str>) -> Response<Incoming> {
    let mut req = Request::get(format!("http://{addr}/x")).header("x-api-key", account);
    if let Some(p) = plan {
        req = req.header("x-plan", p);
    }
    send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await
}

/// How many of `n` requests pass, and the `RateLimit-Policy` of the first.
async fn admitted(
    addr: SocketAddr,
    account: &str,
    plan: Option<&str>,
    n: usize,
) -> (usize, String) {
    let (mut ok, mut policy) = (0, String::new());
    for i in 0..n {
        let r = send(addr, account, plan).await;
        if i == 0 {
            // Without the account's `pk`, which differs per account.
            let field = r.headers()["ratelimit-policy"].to_str().unwrap();
            policy = field.split(";pk=").next().unwrap().to_string();
        }
        ok += usize::from(r.status() == StatusCode::OK);
    }
    (ok, policy)
}

/// The keyed hash the gateway gives `account` (from the admin API's key).
async fn hash_of(up: SocketAddr, account: &str) -> String {
    let probe = Gateway::start(&config(up, "", "local", &"0".repeat(32))).await;
    let admin = probe.addrs.admin_listen.unwrap();
    let url = format!("http://{admin}/limits/api?account={account}");
    let resp = send_h1(
        admin,
        Request::get(url).body(Empty::<Bytes>::new()).unwrap(),
    )
    .await;
    let key = json(resp).await["key"].as_str().unwrap().to_string();
    key.rsplit(':').next().unwrap().to_string()
}

async fn tiers_hold(addr: SocketAddr) {
    // No tier, an unknown one: the policy's own 2.
    assert_eq!(
        admitted(addr, "alice", None, 4).await,
        (2, "\"api\";q=2;w=3600".into())
    );
    assert_eq!(admitted(addr, "bob", Some("gold"), 4).await.0, 2);
    // Tiers: their own numbers, under the policy's name; budgets are the tier's.
    assert_eq!(
        admitted(addr, "carol", Some("pro"), 7).await,
        (5, "\"api\";q=5;w=3600".into())
    );
    assert_eq!(
        admitted(addr, "dave", Some("team"), 6).await,
        (4, "\"api\";q=3;w=3600".into())
    );
    // An override by raw value beats any tier header; one by hash names a tier.
    assert_eq!(admitted(addr, "partner", Some("team"), 9).await.0, 7);
    assert_eq!(admitted(addr, "hashed-one", None, 7).await.0, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tier_and_override_gets_its_own_numbers() {
    let up = echo_upstream().await;
    let hash = hash_of(up, "hashed-one").await;
    let gw = Gateway::start(&config(up, "", "local", &hash)).await;
    tiers_hold(gw.addrs.listen).await;
    // The split site (N = 1 with the memory store) decides each variant on its split state.
    let split = Gateway::start(&config(up, "", "split", &hash)).await;
    tiers_hold(split.addrs.listen).await;
    // A tier header stated twice is no tier: the policy's own numbers.
    let addr = gw.addrs.listen;
    let twice = Request::get(format!("http://{addr}/x"))
        .header("x-api-key", "erin")
        .header("x-plan", "pro")
        .header("x-plan", "pro")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let r = send_h1(addr, twice).await;
    let field = r.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(field.starts_with("\"api\";q=2;w=3600;"), "{field}");
    // Decisions are counted under the policy's name.
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    assert!(
        metric_sum(
            &m,
            "tollgate_decisions_total{route=\"api\",policy=\"api\",outcome=\"deny\"}"
        ) > 0.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_hold_on_the_store_sites() {
    let redis = crate::common::redis::RedisServer::start();
    let up = echo_upstream().await;
    let hash = hash_of(up, "hashed-one").await;
    // A patient store: the default 10 ms timeout fails open on a busy CI machine, and a
    // request the store did not decide tells nothing about tiers.
    let store = format!(
        "[store]\nkind = \"redis\"\nurls = [\"{}\"]\ntimeout = \"2s\"\n",
        redis.url()
    );
    let gw = Gateway::start(&config(up, &store, "central", &hash)).await;
    tiers_hold(gw.addrs.listen).await;
    // The tier's keys live in the store under the variant's name.
    let keys = redis.cli(&["KEYS", "*api@pro*"]);
    assert!(!keys.trim().is_empty(), "no pro keys in {keys:?}");
    // And on the lease site (a fresh store: the same accounts again).
    redis.cli(&["FLUSHALL"]);
    let gw = Gateway::start(&config(up, &store, "lease", &hash)).await;
    tiers_hold(gw.addrs.listen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_token_claim_names_the_tier() {
    const SECRET: &str = "a test HS256 secret of at least 32 bytes";
    let up = echo_upstream().await;
    let cfg = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [account]\nheader = \"authorization\"\njwt = {{ hs256_secret_env = \"TG_JWT\" }}\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n\
         [policies.api]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\n\
         tier_claim = \"plan\"\ntiers = {{ pro = {{ limit = 3 }} }}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n\
         policies = [\"api\"]\nrequire_account = true\n"
    );
    let file = process::temp_file("tiers_jwt.toml", &cfg);
    let gw = process::spawn_serve_with_env(&file, &[("TG_JWT", SECRET)]);
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let token = |sub: &str, plan: &str, secret: &str| {
        let claims = serde_json::json!({ "sub": sub, "plan": plan, "exp": exp });
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };
    let count = |t: String| async move {
        let mut ok = 0;
        for _ in 0..5 {
            let req = Request::get(format!("http://{}/x", gw.addr))
                .header("authorization", format!("Bearer {t}"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            ok += usize::from(send_h1(gw.addr, req).await.status() == StatusCode::OK);
        }
        ok
    };
    assert_eq!(count(token("u1", "pro", SECRET)).await, 3);
    assert_eq!(count(token("u2", "free", SECRET)).await, 1);
    // A forged token claiming pro is no account at all: 401, never a tier.
    assert_eq!(
        count(token("u3", "pro", "another secret of at least 32 bytes!")).await,
        0
    );
}
