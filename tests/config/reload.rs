//! Config reload over real sockets: `POST /reload` on the admin listener, `SIGHUP`, and
//! `tollgate reload -c`. A reload applies new routes and policies to the next request, keeps
//! every unchanged policy's counters (and carries a changed one's spent cells), drops no
//! request in flight or under load, and an invalid or restart-only file changes nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::reload::*;
use crate::common::*;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Empty;
use serde_json::Value;
use tollgate::limit::clock::ManualClock;

/// A gateway on a fresh manual clock (time never moves unless a test says so).
async fn serve_new(toml: &str) -> Served {
    serve(toml, &ManualClock::new()).await
}

fn reloads(metrics: &str, result: &str) -> f64 {
    metric_sum(
        metrics,
        &format!("tollgate_config_reloads_total{{result=\"{result}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_routes_and_keeps_every_counter() {
    let up = echo_upstream().await;
    let before = policy("per_ip", "gcra", 5, "") + &route("a", "/a", &["per_ip"]);
    let s = serve_new(&file(up, &before)).await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 3).await, [200; 3]);
    assert_eq!(get_as(s.addr, "/b", "192.0.2.1", None).await.status(), 404);

    let after = before.clone()
        + &policy("per_ip_b", "sliding_window", 1, "")
        + &route("b", "/b", &["per_ip_b"]);
    let (status, v) = reload(&s, &file(up, &after)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["policies"]["per_ip"], "kept", "{v}");
    assert_eq!(v["policies"]["per_ip_b"], "new", "{v}");

    // Not reset: 2 of per_ip's 5 left, then 429.
    assert_eq!(
        statuses(s.addr, "/a", "192.0.2.1", 3).await,
        [200, 200, 429]
    );
    assert_eq!(statuses(s.addr, "/b", "192.0.2.1", 2).await, [200, 429]);
    let (_, routes) = admin(s.admin, Method::GET, "/routes").await;
    assert_eq!(
        routes["routes"].as_array().map(Vec::len),
        Some(2),
        "{routes}"
    );
    let m = metrics_text(s.admin).await;
    assert_eq!((reloads(&m, "ok"), reloads(&m, "error")), (1.0, 0.0));
    // The policy's key count carried on the same series (one key, not two).
    assert_eq!(
        metric_sum(&m, "tollgate_limiter_keys{policy=\"per_ip\"}"),
        1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_changes_nothing_and_says_what_check_says() {
    let up = echo_upstream().await;
    let good = file(
        up,
        &(policy("per_ip", "gcra", 2, "") + &route("a", "/a", &["per_ip"])),
    );
    let s = serve_new(&good).await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [200]);
    let (_, routes_before) = admin(s.admin, Method::GET, "/routes").await;

    let broken = good.replace("limit = 2", "limit = \"two\"");
    let (status, v) = reload(&s, &broken).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let check = tollgate::config::load_file(&s.path)
        .unwrap_err()
        .to_string();
    assert_eq!(v["error"], check.as_str(), "the answer is check's message");
    assert!(check.contains("limit"), "{check}");

    // The old config still serves, with its counter.
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 2).await, [200, 429]);
    let (_, routes_after) = admin(s.admin, Method::GET, "/routes").await;
    assert_eq!(routes_before, routes_after);
    let m = metrics_text(s.admin).await;
    assert_eq!((reloads(&m, "ok"), reloads(&m, "error")), (0.0, 1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_only_keys_are_refused_by_name() {
    let up = echo_upstream().await;
    let good = file(up, &route("a", "/a", &[]));
    let s = serve_new(&good).await;
    let moved = good.replace(
        "listen = \"127.0.0.1:0\"\nadmin",
        "listen = \"127.0.0.1:1\"\nadmin",
    );
    let (status, v) = reload(&s, &moved).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("[server] listen"), "{e}");
    assert!(e.contains("restart"), "{e}");
    assert_eq!(get_as(s.addr, "/a", "192.0.2.1", None).await.status(), 200);
    assert_eq!(admin(s.admin, Method::GET, "/reload").await.0, 405);
    // A key /config did not show was neither shown nor refused: the reload said ok and the
    // old request id header stayed (issue 46's admin review).
    let renamed = good.replace(
        "[server]\n",
        "[server]\nrequest_id_header = \"x-trace-id\"\n",
    );
    let (status, v) = reload(&s, &renamed).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("[server] request_id_header"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_numbers_carry_the_cells_already_spent() {
    let up = echo_upstream().await;
    let s = serve_new(&file(
        up,
        &(policy("p", "gcra", 10, "") + &route("a", "/a", &["p"])),
    ))
    .await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 8).await, [200; 8]);

    // Twice the limit: 8 spent of 20, 12 left (not a fresh 20, not 2).
    let up_config = file(
        up,
        &(policy("p", "token_bucket", 20, "") + &route("a", "/a", &["p"])),
    );
    let (status, v) = reload(&s, &up_config).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["policies"]["p"], "converted (1 keys)", "{v}");
    let (_, k) = admin(s.admin, Method::GET, "/limits/p?ip=192.0.2.1").await;
    assert_eq!(k["remaining"], 12, "{k}");

    // A lower limit than what is spent: the key owes, and denies.
    let down = file(
        up,
        &(policy("p", "gcra", 4, "") + &route("a", "/a", &["p"])),
    );
    assert_eq!(reload(&s, &down).await.0, StatusCode::OK);
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [429]);
    // Another key recipe: the old keys name other things; it starts empty.
    let rekeyed = down.replace("key = [\"ip\"]", "key = [\"ip\", \"method\"]");
    let (_, v) = reload(&s, &rekeyed).await;
    assert_eq!(v["policies"]["p"], "reset (its key changed)", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_change_counts_requests_already_in_flight() {
    let (release, released) = tokio::sync::watch::channel(false);
    let up = upstream(move |_req| {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|r| *r).await;
            Response::new(body("done"))
        }
    })
    .await;
    let conc = |limit| {
        file(
            up,
            &(policy("c", "concurrency", limit, "") + &route("a", "/a", &["c"])),
        )
    };
    let s = serve_new(&conc(2)).await;
    let addr = s.addr;
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get_as(addr, "/a", "192.0.2.9", None).await.status() }))
        .collect();
    eventually("two requests in flight", Duration::from_secs(5), || async {
        let (_, k) = admin(s.admin, Method::GET, "/limits/c?ip=192.0.2.9").await;
        k["remaining"] == 0
    })
    .await;
    let (status, v) = reload(&s, &conc(3)).await;
    assert_eq!(
        (status, &v["policies"]["c"]),
        (StatusCode::OK, &Value::from("kept"))
    );
    // 2 in flight under the old config count against the new limit of 3.
    let third = tokio::spawn(async move { get_as(addr, "/a", "192.0.2.9", None).await.status() });
    eventually("the third in flight", Duration::from_secs(5), || async {
        let (_, k) = admin(s.admin, Method::GET, "/limits/c?ip=192.0.2.9").await;
        k["remaining"] == 0
    })
    .await;
    assert_eq!(get_as(addr, "/a", "192.0.2.9", None).await.status(), 429);
    release.send(true).unwrap();
    for h in held.into_iter().chain([third]) {
        assert_eq!(h.await.unwrap(), 200);
    }
    // Every cell came back, old config's requests included.
    let (_, k) = admin(s.admin, Method::GET, "/limits/c?ip=192.0.2.9").await;
    assert_eq!(k["remaining"], 3, "{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_under_load_fails_no_request_and_resets_no_counter() {
    let up = upstream(|_req| async {
        // Long enough that requests are in flight at every reload.
        tokio::time::sleep(Duration::from_millis(2)).await;
        Response::new(body("ok"))
    })
    .await;
    const LIMIT: u32 = 1_000_000;
    let base = policy("p", "gcra", LIMIT, "") + &route("a", "/a", &["p"]);
    let s = Arc::new(serve_new(&file(up, &base)).await);
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (s, sent, failed, stop) = (s.clone(), sent.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move { load(s.addr, &sent, &failed, &stop).await })
        })
        .collect();
    for i in 0..10 {
        let before = sent.load(Ordering::Relaxed);
        eventually("traffic between reloads", Duration::from_secs(5), || {
            let sent = sent.clone();
            async move { sent.load(Ordering::Relaxed) > before + 20 }
        })
        .await;
        // Alternate: a route comes and goes; `p` never changes.
        let extra = if i % 2 == 0 {
            route("b", "/b", &[])
        } else {
            String::new()
        };
        let (status, v) = reload(&s, &file(up, &(base.clone() + &extra))).await;
        assert_eq!(
            (status, &v["policies"]["p"]),
            (StatusCode::OK, &Value::from("kept"))
        );
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let sent = sent.load(Ordering::Relaxed);
    assert_eq!(failed.load(Ordering::Relaxed), 0, "of {sent}");
    assert!(sent > 10, "{sent}");
    // The manual clock never moves: every request of all ten configs is still spent.
    let (_, k) = admin(s.admin, Method::GET, "/limits/p?ip=192.0.2.1").await;
    assert_eq!(k["remaining"], u64::from(LIMIT) - sent as u64, "{k}");
}

/// Requests on one keep-alive connection until `stop`; counts answers and failures.
async fn load(
    addr: SocketAddr,
    sent: &AtomicUsize,
    failed: &AtomicUsize,
    stop: &std::sync::atomic::AtomicBool,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    while !stop.load(Ordering::Relaxed) {
        let req = Request::get(format!("http://{addr}/a"))
            .header("x-forwarded-for", "192.0.2.1")
            .body(Empty::<Bytes>::new())
            .unwrap();
        match tx.send_request(req).await {
            Ok(r) if r.status() == StatusCode::OK => {}
            _ => drop(failed.fetch_add(1, Ordering::Relaxed)),
        }
        sent.fetch_add(1, Ordering::Relaxed);
    }
}

fn run_reload(path: &Path) -> std::process::Output {
    process::tollgate()
        .args(["reload", "-c"])
        .arg(path)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_the_reload_command_reload_the_running_process() {
    let up = echo_upstream().await;
    // A fixed admin port: `tollgate reload` finds the gateway by the file's admin_listen.
    let admin_at = peers::free_ports(1)[0];
    let one = file(up, &route("a", "/a", &[])).replace(
        "admin_listen = \"127.0.0.1:0\"",
        &format!("admin_listen = \"{admin_at}\""),
    );
    let path = process::temp_file("hup.toml", &one);
    let gw = process::spawn_serve(&path);
    let adm = gw.admin.unwrap();
    let routes = |n: usize| async move {
        let (_, v) = admin(adm, Method::GET, "/routes").await;
        v["routes"].as_array().map(Vec::len) == Some(n)
    };

    std::fs::write(&path, one.clone() + &route("b", "/b", &[])).unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-HUP", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    eventually("SIGHUP reloads", Duration::from_secs(10), || routes(2)).await;
    assert_eq!(get_as(gw.addr, "/b", "192.0.2.1", None).await.status(), 200);

    // The command: the file is the running one's, with a third route.
    std::fs::write(
        &path,
        one.clone() + &route("b", "/b", &[]) + &route("c", "/c", &[]),
    )
    .unwrap();
    let out = run_reload(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap()["result"],
        "ok"
    );
    assert!(routes(3).await);

    // Another file naming the same admin listener: the gateway re-reads its own file, so
    // the command says which file that is and fails (the operator's trial: `kept` and exit 0
    // while nothing of the other file applied).
    let other = process::temp_file("other.toml", &(one.clone() + &route("d", "/d", &[])));
    let out = run_reload(&other);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let file = std::fs::canonicalize(&path).unwrap();
    assert!(
        stderr.contains(&format!("runs {}, not {}", file.display(), other.display())),
        "{stderr}"
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["file"], file.display().to_string());
    assert!(
        routes(3).await,
        "the running file's three routes, not the other's four"
    );

    // An invalid file: check's message and exit code, and the gateway is not asked.
    std::fs::write(&path, one.replace("[[routes]]", "[[routez]]")).unwrap();
    let out = run_reload(&path);
    let check = process::tollgate()
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stderr, check.stderr);
    let m = metrics_text(adm).await;
    assert_eq!((reloads(&m, "ok"), reloads(&m, "error")), (3.0, 0.0));
    assert!(routes(3).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_policies_keep_their_keys_in_the_store() {
    let redis = crate::common::redis::RedisServer::start();
    let up = echo_upstream().await;
    let store = format!(
        "[store]\nkind = \"redis\"\nurls = [\"{}\"]\ntimeout = \"2s\"\n",
        redis.url()
    );
    let central = |limit| {
        file(
            up,
            &(store.clone()
                + &policy("c", "gcra", limit, "site = \"central\"")
                + &route("a", "/a", &["c"])),
        )
    };
    // The store keeps time: Redis TIME, not the manual clock; 3 of 3 per hour spent.
    let s = serve_new(&central(3)).await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 3).await, [200; 3]);
    let (_, v) = reload(&s, &(central(3) + &route("b", "/b", &[]))).await;
    assert_eq!(v["policies"]["c"], "store: kept", "{v}");
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [429]);
    let (_, v) = reload(&s, &central(6)).await;
    assert_eq!(
        v["policies"]["c"], "store: read with the new numbers",
        "{v}"
    );
    // Moving a policy between this process and the store is said, not hidden.
    let local = central(6).replace("site = \"central\"", "site = \"local\"");
    let (_, v) = reload(&s, &local).await;
    assert_eq!(
        v["policies"]["c"], "reset (its site changed: the state stays where it was)",
        "{v}"
    );
}
