//! The store behind Redis Sentinel, against real `redis-server --sentinel` processes: the
//! gateway finds the master through the sentinels, and after a forced failover it finds
//! the new one: decisions resume (the route fails closed meanwhile), with the key's count
//! carried over by replication (a write lost in the switch could give it back: here
//! nothing is written during it, so the bound holds exactly).

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::{ConfigBuilder, policy};
use crate::common::sentinel::{MASTER_NAME, Sentinels};
use crate::common::*;

async fn status(addr: SocketAddr) -> u16 {
    get_as(addr, "/api", "192.0.2.1", None)
        .await
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_the_master_through_a_failover() {
    let s = tokio::task::spawn_blocking(Sentinels::start).await.unwrap();
    let up = echo_upstream().await;
    let sentinels: Vec<String> = s.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .upstream(up)
        .text(&format!(
            "[store]\nkind = \"redis-sentinel\"\nsentinels = [{}]\nmaster_name = \"{MASTER_NAME}\"\ntimeout = \"500ms\"\n",
            sentinels.join(", ")
        ))
        .text(&policy("c", &["ip"], "gcra", 5, "1h", "site = \"central\""))
        .route("api", &["c"], "closed")
        .build();
    let gw = Gateway::start(&cfg).await;
    let addr = gw.addrs.listen;
    let mut admitted = 0;
    for _ in 0..3 {
        assert_eq!(status(addr).await, 200);
        admitted += 1;
    }
    assert!(
        s.master.cli(&["KEYS", "*"]).contains("c:ip:192.0.2.1"),
        "decided in the master"
    );
    let s = tokio::task::spawn_blocking(move || {
        s.failover();
        s
    })
    .await
    .unwrap();
    assert_eq!(s.master_port(), s.replica.port);
    // Until the gateway has found the new master, the route fails closed (503).
    let last = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
    eventually(
        "decisions resume on the new master",
        Duration::from_secs(20),
        || {
            let last = last.clone();
            async move {
                let code = status(addr).await;
                last.store(code, std::sync::atomic::Ordering::Relaxed);
                code != 503
            }
        },
    )
    .await;
    admitted += usize::from(last.load(std::sync::atomic::Ordering::Relaxed) == 200);
    while admitted < 5 {
        assert_eq!(
            status(addr).await,
            200,
            "the count carried over: {admitted} admitted"
        );
        admitted += 1;
    }
    assert_eq!(status(addr).await, 429, "5 in all across the failover");
    assert!(s.replica.cli(&["KEYS", "*"]).contains("c:ip:192.0.2.1"));
}
