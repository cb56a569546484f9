//! Issue 30's token differential: a bearer token spelled every way a backend might still
//! read as the token (PyJWT after `split()` and `strip()`, for real; Go's `strings.Fields`
//! and .NET's whitespace split as documented) never walks around a spent `jwt:org` budget:
//! the gateway reads one grammar (400 otherwise) and a token that does not verify is a 401
//! (or, with `on_unverified = "shared"`, one shared bucket), never "no key".

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::readers::{self, pads, shown};
use crate::common::*;
use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::Empty;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};

const SECRET: &str = "a test HS256 secret of at least 32 bytes";

fn token(org: &str, secret: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims = serde_json::json!({ "sub": "u", "org": org, "plan": "pro", "exp": exp });
    let key = EncodingKey::from_secret(secret.as_bytes());
    encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

/// A gateway process with `jwt` accounts (`jwt`: extra keys of the table) and `policies`
/// (TOML tables) on the catch-all route `api`, which does not require an account.
async fn gateway(jwt: &str, policies: &str, names: &str) -> process::GatewayProcess {
    let up = echo_upstream().await;
    let cfg = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [account]\nheader = \"authorization\"\njwt = {{ hs256_secret_env = \"TG_JWT\"{jwt} }}\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n{policies}\n\
         [[routes]]\nname = \"api\"\nupstream = \"app\"\npolicies = [{names}]\n"
    );
    let file = process::temp_file("token_spellings.toml", &cfg);
    process::spawn_serve_with_env(&file, &[("TG_JWT", SECRET)])
}

/// The status of a GET with an `Authorization` of these bytes (`None`: not sendable).
async fn send(addr: SocketAddr, auth: &[u8]) -> Option<u16> {
    let v = HeaderValue::from_bytes(auth).ok()?;
    let req = Request::get(format!("http://{addr}/api"))
        .header("authorization", v)
        .body(Empty::<Bytes>::new())
        .unwrap();
    Some(send_h1(addr, req).await.status().as_u16())
}

/// Spellings of `Authorization: Bearer <tok>`: every pad at each place a backend's split
/// or strip may drop it, and the padding and case a decoder may accept.
fn spellings(tok: &str) -> Vec<Vec<u8>> {
    let t = tok.as_bytes();
    let mut all = Vec::new();
    for pad in pads() {
        let p = pad.as_slice();
        all.push([b"Bearer ", t, p].concat());
        all.push([b"Bearer ", p, t].concat());
        all.push([b"Bearer", p, t].concat());
        all.push([t, p].concat());
        all.push([p, t].concat());
        all.push([p, b"Bearer ", t].concat());
    }
    for s in [
        "{t}=",
        "Bearer {t}=",
        "Bearer {t}==",
        "bearer {t}",
        "BEARER {t}",
        "Bearer  {t}",
        "{t}",
    ] {
        all.push(s.replace("{t}", tok).into_bytes());
    }
    all
}

/// Go's and .NET's readings: split on whitespace, a `Bearer` scheme dropped; a strict
/// decoder then verifies only the token's own bytes.
fn split_reads_token(spelling: &[u8], tok: &str) -> bool {
    let text = String::from_utf8_lossy(spelling);
    let fields: Vec<&str> = text
        .split(char::is_whitespace)
        .filter(|f| !f.is_empty())
        .collect();
    match fields.as_slice() {
        [scheme, t] => scheme.eq_ignore_ascii_case("bearer") && *t == tok,
        [t] => *t == tok,
        _ => false,
    }
}

const PER_ORG: &str =
    "[policies.per_org]\nkey = [\"jwt:org\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_spent_token_gets_through() {
    let gw = gateway("", PER_ORG, "\"per_org\"").await;
    let tok = token("acme", SECRET);
    assert_eq!(
        send(gw.addr, format!("Bearer {tok}").as_bytes()).await,
        Some(200)
    );
    assert_eq!(
        send(gw.addr, format!("Bearer {tok}").as_bytes()).await,
        Some(429)
    );
    let all = spellings(&tok);
    let python = readers::python(&[], &[], &all, SECRET)["auth"].clone();
    let (mut table, mut through) = (Vec::new(), Vec::new());
    for (i, s) in all.iter().enumerate() {
        let pyjwt = python[i]["pyjwt"].as_str() == Some("acme");
        let split = split_reads_token(s, &tok);
        if !(pyjwt || split) {
            continue;
        }
        let Some(status) = send(gw.addr, s).await else {
            continue;
        };
        let shown = shown(s).replace(&tok, "<tok>");
        table.push(format!("{shown} | pyjwt={pyjwt} split={split} | {status}"));
        if !matches!(status, 400 | 401 | 429) {
            through.push(format!("{shown}: {status}"));
        }
    }
    eprintln!(
        "spelling | read as the token by | gateway\n{}",
        table.join("\n")
    );
    assert!(
        through.is_empty(),
        "spellings that walked around the spent budget: {through:#?}"
    );
    // PyJWT reads the red team's spellings as the token: the table holds them.
    for s in [
        "<tok>=",
        "Bearer\\t<tok>",
        "Bearer <tok>\\xa0",
        "<tok>\\x85",
    ] {
        assert!(
            table
                .iter()
                .any(|r| r.starts_with(&format!("{s} | pyjwt=true"))),
            "{s}"
        );
    }
}

/// `on_unverified = "shared"`: every token that does not verify shares one bucket per
/// policy; a verified org keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_tokens_can_share_one_bucket() {
    let gw = gateway(", on_unverified = \"shared\"", PER_ORG, "\"per_org\"").await;
    let forged = |org: &str| {
        format!(
            "Bearer {}",
            token(org, "another secret of at least 32 bytes!!")
        )
    };
    assert_eq!(send(gw.addr, forged("a").as_bytes()).await, Some(200));
    assert_eq!(
        send(gw.addr, forged("b").as_bytes()).await,
        Some(429),
        "one bucket"
    );
    assert_eq!(
        send(gw.addr, b"Basic dXNlcjpwYXNz").await,
        Some(429),
        "another scheme's too"
    );
    let acme = format!("Bearer {}", token("acme", SECRET));
    assert_eq!(send(gw.addr, acme.as_bytes()).await, Some(200));
    assert_eq!(
        send(gw.addr, b"Bearer a\tb").await,
        Some(400),
        "outside the grammar"
    );
    assert_eq!(
        send(gw.addr, b"").await,
        Some(200),
        "no token: the policy does not apply"
    );
}

/// `tier_claim` reads the token too: an unverified one is a 401 by default, so a client
/// cannot pick the base tier's numbers by spoiling its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_claim_of_an_unverified_token_is_a_401() {
    let tiered = "[policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\n\
                  tier_claim = \"plan\"\ntiers = { pro = { limit = 3 } }\n";
    let gw = gateway("", tiered, "\"per_ip\"").await;
    let forged = format!(
        "Bearer {}",
        token("acme", "another secret of at least 32 bytes!!")
    );
    assert_eq!(send(gw.addr, forged.as_bytes()).await, Some(401));
    let pro = format!("Bearer {}", token("acme", SECRET));
    for _ in 0..3 {
        assert_eq!(send(gw.addr, pro.as_bytes()).await, Some(200));
    }
    assert_eq!(send(gw.addr, pro.as_bytes()).await, Some(429));
    // No token: the base tier's own budget (1).
    assert_eq!(send(gw.addr, b"").await, Some(200));
    assert_eq!(send(gw.addr, b"").await, Some(429));
}
