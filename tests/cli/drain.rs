//! `[server] drain_delay`: after SIGTERM `/readyz` answers 503 while the listeners still
//! accept and serve, for the delay, then they close and the process drains and exits 0; a
//! second SIGTERM ends the delay early; `"0s"` closes the listeners at once, as before.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::{Response, StatusCode};

use crate::common::process::{Logged, spawn_logged, temp_file, tollgate};
use crate::common::*;

fn start(toml: &str) -> Logged {
    let cfg = temp_file("drain.toml", toml);
    let mut cmd = tollgate();
    cmd.args(["serve", "-c"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .env("TOLLGATE_WORKERS", "2");
    spawn_logged(cmd).unwrap_or_else(|(s, log)| panic!("exited ({s}) before listening:\n{log}"))
}

/// Poll the admin listener's `/readyz` until it answers 503 (at most 10 s).
async fn wait_not_ready(admin: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = send_h1(admin, get(&format!("http://{admin}/readyz")))
            .await
            .status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            return;
        }
        assert_eq!(status, StatusCode::OK, "readyz before the drain");
        assert!(Instant::now() < deadline, "/readyz never turned 503");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_turns_503_while_the_proxy_still_serves_then_it_exits_0() {
    let up = echo_upstream().await;
    let mut gw = start(&config(up, "drain_delay = \"3s\"", ""));
    let (addr, admin) = (gw.addr, gw.admin.unwrap());
    let ok = send_h1(admin, get(&format!("http://{admin}/readyz"))).await;
    assert_eq!(ok.status(), 200);
    let term = Instant::now();
    gw.signal("TERM");
    wait_not_ready(admin).await;
    // A new connection to the proxy listener is still accepted and proxied.
    let resp = send_h1(addr, get(&format!("http://{addr}/during-drain"))).await;
    assert_eq!(resp.status(), 200);
    let echoed = text(resp).await;
    assert!(
        echoed.contains("/during-drain"),
        "the backend's answer: {echoed}"
    );
    let status = gw
        .wait_exit(Duration::from_secs(30))
        .expect("exits within 30 s of SIGTERM");
    assert_eq!(status.code(), Some(0));
    assert!(
        term.elapsed() >= Duration::from_secs(3),
        "left before the delay: {:?}",
        term.elapsed()
    );
    let stderr = gw.stderr().join("\n");
    assert!(stderr.contains("draining: /readyz answers 503"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_ends_the_delay() {
    let up = echo_upstream().await;
    let mut gw = start(&config(up, "drain_delay = \"5m\"", ""));
    gw.signal("TERM");
    wait_not_ready(gw.admin.unwrap()).await;
    let second = Instant::now();
    gw.signal("TERM");
    let status = gw
        .wait_exit(Duration::from_secs(60))
        .expect("a second SIGTERM ends a 5-minute delay");
    assert_eq!(status.code(), Some(0));
    assert!(second.elapsed() < Duration::from_secs(60));
    let stderr = gw.stderr().join("\n");
    assert!(stderr.contains("the drain delay ends now"), "{stderr}");
}

/// `"0s"` (the default): the proxy listener closes at SIGTERM, while a request is still in
/// flight, so nothing waited for a delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delay_closes_the_listeners_at_once() {
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let (arrived_tx, mut arrived_rx) = tokio::sync::mpsc::channel::<()>(1);
    let up = upstream(move |_req| {
        let (mut release_rx, arrived_tx) = (release_rx.clone(), arrived_tx.clone());
        async move {
            let _ = arrived_tx.send(()).await;
            let _ = release_rx.wait_for(|r| *r).await;
            Response::new(body("done"))
        }
    })
    .await;
    let mut gw = start(&config(
        up,
        "drain_delay = \"0s\"\nshutdown_grace = \"20s\"",
        "",
    ));
    let addr = gw.addr;
    let in_flight = tokio::spawn(send_h1(addr, get(&format!("http://{addr}/slow"))));
    arrived_rx.recv().await.unwrap();
    gw.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "the listener still accepts");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "draining the request in flight"
    );
    release_tx.send(true).unwrap();
    assert_eq!(text(in_flight.await.unwrap()).await, "done");
    assert_eq!(
        gw.wait_exit(Duration::from_secs(30)).map(|s| s.code()),
        Some(Some(0))
    );
}
