//! Reloads that must be refused, found by attacking the reload: what only a restart can
//! change, including the secrets `/config` masks, and lease numbers on the memory store.

use std::time::Duration;

use crate::common::reload::*;
use crate::common::*;
use http::{Method, StatusCode};
use tollgate::limit::clock::ManualClock;

// ---------------------------------------------------------------------------------------
// With the memory store a lease policy's grants live in this process, in units of the
// policy's own rate (`MemoryCoordinator`): other numbers would misread them (a spent key
// read as full, a full key locked out), so a reload that changes them is refused.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lease_numbers_cannot_change_on_reload() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    clock.set(1_000 * 1_000_000_000);
    let lease = |limit: u32| {
        file(
            up,
            &(policy("l", "gcra", limit, "site = \"lease\"\n") + &route("a", "/a", &["l"])),
        )
    };
    let s = serve(&lease(10), &clock).await;
    let mut spent = statuses(s.addr, "/a", "192.0.2.1", 11).await;
    assert_eq!(spent.pop(), Some(429), "{spent:?}");
    assert_eq!(spent, [200; 10]);
    for limit in [7, 20] {
        let (status, v) = reload(&s, &lease(limit)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains("policies.l") && e.contains("restart"), "{e}");
    }
    // Nothing changed: the spent key stays spent, under the old numbers.
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 2).await, [429; 2]);
    // The same numbers reload (a new route beside it) and keep the grants.
    let (status, v) = reload(&s, &(lease(10) + &route("b", "/b", &[]))).await;
    assert_eq!(
        (status, &v["policies"]["l"]),
        (StatusCode::OK, &serde_json::Value::from("kept"))
    );
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [429]);
    clock.advance(Duration::from_secs(360));
    assert_eq!(
        statuses(s.addr, "/a", "192.0.2.1", 1).await,
        [200],
        "one cell refilled in 6 min"
    );
}

// ---------------------------------------------------------------------------------------
// `/config` masks secrets, but a reload compares them unmasked: a new admin token (or a
// renamed `admin_token_env`) needs a restart, and the refusal names the key.
// ---------------------------------------------------------------------------------------

const TOKEN_A: &str = "token-a-0123456789abcdef";
const TOKEN_B: &str = "token-b-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_admin_token_is_refused_by_name() {
    let up = echo_upstream().await;
    let with = |var: &str| {
        file(up, &route("a", "/a", &[])).replace(
            "admin_listen = \"127.0.0.1:0\"\n",
            &format!("admin_listen = \"127.0.0.1:0\"\nadmin_token_env = \"{var}\"\n"),
        )
    };
    let path = process::temp_file("token.toml", &with("TG_TOKEN_A"));
    let gw =
        process::spawn_serve_with_env(&path, &[("TG_TOKEN_A", TOKEN_A), ("TG_TOKEN_B", TOKEN_B)]);
    let adm = gw.admin.unwrap();
    std::fs::write(&path, with("TG_TOKEN_B")).unwrap();
    let (status, v) = admin_with(adm, Method::POST, "/reload", Some(TOKEN_A)).await;
    let (b, _) = admin_with(adm, Method::GET, "/config", Some(TOKEN_B)).await;
    assert!(
        status == StatusCode::CONFLICT || b == StatusCode::OK,
        "[server] admin_token_env changed: reload answered {status} {v}, yet the new token gets {b}"
    );
}

// ---------------------------------------------------------------------------------------
// The same for a password in a store URL: refused, by key, never silently ignored.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_password_in_a_store_url_is_refused_by_name() {
    let redis = crate::common::redis::RedisServer::start();
    let up = echo_upstream().await;
    let with = |password: &str| {
        file(
            up,
            &(format!(
                "[store]\nkind = \"redis\"\nurls = [\"redis://:{password}@127.0.0.1:{}\"]\ntimeout = \"500ms\"\n",
                redis.port
            ) + &route("a", "/a", &[])),
        )
    };
    let s = serve(&with("one"), &ManualClock::new()).await;
    let (status, v) = reload(&s, &with("two")).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "[store] urls changed (its credentials): {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reload_command_reaches_a_wildcard_admin_and_exits_1_when_refused() {
    let up = echo_upstream().await;
    // A wildcard admin listener needs a token (`check` refuses it otherwise), which
    // `tollgate reload` reads from the same variable and sends.
    let env = [("TG_WILD_ADMIN_TOKEN", TOKEN_A)];
    // A free port can be taken (by another test's outgoing connection) between the probe
    // and the gateway's bind: then try another one.
    let (one, path, _gw) = (0..5)
        .find_map(|_| {
            let port = peers::free_ports(1)[0].port();
            let one = file(up, &route("a", "/a", &[])).replace(
                "admin_listen = \"127.0.0.1:0\"",
                &format!(
                    "admin_listen = \"0.0.0.0:{port}\"\nadmin_token_env = \"TG_WILD_ADMIN_TOKEN\""
                ),
            );
            let path = process::temp_file("wild.toml", &one);
            match process::try_spawn_serve_with_env(&path, &env) {
                Ok(gw) => Some((one, path, gw)),
                Err(log) if log.contains("Address already in use") => None,
                Err(log) => panic!("tollgate exited before listening:\n{log}"),
            }
        })
        .expect("five free ports in a row were taken before the gateway bound them");
    let run = || {
        process::tollgate()
            .args(["reload", "-c"])
            .arg(&path)
            .envs(env)
            .output()
            .unwrap()
    };
    std::fs::write(&path, one.clone() + &route("b", "/b", &[])).unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    std::fs::write(
        &path,
        one.replace("max_connections", "x")
            .replace("[server]\n", "[server]\nmax_connections = 7\n"),
    )
    .unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max_connections"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------------------
// `access_log` and `drain_delay` are read once at start (the file is opened before
// logging starts; the delay by the shutdown that began with the process), like `listen`.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_access_log_or_drain_delay_is_refused_by_name() {
    let up = echo_upstream().await;
    let good = file(up, &route("a", "/a", &[]));
    let s = serve(&good, &ManualClock::new()).await;
    let with = |line: &str| good.replacen("[client_ip]", &format!("{line}\n[client_ip]"), 1);
    for (line, key) in [
        ("access_log = \"access.log\"", "[server] access_log"),
        ("drain_delay = \"5s\"", "[server] drain_delay"),
    ] {
        let (status, v) = reload(&s, &with(line)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{line}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(key) && e.contains("restart"), "{line}: {e}");
    }
    // The defaults written out are no change.
    let (status, v) = reload(&s, &with("drain_delay = \"0s\"")).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}
