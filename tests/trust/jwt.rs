//! `[account] jwt` and `require_account` with real signed tokens (`jsonwebtoken`), through
//! a gateway process (the secret lives only in its environment): the account is the
//! token's verified claim, so a forged, expired or unsigned token buys nothing — 401 on a
//! route that requires an account and on one whose policies key on the account.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};

const SECRET: &str = "a test HS256 secret of at least 32 bytes";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(sub: &str, exp: u64, alg: Algorithm, kid: Option<&str>, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(String::from);
    let claims = serde_json::json!({ "sub": sub, "exp": exp });
    encode(&header, &claims, key).unwrap()
}

fn hs(sub: &str, exp: u64, secret: &str) -> String {
    token(
        sub,
        exp,
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
}

/// `jwt` keys, a per-account policy (2 per hour) on `/api` (account required) and `/open`.
fn config(up: SocketAddr, jwt: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [account]\nheader = \"authorization\"\njwt = {{ {jwt} }}\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n\
         [policies.per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/api\" }}\nupstream = \"app\"\n\
         policies = [\"per_account\"]\nrequire_account = true\n\
         [[routes]]\nname = \"open\"\nmatch = {{ path_prefix = \"/open\" }}\nupstream = \"app\"\n\
         policies = [\"per_account\"]\n"
    )
}

async fn status(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, Option<String>) {
    let mut req = Request::get(format!("http://{addr}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await;
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status().as_u16(), challenge)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_account_is_the_verified_claim_of_an_hs256_token() {
    let up = echo_upstream().await;
    let cfg = process::temp_file("jwt.toml", &config(up, "hs256_secret_env = \"TG_JWT\""));
    let gw = process::spawn_serve_with_env(&cfg, &[("TG_JWT", SECRET)]);
    let addr = gw.addr;
    let alice = hs("alice", now() + 600, SECRET);
    assert_eq!(status(addr, "/api", Some(&alice)).await.0, 200);
    // A forged token naming alice: not her budget, and not an account at all.
    let forged = hs(
        "alice",
        now() + 600,
        "another secret of at least 32 bytes!!",
    );
    let (code, challenge) = status(addr, "/api", Some(&forged)).await;
    assert_eq!((code, challenge.as_deref()), (401, Some("Bearer")));
    let expired = hs("alice", now() - 3600, SECRET);
    assert_eq!(status(addr, "/api", Some(&expired)).await.0, 401);
    assert_eq!(status(addr, "/api", None).await.0, 401);
    // A route that does not require one: a token that does not verify is still no way
    // around its account policy (`on_unverified = "reject"`).
    assert_eq!(status(addr, "/open", Some(&forged)).await.0, 401);
    assert_eq!(
        status(addr, "/open", None).await.0,
        200,
        "no token: no account"
    );
    // alice's second and third requests: her budget (2) was not touched by the forgeries.
    assert_eq!(status(addr, "/api", Some(&alice)).await.0, 200);
    assert_eq!(status(addr, "/open", Some(&alice)).await.0, 429);
    // bob has his own.
    assert_eq!(
        status(addr, "/api", Some(&hs("bob", now() + 600, SECRET)))
            .await
            .0,
        200
    );
    // An unsigned token (alg none) is no token.
    let none = format!(
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.",
        base64_url(&format!("{{\"sub\":\"carol\",\"exp\":{}}}", now() + 600))
    );
    assert_eq!(status(addr, "/api", Some(&none)).await.0, 401);
}

fn base64_url(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es256_tokens_verify_against_a_jwks_file() {
    let pem = std::fs::read(repo_path("certs/localhost-key.pem")).unwrap();
    let key = EncodingKey::from_ec_pem(&pem).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("k1".into());
    let jwks = serde_json::json!({ "keys": [jwk] }).to_string();
    let jwks_path = process::temp_file("jwks.json", &jwks);
    let up = echo_upstream().await;
    let cfg = process::temp_file(
        "jwks.toml",
        &config(up, &format!("jwks_file = \"{}\"", jwks_path.display())),
    );
    let gw = process::spawn_serve(&cfg);
    let good = token("dana", now() + 600, Algorithm::ES256, Some("k1"), &key);
    assert_eq!(status(gw.addr, "/api", Some(&good)).await.0, 200);
    let other_kid = token("dana", now() + 600, Algorithm::ES256, Some("k2"), &key);
    assert_eq!(status(gw.addr, "/api", Some(&other_kid)).await.0, 401);
    // An HS256 token "signed" with the public key's text must not pass (algorithm confusion).
    let confused = hs("dana", now() + 600, &jwks);
    assert_eq!(status(gw.addr, "/api", Some(&confused)).await.0, 401);
    assert_eq!(status(gw.addr, "/api", Some(&good)).await.0, 200);
    assert_eq!(status(gw.addr, "/api", Some(&good)).await.0, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_tokens_verify_against_a_jwks_file() {
    // A 2048-bit test key (`openssl genpkey -algorithm RSA`), public in this repository.
    let pem = std::fs::read(repo_path("tests/common/fixtures/jwt/rs256-test-key.pem")).unwrap();
    let key = EncodingKey::from_rsa_pem(&pem).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some("rsa-1".into());
    let jwks = serde_json::json!({ "keys": [jwk] }).to_string();
    let jwks_path = process::temp_file("jwks-rs.json", &jwks);
    let up = echo_upstream().await;
    let cfg = process::temp_file(
        "jwks-rs.toml",
        &config(up, &format!("jwks_file = \"{}\"", jwks_path.display())),
    );
    let gw = process::spawn_serve(&cfg);
    let good = token("erin", now() + 600, Algorithm::RS256, Some("rsa-1"), &key);
    assert_eq!(status(gw.addr, "/api", Some(&good)).await.0, 200);
    // Expired, another algorithm of the same family, the key's text as an HS256 secret.
    let expired = token("erin", now() - 600, Algorithm::RS256, Some("rsa-1"), &key);
    assert_eq!(status(gw.addr, "/api", Some(&expired)).await.0, 401);
    let rs512 = token("erin", now() + 600, Algorithm::RS512, Some("rsa-1"), &key);
    assert_eq!(status(gw.addr, "/api", Some(&rs512)).await.0, 401);
    let confused = hs("erin", now() + 600, &jwks);
    assert_eq!(status(gw.addr, "/api", Some(&confused)).await.0, 401);
    // The verified account's two an hour (the failed tokens above spent none of them).
    assert_eq!(status(gw.addr, "/api", Some(&good)).await.0, 200);
    assert_eq!(status(gw.addr, "/api", Some(&good)).await.0, 429);
}

/// `leeway` runs from `"0s"` (no leeway: a token expired a minute ago is refused) to a day
/// (one expired an hour ago verifies, and a fresh one still does: the library subtracts the
/// leeway from the Unix time, so longer leeways are refused at load, not wrapped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leeway_runs_from_none_to_a_day() {
    let up = echo_upstream().await;
    let expired = |ago: u64| hs("alice", now() - ago, SECRET);
    for (leeway, minute_ago, hour_ago) in [("0s", 401, 401), ("24h", 200, 200)] {
        let jwt = format!("hs256_secret_env = \"TG_JWT\", leeway = \"{leeway}\"");
        let cfg = process::temp_file("jwt.toml", &config(up, &jwt));
        let gw = process::spawn_serve_with_env(&cfg, &[("TG_JWT", SECRET)]);
        let fresh = hs("bob", now() + 600, SECRET);
        assert_eq!(
            status(gw.addr, "/api", Some(&fresh)).await.0,
            200,
            "{leeway}"
        );
        assert_eq!(
            status(gw.addr, "/api", Some(&expired(60))).await.0,
            minute_ago,
            "{leeway}"
        );
        assert_eq!(
            status(gw.addr, "/api", Some(&expired(3600))).await.0,
            hour_ago,
            "{leeway}"
        );
    }
}
