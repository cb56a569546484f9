//! The admin API's answers the operating chapter shows (`docs/src/operating.md`), from a
//! gateway serving the page's own config: what `tollgate reload` prints and a refused
//! reload (a `tollgate serve` process, since `reload` asks the admin listener the file
//! names), one key's budget and the most denied keys (in-process, on a manual clock, so the
//! times are exact), and `/activity` (its sampler ticked by the test).

use std::process::Command;
use std::sync::Arc;

use http::{Method, StatusCode};
use tollgate::limit::clock::ManualClock;

use super::page_toml;
use crate::common::process::{spawn_logged, tollgate};
use crate::common::reload::{admin, admin_with};
use crate::common::shown::assert_json;
use crate::common::temp::TempDir;
use crate::common::*;

const TOKEN_ENV: &str = "TOLLGATE_DOCS_ADMIN_TOKEN";
const TOKEN: &str = "docs-admin-token-0123456789";

/// The page's config with its backend at `up` and the traffic listener on a free port.
async fn operating_toml() -> String {
    let up = echo_upstream().await;
    page_toml("docs/src/operating.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_reload_prints_and_a_refused_reload() {
    let toml = operating_toml().await;
    let dir = TempDir::new("shown-reload");
    // `tollgate reload` finds the gateway at the file's admin_listen, so the port is fixed:
    // probed free, then bound by the gateway (tried again if another socket took it between).
    let mut attempt = 0;
    let (gw, file) = loop {
        attempt += 1;
        assert!(attempt <= 5, "five probed admin ports taken in a row");
        let port = peers::free_ports(1)[0];
        let file = toml.replace("127.0.0.1:9901", &port.to_string());
        dir.file("gateway.toml", file.as_bytes());
        let mut serve = tollgate();
        serve
            .args(["serve", "-c", "gateway.toml"])
            .current_dir(&dir.0)
            .env(TOKEN_ENV, TOKEN);
        match spawn_logged(serve) {
            Ok(gw) => break (gw, file),
            Err((_, log)) if log.contains("in use") => continue,
            Err((status, log)) => panic!("serve exited {status}:\n{log}"),
        }
    };
    let adm = gw.admin.unwrap();

    // "edit gateway.toml (say, limit = 50), then: tollgate reload -c gateway.toml"
    let edited = file.replace("limit = 20", "limit = 50");
    assert_ne!(edited, file);
    dir.file("gateway.toml", edited.as_bytes());
    let out = tokio::task::spawn_blocking({
        let dir = dir.0.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(["reload", "-c", "gateway.toml"])
                .current_dir(dir)
                .env(TOKEN_ENV, TOKEN)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The file is the reader's own path.
    assert_json("reload-output", &printed, &["/file"]);

    // A file that moves the listener is refused.
    dir.file(
        "gateway.toml",
        edited.replace("127.0.0.1:0", "127.0.0.1:8080").as_bytes(),
    );
    let (status, answer) = admin_with(adm, Method::POST, "/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_json("reload-refused", &answer, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keys_budget_and_the_most_denied_keys() {
    // The token line aside (this gateway runs in the test's process, whose environment
    // stays as it is), the page's config.
    let toml = operating_toml()
        .await
        .replace("127.0.0.1:9901", "127.0.0.1:0")
        .lines()
        .filter(|l| !l.starts_with("admin_token_env"))
        .collect::<Vec<_>>()
        .join("\n");
    let clock = ManualClock::new();
    let gw = Gateway::start_with_clock(&toml, Arc::new(clock.clone())).await;
    let (addr, adm) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());

    // One request, then its key.
    assert_eq!(admitted(addr, "/", "127.0.0.1", 1).await, 1);
    let (status, key) = admin(adm, Method::GET, "/limits/per_ip?ip=127.0.0.1").await;
    assert_eq!(status, StatusCode::OK, "{key}");
    assert_json("limits-one-key", &key, &[]);

    // Ten more at the same instant: the burst of 10 is spent, the last is denied.
    assert_eq!(admitted(addr, "/", "127.0.0.1", 10).await, 9);
    clock.advance(std::time::Duration::from_secs(1));
    let (status, top) = admin(adm, Method::GET, "/limits/per_ip/top").await;
    assert_eq!(status, StatusCode::OK, "{top}");
    assert_json("limits-top", &top, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_after_thirty_requests_into_the_shadow_route() {
    let up = echo_upstream().await;
    let toml = page_toml("docs/src/shadow-to-enforce.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9901", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    let gw = Gateway::start_sampled_by_hand(&toml).await;
    let sampler = gw.sampler.clone().unwrap();
    // A bucket of 10 s with 30 requests of one client (5 allowed, 25 would-be denials),
    // then one without.
    sampler.tick();
    assert_eq!(
        admitted(gw.addrs.listen, "/search", "10.0.0.1", 30).await,
        30
    );
    sampler.tick();
    sampler.tick();
    let (status, activity) = admin(gw.addrs.admin_listen.unwrap(), Method::GET, "/activity").await;
    assert_eq!(status, StatusCode::OK);
    assert_json("activity", &activity, &[]);
}
