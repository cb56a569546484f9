//! `tollgate replay` of tollgate's own JSON access log (issue 31): the log names the keys
//! the live gateway keyed each request by (`key`, `keys`), so replay keys account, header
//! and query policies exactly as the live gateway did — it used to see no account in the
//! log and report an account-keyed policy as 0 allowed / 0 denied.

use std::net::SocketAddr;

use crate::common::process::{LoggedServe, temp_file};
use crate::common::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use serde_json::Value;

/// `/login`: 2 per hour per account and 3 per tenant (`x-tenant`); `/q`: 2 per `query:k`,
/// and `/me` requires an account.
fn config(up: SocketAddr) -> String {
    let policy = |name: &str, key: &str, limit: u32| {
        format!(
            "[policies.{name}]\nkey = [\"{key}\"]\nalgorithm = \"gcra\"\nlimit = {limit}\nperiod = \"1h\"\n"
        )
    };
    let route = |name: &str, policies: &str, extra: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"/{name}\" }}\nupstream = \"app\"\npolicies = [{policies}]\n{extra}"
        )
    };
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[account]\nheader = \"x-api-key\"\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n{}{}{}{}{}{}",
        policy("per_account", "account", 2),
        policy("per_tenant", "header:x-tenant", 3),
        policy("per_k", "query:k", 2),
        route("login", "\"per_account\", \"per_tenant\"", ""),
        route("q", "\"per_k\"", ""),
        route("me", "\"per_account\"", "require_account = true\n"),
    )
}

async fn send(addr: SocketAddr, target: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = Request::get(format!("http://{addr}{target}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .status()
        .as_u16()
}

/// Run the traffic through a live gateway; its access-log lines.
async fn live(config: &std::path::Path) -> Vec<String> {
    let gw = LoggedServe::start(
        config,
        &[
            ("RUST_LOG", "info"),
            ("TOLLGATE_LOG_FORMAT", "json"),
            ("TOLLGATE_ACCESS_LOG_BUFFER", "0"),
        ],
    );
    let addr = gw.addr;
    for (who, tenant, n) in [
        ("alice", "acme", 5),
        ("bob", "acme", 2),
        ("carol", "globex", 1),
    ] {
        for _ in 0..n {
            send(addr, "/login", &[("x-api-key", who), ("x-tenant", tenant)]).await;
        }
    }
    for _ in 0..3 {
        send(addr, "/q?k=x", &[]).await;
    }
    send(addr, "/me", &[("x-api-key", "dave")]).await;
    send(addr, "/me", &[]).await;
    gw.stop()
        .iter()
        .filter(|l| l.contains("\"target\":\"tollgate::access\""))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_its_own_log_keys_every_policy_as_the_live_gateway_did() {
    let up = echo_upstream().await;
    let cfg = temp_file("own_log.toml", &config(up));
    let lines = live(&cfg).await;
    let log = temp_file("own_log.json", &(lines.join("\n") + "\n"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--json", "-c"])
        .arg(&cfg)
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // What the live gateway decided, from its lines.
    let access: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let live = |status: u64| access.iter().filter(|a| a["status"] == status).count();
    let denied_by = |p: &str| {
        (access.iter())
            .filter(|a| a["decision"] == "deny" && a["policy"] == p)
            .count()
    };
    assert_eq!((live(200), live(429), live(401)), (7, 5, 1), "{access:#?}");
    assert_eq!(v["allowed"], 7, "{v:#}");
    assert_eq!(v["denied"], 5, "{v:#}");
    let login = &v["routes"][0];
    assert_eq!(login["policies"][0]["policy"], "per_account");
    assert_eq!(
        login["policies"][0]["denied"],
        denied_by("per_account"),
        "{v:#}"
    );
    assert_eq!(
        login["policies"][1]["denied"],
        denied_by("per_tenant"),
        "{v:#}"
    );
    assert_eq!(
        v["routes"][1]["policies"][0]["denied"],
        denied_by("per_k"),
        "{v:#}"
    );
    assert_eq!(v["routes"][2]["unauthorized"], 1, "{v:#}");
    // The keys replay names are the live gateway's.
    for k in v["top_denied_keys"].as_array().unwrap() {
        let key = k["key"].as_str().unwrap();
        assert!(
            access.iter().any(|a| a["key"] == key),
            "{key} was never keyed live"
        );
    }
}
