//! The book's shadow-mode chapter (`docs/src/shadow-to-enforce.md`) shows real output: its
//! two runs are made here, over real sockets, on a manual clock, and what `tollgate
//! shadow-report` and `GET /limits/per_ip/top` answer is the block each is marked as
//! (`shown=shadow-first-report`, `shadow-first-top`, `shadow-steady-report`: see
//! `tests/common/shown.rs`). `PRINT_DOC_OUTPUT=1` prints them (to paste after a change).

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::process::tollgate;
use crate::common::reload::{admin, serve};
use crate::common::*;
use http::{Method, StatusCode};
use tollgate::limit::clock::ManualClock;

/// The chapter's config, on ephemeral ports.
fn shadow_toml(up: SocketAddr) -> String {
    let doc = chapter();
    let block = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the chapter opens with its config");
    block
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9901", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"))
}

fn chapter() -> String {
    std::fs::read_to_string(repo_path("docs/src/shadow-to-enforce.md")).unwrap()
}

/// `tollgate shadow-report --admin ADMIN`'s stdout.
async fn report(adm: SocketAddr) -> String {
    let out = tokio::task::spawn_blocking(move || {
        tollgate()
            .args(["shadow-report", "--admin", &format!("http://{adm}")])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The first run: 30, 15 and 8 requests from three clients, one after another, within a
/// second; the report asked five seconds after the gateway started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chapters_first_run_is_as_printed() {
    let clock = ManualClock::new();
    let gw = serve(&shadow_toml(echo_upstream().await), &clock).await;
    for (ip, n) in [("10.0.0.1", 30), ("10.0.0.2", 15), ("10.0.0.3", 8)] {
        assert_eq!(admitted(gw.addr, "/search", ip, n).await, n);
        clock.advance(Duration::from_millis(300));
    }
    clock.set(5_000_000_000);
    shown::assert_text("shadow-first-report", &report(gw.admin).await, &[]);

    let (status, top) = admin(gw.admin, Method::GET, "/limits/per_ip/top?window=15m&n=2").await;
    assert_eq!(status, StatusCode::OK);
    shown::assert_json("shadow-first-top", &top, &[]);
}

/// The second run: 150 s of steady traffic (one request a second, one every two seconds,
/// one every five), the report asked four seconds after it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chapters_steady_run_is_as_printed() {
    let clock = ManualClock::new();
    let gw = serve(&shadow_toml(echo_upstream().await), &clock).await;
    for second in 0..150 {
        for (ip, every) in [("10.0.0.1", 1), ("10.0.0.2", 2), ("10.0.0.3", 5)] {
            if second % every == 0 {
                assert_eq!(admitted(gw.addr, "/search", ip, 1).await, 1);
            }
        }
        clock.advance(Duration::from_secs(1));
    }
    clock.advance(Duration::from_secs(4));
    shown::assert_text("shadow-steady-report", &report(gw.admin).await, &[]);
}
