//! What the limit step decided, in the access log of the real binary (issue 31): every
//! line names its `decision`, the deciding `policy` and its `key` as the limiter keyed it
//! (an account as its keyed hash, never the raw value), `retry_after` when denied, and
//! `duration_us` as an integer; every line the process writes, the start-up line
//! included, is JSON without Rust `Debug` text.

use std::net::SocketAddr;

use crate::common::process::{LoggedServe, temp_file};
use crate::common::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Empty;

/// Routes: `/login` (1 per hour per account, enforced), `/watch` (1 per hour per ip, in
/// shadow), `/ops` (exempt from its policy), `/me` (account required), `/pay` (central,
/// on a store nobody listens at, failing closed), `/open` (no policy).
fn config(up: SocketAddr, dead: SocketAddr) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [account]\nheader = \"x-api-key\"\n\
         [store]\nkind = \"redis\"\nurls = [\"redis://{dead}\"]\ntimeout = \"100ms\"\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n\
         [policies.per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\n\
         [policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\nmode = \"shadow\"\n\
         [policies.ops]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\nexempt = {{ cidrs = [\"127.0.0.0/8\"] }}\n\
         [policies.central]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"1h\"\nsite = \"central\"\n\
         {}{}{}{}{}\
         [[routes]]\nname = \"open\"\nupstream = \"app\"\n",
        route("login", "\"per_account\"", ""),
        route("watch", "\"per_ip\"", ""),
        route("ops", "\"ops\"", ""),
        route("me", "\"per_account\"", "require_account = true\n"),
        route("pay", "\"central\"", "on_store_error = \"closed\"\n"),
    )
}

fn route(name: &str, policies: &str, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"/{name}\" }}\nupstream = \"app\"\npolicies = [{policies}]\n{extra}"
    )
}

async fn send(addr: SocketAddr, path: &str, keys: &[&str]) -> u16 {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for k in keys {
        req = req.header("x-api-key", *k);
    }
    let req = req.body(Empty::<Bytes>::new()).unwrap();
    send_h1(addr, req).await.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_says_what_the_limit_step_decided() {
    let up = echo_upstream().await;
    let dead = dead_port().await;
    let path = temp_file("decisions.toml", &config(up, dead));
    let gw = LoggedServe::start(
        &path,
        &[
            ("RUST_LOG", "info"),
            ("TOLLGATE_LOG_FORMAT", "json"),
            ("TOLLGATE_WORKERS", "1"),
            ("TOLLGATE_ACCESS_LOG_BUFFER", "0"),
        ],
    );
    let addr = gw.addr;
    let answers = [
        send(addr, "/login", &["sk_live_alice"]).await,
        send(addr, "/login", &["sk_live_alice"]).await,
        send(addr, "/watch", &[]).await,
        send(addr, "/watch", &[]).await,
        send(addr, "/ops", &[]).await,
        send(addr, "/me", &[]).await,
        send(addr, "/login", &["a", "b"]).await,
        send(addr, "/pay", &[]).await,
        send(addr, "/open", &[]).await,
    ];
    assert_eq!(answers, [200, 429, 200, 200, 200, 401, 400, 503, 200]);
    // SIGTERM flushes the access log; the process ends before its lines are read.
    let lines = gw.stop();
    let access: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|v: &serde_json::Value| v["target"] == "tollgate::access")
        .collect();
    for l in &lines {
        assert!(
            !l.contains("Some(") && !l.contains("None"),
            "Rust Debug text: {l}"
        );
    }
    let start = lines
        .iter()
        .find(|l| l.contains("tollgate listening"))
        .unwrap();
    let start: serde_json::Value = serde_json::from_str(start).unwrap();
    assert!(
        start["admin_listen"]
            .as_str()
            .unwrap()
            .parse::<SocketAddr>()
            .is_ok(),
        "{start}"
    );
    assert_eq!(access.len(), answers.len(), "{access:#?}");
    let field = |i: usize, f: &str| access[i][f].clone();
    let decisions: Vec<_> = (0..access.len()).map(|i| field(i, "decision")).collect();
    assert_eq!(
        decisions,
        [
            "allow",
            "deny",
            "allow",
            "shadow_deny",
            "exempt",
            "unauthenticated",
            "ambiguous",
            "unavailable",
            "allow"
        ]
    );
    let policies: Vec<_> = (0..access.len())
        .map(|i| field(i, "policy").as_str().unwrap_or("-").to_owned())
        .collect();
    assert_eq!(
        policies,
        [
            "per_account",
            "per_account",
            "per_ip",
            "per_ip",
            "ops",
            "-",
            "-",
            "central",
            "-"
        ]
    );
    let null = serde_json::Value::Null;
    // The key as the limiter keyed it: the account as a keyed hash, never the raw value.
    let key = field(1, "key").as_str().unwrap().to_owned();
    assert!(
        key.starts_with("per_account:acct:") && key.len() == "per_account:acct:".len() + 32,
        "{key}"
    );
    assert!(
        lines.iter().all(|l| !l.contains("sk_live_alice")),
        "a raw account was logged"
    );
    assert_eq!(field(0, "key"), field(1, "key"));
    assert_eq!(field(3, "key"), "per_ip:ip:127.0.0.1");
    assert_eq!(field(1, "retry_after"), 3600);
    assert_eq!(field(7, "retry_after").as_u64().map(|s| s > 0), Some(true));
    assert_eq!(field(0, "retry_after"), null);
    assert!(
        access.iter().all(|a| a["duration_us"].is_u64()),
        "{access:#?}"
    );
}
