//! What a policy's tables do when a reload adds a split policy, turns a rate policy into
//! `concurrency` or resets it, or changes the IPv6 prefix; the keys gauge, idle workers
//! letting the old config go, and the controls for both.

use super::*;

// ---------------------------------------------------------------------------------------
// A reload from a config without policies starts split policies at this node's N (the
// `tollgate_cluster_nodes` record: `expected_nodes` with the memory store), not at 1:
// with the memory store nothing would ever rescale it, and each node would get the whole
// limit (a fleet's budget N times over).
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_policy_added_by_reload_divides_by_expected_nodes() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let cluster = "[cluster]\nexpected_nodes = 4\n";
    let none = file(up, &(cluster.to_string() + &route("a", "/a", &[])));
    let s = serve(&none, &clock).await;
    let with_split = file(
        up,
        &(cluster.to_string()
            + &policy("s", "gcra", 8, "site = \"split\"\n")
            + &route("a", "/a", &["s"])),
    );
    let (status, v) = reload(&s, &with_split).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // A gateway started on this very file: 8 / 4 = 2 per node.
    let fresh = serve(&with_split, &ManualClock::new()).await;
    assert_eq!(
        statuses(fresh.addr, "/a", "192.0.2.1", 3).await,
        [200, 200, 429],
        "started with the file"
    );
    assert_eq!(
        statuses(s.addr, "/a", "192.0.2.1", 3).await,
        [200, 200, 429],
        "reloaded into the same file: the split must be limit / expected_nodes"
    );
}

// ---------------------------------------------------------------------------------------
// A rate policy turned `concurrency` (same name and key) starts with nothing in flight:
// spent rate cells are not requests in flight, and no request would ever release them.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_policy_turned_concurrency_starts_with_nothing_in_flight() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let s = serve(
        &file(
            up,
            &(policy("p", "gcra", 5, "") + &route("a", "/a", &["p"])),
        ),
        &clock,
    )
    .await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 3).await, [200; 3]);
    let conc = file(
        up,
        &(policy("p", "concurrency", 5, "") + &route("a", "/a", &["p"])),
    );
    let (status, v) = reload(&s, &conc).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // No request is in flight, and a day passes.
    clock.advance(Duration::from_secs(86_400));
    let (_, k) = admin(s.admin, Method::GET, "/limits/p?ip=192.0.2.1").await;
    assert_eq!(
        k["remaining"], 5,
        "nothing in flight, yet cells are held: {k} (reload said {v})"
    );
}

// ---------------------------------------------------------------------------------------
// `tollgate_limiter_keys` counts a split policy's L/N keys on its series: a reload that
// resets or removes the policy takes them off again (both tables of a policy count).
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_policy_reset_by_reload_takes_its_keys_off_the_gauge() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let split = file(
        up,
        &(policy("s", "gcra", 10, "site = \"split\"\n") + &route("a", "/a", &["s"])),
    );
    // One worker: its next request drops the old request path, so the old store ends.
    let s = serve_with(&split, &clock, 1).await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [200]);
    assert_eq!(keys_gauge(&metrics_text(s.admin).await, "s"), 1.0);
    let rekeyed = split.replace("key = [\"ip\"]", "key = [\"ip\", \"method\"]");
    let (_, v) = reload(&s, &rekeyed).await;
    assert_eq!(v["policies"]["s"], "reset (its key changed)", "{v}");
    // One key in the new table; the old store is gone once the worker has moved on.
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [200]);
    assert_eq!(
        keys_gauge_settles(s.admin, "s", 1.0, Duration::from_secs(3)).await,
        1.0,
        "tollgate_limiter_keys{{policy=\"s\"}} back to the one key held"
    );
}

// ---------------------------------------------------------------------------------------
// An idle worker lets the old config go: a publish empties every worker's request path,
// so a worker without traffic does not keep the old limiter, its tables and their keys
// (counted twice on the gauge) alive.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_lets_the_old_config_go() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let s = serve_with(
        &file(
            up,
            &(policy("p", "gcra", 10, "") + &route("a", "/a", &["p"])),
        ),
        &clock,
        2,
    )
    .await;
    // Two connections: one per worker, both built on this config.
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 2).await, [200; 2]);
    let up_config = file(
        up,
        &(policy("p", "gcra", 20, "") + &route("a", "/a", &["p"])),
    );
    let (_, v) = reload(&s, &up_config).await;
    assert_eq!(v["policies"]["p"], "converted (1 keys)", "{v}");
    // Traffic goes on, to one worker only.
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [200]);
    assert_eq!(
        keys_gauge_settles(s.admin, "p", 1.0, Duration::from_secs(3)).await,
        1.0,
        "tollgate_limiter_keys{{policy=\"p\"}} counts the one key once"
    );
}

// ---------------------------------------------------------------------------------------
// `[client_ip] ipv6_prefix` is reloadable, but every IPv6 client's key string changes
// with it (`2001:db8::/64` → `/48`): the policy says `reset`, and the old keys go.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_prefix_change_resets_and_says_so() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let base = file(
        up,
        &(policy("p", "gcra", 2, "") + &route("a", "/a", &["p"])),
    );
    let s = serve(&base, &clock).await;
    assert_eq!(
        statuses(s.addr, "/a", "2001:db8::1", 3).await,
        [200, 200, 429]
    );
    let wider = base.replace(
        "trusted_proxies = [\"127.0.0.1/32\"]\n",
        "trusted_proxies = [\"127.0.0.1/32\"]\nipv6_prefix = 48\n",
    );
    let (status, v) = reload(&s, &wider).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let said = v["policies"]["p"].clone();
    let after = statuses(s.addr, "/a", "2001:db8::1", 1).await;
    assert!(
        said != "kept" || after == [429],
        "the answer says {said}, yet the exhausted client got {after:?}"
    );
}

// Controls for 4 and 5: the same scenarios where the bug is absent pass, so the failures
// above are the mechanism named, not the harness.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_local_policy_reset_by_reload_counts_its_keys_right() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let local = file(
        up,
        &(policy("s", "gcra", 10, "") + &route("a", "/a", &["s"])),
    );
    let s = serve_with(&local, &clock, 1).await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [200]);
    let rekeyed = local.replace("key = [\"ip\"]", "key = [\"ip\", \"method\"]");
    let (_, v) = reload(&s, &rekeyed).await;
    assert_eq!(v["policies"]["s"], "reset (its key changed)", "{v}");
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 1).await, [200]);
    assert_eq!(
        keys_gauge_settles(s.admin, "s", 1.0, Duration::from_secs(3)).await,
        1.0,
        "tollgate_limiter_keys{{policy=\"s\"}} back to the one key held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_once_every_worker_has_served_the_old_keys_are_gone() {
    let up = echo_upstream().await;
    let clock = ManualClock::new();
    let s = serve_with(
        &file(
            up,
            &(policy("p", "gcra", 10, "") + &route("a", "/a", &["p"])),
        ),
        &clock,
        2,
    )
    .await;
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 2).await, [200; 2]);
    let up_config = file(
        up,
        &(policy("p", "gcra", 20, "") + &route("a", "/a", &["p"])),
    );
    let (_, v) = reload(&s, &up_config).await;
    assert_eq!(v["policies"]["p"], "converted (1 keys)", "{v}");
    // Both workers serve a request.
    assert_eq!(statuses(s.addr, "/a", "192.0.2.1", 2).await, [200; 2]);
    assert_eq!(
        keys_gauge_settles(s.admin, "p", 1.0, Duration::from_secs(3)).await,
        1.0,
        "tollgate_limiter_keys{{policy=\"p\"}} counts the one key once"
    );
}
