//! Who is being limited, over real sockets: three clients at different rates on a shadow
//! route are listed by `GET /limits/{policy}/top` and `GET /shadow` in the right order with
//! the right counts (a manual clock: the counts are GCRA's at one instant), `tollgate
//! shadow-report` run as a process prints them as the table, bad input is named, and the
//! report asks with the token `--token-env` names.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::config::{limited, policy, route};
use crate::common::process::{spawn_serve_with_env, temp_file, tollgate};
use crate::common::*;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use serde_json::Value;
use tollgate::limit::clock::ManualClock;

async fn admin(admin: SocketAddr, method: Method, path: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{admin}{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send_h1(admin, req).await;
    let status = resp.status();
    let text = text(resp).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// A shadow route `/api` with `per_ip` (5 a minute, burst 5) and an enforcing route
/// `/quiet` whose policy nothing reaches.
fn shadow_config(up: SocketAddr) -> String {
    limited(up, "")
        .text(&policy("per_ip", &["ip"], "gcra", 5, "1m", ""))
        .text(&policy("quiet", &["ip"], "gcra", 1000, "1s", ""))
        .text(&route("api", &["per_ip"], "closed"))
        .text("mode = \"shadow\"\n")
        .text(&route("quiet", &["quiet"], "closed"))
        .build()
}

/// Clients a, b and c send 30, 15 and 8 requests, interleaved, at one instant: each gets
/// its burst of 5 and would be denied the rest (25, 10 and 3); every answer is 200.
async fn three_clients(addr: SocketAddr) {
    let mut left = [("10.0.0.1", 30), ("10.0.0.2", 15), ("10.0.0.3", 8)];
    while left.iter().any(|(_, n)| *n > 0) {
        for (ip, n) in left.iter_mut().filter(|(_, n)| *n > 0) {
            assert_eq!(
                get_as(addr, "/api", ip, None).await.status(),
                StatusCode::OK
            );
            *n -= 1;
        }
    }
}

fn keys(list: &Value, field: &str) -> Vec<(String, u64)> {
    let list = list
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"));
    list.iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap().to_string(),
                k[field].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shadow_clients_are_listed_by_would_be_denials() {
    let clock = ManualClock::new();
    let gw = Gateway::start_with_clock(
        &shadow_config(echo_upstream().await),
        Arc::new(clock.clone()),
    )
    .await;
    let (addr, adm) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    three_clients(addr).await;
    clock.advance(Duration::from_secs(30));
    let want = [
        ("per_ip:ip:10.0.0.1".to_string(), 25),
        ("per_ip:ip:10.0.0.2".to_string(), 10),
        ("per_ip:ip:10.0.0.3".to_string(), 3),
    ];
    for window in ["1m", "15m"] {
        let path = format!("/limits/per_ip/top?window={window}&n=20");
        let (status, v) = admin(adm, Method::GET, &path).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(
            (&v["policy"], &v["window"]),
            (&"per_ip".into(), &window.into())
        );
        assert_eq!(keys(&v["top"], "shadow_denied"), want, "{v}");
        for k in v["top"].as_array().unwrap() {
            assert_eq!(
                (&k["denied"], &k["allowed"], &k["max_error"]),
                (&0.into(), &0.into(), &0.into())
            );
        }
        assert_eq!(
            (&v["shadow_denied"], &v["distinct_keys"]),
            (&38.into(), &3.into())
        );
    }
    let (_, v) = admin(adm, Method::GET, "/limits/per_ip/top?n=2").await;
    assert_eq!(keys(&v["top"], "shadow_denied"), want[..2]);

    let (status, v) = admin(adm, Method::GET, "/shadow").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 1, "only per_ip runs in shadow: {v}");
    let w = &policies[0]["windows"]["1m"];
    assert_eq!(keys(&w["top"], "would_be_denials"), want, "{v}");
    assert_eq!(
        (&w["would_be_denials"], &w["requests"], &w["distinct_keys"]),
        (&38.into(), &53.into(), &3.into())
    );
    assert_eq!(w["span_seconds"], 30.0);
    // 30 s seen, within one period: b's peak is the 15 it sent, the smallest limit a
    // alone exceeds (not 15 in 30 s scaled to 30 a minute).
    let limits: Vec<&Value> = w["by_top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["suggested_limit"])
        .collect();
    assert_eq!(
        limits,
        [&Value::from(15), &Value::Null, &Value::Null],
        "{v}"
    );

    // The command line, as a process, prints the table from the same answer.
    let out = tokio::task::spawn_blocking(move || {
        tollgate()
            .args(["shadow-report", "--admin", &format!("http://{adm}")])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(
            "| policy | window | seen | would-be denials | keys denied / seen | top keys' share"
        ),
        "{stdout}"
    );
    for row in [
        "| per_ip | 1m | 30 s | 38 | 3 / 3 | 65.8 % / 100.0 % / 100.0 % | 15 / - / - per 1m (now 5) |",
        "| per_ip | 15m | 30 s | 38 | 3 / 3 | 65.8 % / 100.0 % / 100.0 % |",
        "25  65.8 %        30      30  per_ip:ip:10.0.0.1",
    ] {
        assert!(stdout.contains(row), "no `{row}` in:\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_named_and_no_denials_is_an_empty_list() {
    let gw = Gateway::start(&shadow_config(echo_upstream().await)).await;
    let adm = gw.addrs.admin_listen.unwrap();
    let (status, v) = admin(adm, Method::GET, "/limits/nope/top").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(v["detail"].as_str().unwrap().contains("`nope`"), "{v}");
    for (query, named) in [
        ("window=5m", "window"),
        ("n=0", "n"),
        ("n=many", "n"),
        ("k=3", "`k`"),
    ] {
        let (status, v) = admin(adm, Method::GET, &format!("/limits/per_ip/top?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(named) || detail.contains(named),
            "{query}: {detail}"
        );
    }
    let (status, v) = admin(adm, Method::GET, "/limits/quiet/top?window=15m").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&v["top"], &v["denied"]),
        (&Value::Array(vec![]), &0.into()),
        "{v}"
    );
    assert_eq!(
        admin(adm, Method::POST, "/shadow").await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    // The key's own endpoint is still there beside it.
    let (status, v) = admin(adm, Method::GET, "/limits/per_ip?ip=10.0.0.9").await;
    assert_eq!(
        (status, &v["key"]),
        (StatusCode::OK, &"per_ip:ip:10.0.0.9".into())
    );
}

const TOKEN: &str = "shadow-report-token-Vb73mQ";

/// Against `tollgate serve` with an admin token: `--token-env` names the variable the
/// report reads it from (`--json` prints the answer); without it the gateway answers 401
/// and the report says so and names `--token-env`, exit 1; a wrong token is named too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_asks_with_the_token_its_variable_holds() {
    let toml = limited(echo_upstream().await, "")
        .text(&policy("per_ip", &["ip"], "gcra", 1, "1h", ""))
        .text(&route("api", &["per_ip"], "closed"))
        .text("mode = \"shadow\"\n")
        .build()
        .replace(
            "[server]\n",
            "[server]\nadmin_token_env = \"TG_SHADOW_REPORT_TOKEN\"\n",
        );
    let gw = spawn_serve_with_env(
        &temp_file("shadow.toml", &toml),
        &[("TG_SHADOW_REPORT_TOKEN", TOKEN)],
    );
    let (addr, adm) = (gw.addr, gw.admin.unwrap());
    assert_eq!(
        admitted(addr, "/api", "10.0.0.7", 3).await,
        3,
        "shadow forwards all"
    );
    let run = move |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            tollgate()
                .args(&args)
                .env("TG_REPORT_TOKEN", TOKEN)
                .output()
                .unwrap()
        })
    };
    let base = vec![
        "shadow-report".to_string(),
        "--admin".into(),
        adm.to_string(),
    ];
    let with_token = [
        base.clone(),
        vec![
            "--token-env".into(),
            "TG_REPORT_TOKEN".into(),
            "--json".into(),
        ],
    ]
    .concat();
    let out = run(with_token).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["policies"][0]["windows"]["15m"]["would_be_denials"], 2,
        "{v}"
    );
    let out = run(base.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GET /shadow answered 401"), "{stderr}");
    assert!(stderr.contains("give --token-env VAR"), "{stderr}");
    let wrong = [base, vec!["--token-env".into(), "HOME".into()]].concat();
    let out = run(wrong).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the token in $HOME was refused"),
        "{stderr}"
    );
}
