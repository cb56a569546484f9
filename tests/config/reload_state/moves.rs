//! Rotating the account hash key (and adding `[account]` without one, which re-keys nothing), moves between `local` and `split`, a removed then
//! re-added policy's slot, and concurrent reloads.

use super::*;

// ---------------------------------------------------------------------------------------
// `[account] hash_key_env` is reloadable, but rotating the hash key changes every account
// (and header:NAME) key string: the policy says `reset` rather than `kept`.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_account_hash_key_resets_and_says_so() {
    let up = echo_upstream().await;
    let with = |var: &str| {
        file(
            up,
            &(format!("[account]\nheader = \"x-api-key\"\nhash_key_env = \"{var}\"\n")
                + &policy("acct", "gcra", 2, "").replace("[\"ip\"]", "[\"account\"]")
                + &route("a", "/a", &["acct"])),
        )
    };
    let path = process::temp_file("hash.toml", &with("TG_HASH_A"));
    let gw = process::spawn_serve_with_env(
        &path,
        &[
            ("TG_HASH_A", "first hash key of the fleet"),
            ("TG_HASH_B", "second hash key of the fleet"),
        ],
    );
    let call = || async {
        get_as(gw.addr, "/a", "192.0.2.1", Some("alice"))
            .await
            .status()
            .as_u16()
    };
    let mut before = Vec::new();
    for _ in 0..3 {
        before.push(call().await);
    }
    assert_eq!(before, [200, 200, 429]);
    std::fs::write(&path, with("TG_HASH_B")).unwrap();
    let (status, v) = admin(gw.admin.unwrap(), Method::POST, "/reload").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let said = v["policies"]["acct"].clone();
    let after = call().await;
    assert!(
        said != "kept" || after == 429,
        "the answer says {said}, yet the exhausted account got {after}"
    );
}

// ---------------------------------------------------------------------------------------
// The operator's repro: a login locked out per `form:username`, then a reload that only
// adds `[account] header = "x-api-key"` (no `hash_key_env`). The hashed parts' key is the
// same with or without the section, so the policy is `kept` and the lockout holds.
// ---------------------------------------------------------------------------------------

/// POST a login form for `username`: the status.
async fn login(addr: std::net::SocketAddr, username: &str) -> u16 {
    let req = http::Request::post(format!("http://{addr}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-forwarded-for", "192.0.2.1")
        .body(http_body_util::Full::new(bytes::Bytes::from(format!(
            "username={username}&password=x"
        ))))
        .unwrap();
    send_h1(addr, req).await.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_an_account_section_keeps_a_login_lockout() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let login_policy = policy("login", "sliding_window", 5, "")
        .replace("[\"ip\"]", "[\"form:username\"]")
        + &route("login", "/login", &["login"]);
    let s = serve(&file(up, &login_policy), &clock).await;
    let mut before = Vec::new();
    for _ in 0..6 {
        before.push(login(s.addr, "alice").await);
    }
    assert_eq!(before, [200, 200, 200, 200, 200, 429]);
    let with_account = file(
        up,
        &("[account]\nheader = \"x-api-key\"\n".to_owned() + &login_policy),
    );
    let (status, v) = reload(&s, &with_account).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["policies"]["login"], "kept", "{v}");
    assert_eq!(
        login(s.addr, "alice").await,
        429,
        "alice's lockout was wiped"
    );
    assert_eq!(login(s.addr, "bob").await, 200);
    // A hash key of the operator's own is another meaning: that reload resets, and says so.
    // (`PATH`: a variable this in-process gateway surely has, set by nobody in the test.)
    let own_key = with_account.replace(
        "header = \"x-api-key\"\n",
        "header = \"x-api-key\"\nhash_key_env = \"PATH\"\n",
    );
    let (status, v) = reload(&s, &own_key).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let said = v["policies"]["login"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        said.starts_with("reset (") && said.contains("hash key"),
        "{v}"
    );
    assert_eq!(login(s.addr, "alice").await, 200, "the answer said {said}");
}

// ---------------------------------------------------------------------------------------
// A move between `local` (the own table) and `split` (the L/N table) converts the table
// its requests decided on into the one they will decide on: the spent cells carry over
// (`converted`), never a fresh budget. Same for `gossip`/`owner` ↔ `split`.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_local_to_split_carries_the_spent_cells() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let local = file(
        up,
        &(policy("p", "gcra", 2, "") + &route("a", "/a", &["p"])),
    );
    let s = serve(&local, &clock).await;
    assert_eq!(
        statuses(s.addr, "/a", "192.0.2.1", 3).await,
        [200, 200, 429]
    );
    // One node (expected_nodes = 1): the split is the whole limit, the same numbers.
    let split = file(
        up,
        &(policy("p", "gcra", 2, "site = \"split\"\n") + &route("a", "/a", &["p"])),
    );
    let (status, v) = reload(&s, &split).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["policies"]["p"], "converted (1 keys)", "{v}");
    assert_eq!(
        statuses(s.addr, "/a", "192.0.2.1", 1).await,
        [429],
        "the spent cells moved to the table split requests decide on"
    );
    // And back: still spent.
    let (_, v) = reload(&s, &local).await;
    assert_eq!(v["policies"]["p"], "converted (1 keys)", "{v}");
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [429]);
}

// ---------------------------------------------------------------------------------------
// Held up (these pass): slot reuse while an old store still holds cells, concurrent
// reloads, and `tollgate reload` on a wildcard admin address with its exit codes.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_then_readded_policy_never_shares_a_slot_with_the_old_store() {
    let (release, released) = tokio::sync::watch::channel(false);
    let up = upstream(move |req| {
        let mut released = released.clone();
        let hold = req.uri().path().starts_with("/a");
        async move {
            if hold {
                let _ = released.wait_for(|r| *r).await;
            }
            hyper::Response::new(body("done"))
        }
    })
    .await;
    let clock = ManualClock::new();
    let with_c = file(
        up,
        &(policy("c", "concurrency", 2, "")
            + &policy("g", "gcra", 3, "")
            + &route("a", "/a", &["c"])
            + &route("g", "/g", &["g"])),
    );
    let without_c = file(
        up,
        &(policy("g", "gcra", 3, "") + &route("a", "/a", &[]) + &route("g", "/g", &["g"])),
    );
    let s = serve_with(&with_c, &clock, 1).await;
    let addr = s.addr;
    let held = tokio::spawn(async move { get_as(addr, "/a", "192.0.2.9", None).await.status() });
    eventually("one request in flight", Duration::from_secs(5), || async {
        let (_, k) = admin(s.admin, Method::GET, "/limits/c?ip=192.0.2.9").await;
        k["remaining"] == 1
    })
    .await;
    // c removed (the held request keeps the old store and its slots), then back as new.
    assert_eq!(reload(&s, &without_c).await.0, StatusCode::OK);
    let (_, v) = reload(&s, &with_c).await;
    assert_eq!(v["policies"]["c"], "new", "{v}");
    assert_eq!(v["policies"]["g"], "kept", "{v}");
    let new_held =
        tokio::spawn(async move { get_as(addr, "/a", "192.0.2.9", None).await.status() });
    eventually(
        "the new config's request in flight",
        Duration::from_secs(5),
        || async {
            let (_, k) = admin(s.admin, Method::GET, "/limits/c?ip=192.0.2.9").await;
            k["remaining"] == 1
        },
    )
    .await;
    assert_eq!(statuses(addr, "/g", "192.0.2.9", 1).await, [200]);
    release.send(true).unwrap();
    assert_eq!(held.await.unwrap(), 200);
    assert_eq!(new_held.await.unwrap(), 200);
    // The old store is gone (one worker, it has served since): nothing of the new
    // config's state was emptied with it, and every cell came back once.
    assert_eq!(statuses(addr, "/g", "192.0.2.9", 3).await, [200, 200, 429]);
    let (_, k) = admin(s.admin, Method::GET, "/limits/c?ip=192.0.2.9").await;
    assert_eq!(k["remaining"], 2, "{k}");
    let m = metrics_text(s.admin).await;
    assert_eq!(keys_gauge(&m, "c"), 0.0, "{m}");
    assert_eq!(keys_gauge(&m, "g"), 1.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reloads_all_apply_and_keep_counters() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let base = file(
        up,
        &(policy("p", "gcra", 100, "") + &route("a", "/a", &["p"])),
    );
    let s = serve(&base, &clock).await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 5).await, [200; 5]);
    std::fs::write(&s.path, base.clone() + &route("b", "/b", &[])).unwrap();
    let asks: Vec<_> = (0..8)
        .map(|_| {
            let admin_addr = s.admin;
            tokio::spawn(async move { admin(admin_addr, Method::POST, "/reload").await })
        })
        .collect();
    for a in asks {
        let (status, v) = a.await.unwrap();
        assert_eq!(
            (status, &v["policies"]["p"]),
            (StatusCode::OK, &Value::from("kept"))
        );
    }
    let (_, k) = admin(s.admin, Method::GET, "/limits/p?ip=192.0.2.1").await;
    assert_eq!(k["remaining"], 95, "{k}");
    let m = metrics_text(s.admin).await;
    assert_eq!(keys_gauge(&m, "p"), 1.0, "{m}");
}
