//! The operator's shadow-mode trial over real sockets, counted by hand: a login limited 5
//! per 15 minutes per `form:username`, alice 30 requests, bob 3, carol and dave 1 each,
//! within 2 s (a manual clock). `/shadow` suggests 3 (any limit from 3 to 29 refuses alice
//! alone), every view counts 4 keys seen and 10 allowed requests, a username is looked up
//! by value (`?value=`, `tollgate shadow-report --value`), and `show_values` shows it in
//! clear without changing the key a reload carries.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::process::tollgate;
use crate::common::reload::{admin, file, reload, serve};
use crate::common::*;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;
use tollgate::limit::clock::ManualClock;

/// The login route `/login`, policy `login` keyed on the form's username, `limit` per
/// `period`, in `mode`, with `extra` policy keys.
fn login(up: SocketAddr, limit: u32, period: &str, mode: &str, extra: &str) -> String {
    file(
        up,
        &format!(
            "[policies.login]\nkey = [\"form:username\"]\nalgorithm = \"gcra\"\nlimit = {limit}\n\
             period = \"{period}\"\non_missing_key = \"deny\"\n{extra}\n\
             [[routes]]\nname = \"login\"\nmatch = {{ path_prefix = \"/login\" }}\n\
             upstream = \"app\"\npolicies = [\"login\"]\nmode = \"{mode}\"\n"
        ),
    )
}

/// One login attempt of `user`: its status.
async fn attempt(addr: SocketAddr, user: &str) -> StatusCode {
    let req = Request::post(format!("http://{addr}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(format!(
            "username={user}&password=hunter2"
        ))))
        .unwrap();
    send_h1(addr, req).await.status()
}

/// The trial: round robin until each has sent its share, the clock moving 2 s over the 35
/// requests. Every answer is 200: the route is in shadow.
async fn the_trial(addr: SocketAddr, clock: &ManualClock) {
    let mut left = [("alice", 30), ("bob", 3), ("carol", 1), ("dave", 1)];
    let step = Duration::from_nanos(2_000_000_000 / 35);
    while left.iter().any(|(_, n)| *n > 0) {
        for (user, n) in left.iter_mut().filter(|(_, n)| *n > 0) {
            assert_eq!(attempt(addr, user).await, StatusCode::OK);
            *n -= 1;
            clock.advance(step);
        }
    }
}

fn suggestions(w: &Value) -> Vec<(Value, Value)> {
    let by_top = w["by_top"].as_array().unwrap_or_else(|| panic!("{w}"));
    by_top
        .iter()
        .map(|t| (t["suggested_limit"].clone(), t["refused_keys"].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_trial_suggests_three_and_counts_every_key() {
    let clock = ManualClock::new();
    let gw = serve(
        &login(echo_upstream().await, 5, "15m", "shadow", ""),
        &clock,
    )
    .await;
    the_trial(gw.addr, &clock).await;

    let (status, v) = admin(gw.admin, Method::GET, "/shadow").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let p = &v["policies"][0];
    assert_eq!((&p["policy"], &p["limit"]), (&"login".into(), &5.into()));
    assert!(
        p["suggestion_means"].as_str().unwrap().contains("burst"),
        "{p}"
    );
    for window in ["1m", "15m"] {
        let w = &p["windows"][window];
        // By hand: 3 refuses alice alone; 1 refuses alice and bob; no eleventh key.
        assert_eq!(
            suggestions(w),
            [
                (3.into(), 1.into()),
                (1.into(), 2.into()),
                (Value::Null, Value::Null)
            ],
            "{window}: {w}"
        );
        assert_eq!(
            (&w["would_be_denials"], &w["requests"], &w["allowed"]),
            (&25.into(), &35.into(), &10.into()),
            "{window}: {w}"
        );
        assert_eq!(
            (&w["keys_seen"], &w["keys_denied"], &w["distinct_keys"]),
            (&4.into(), &1.into(), &1.into()),
            "{window}: {w}"
        );
        let seen = w["seen_seconds"].as_f64().unwrap();
        assert!((seen - 2.0).abs() < 0.01, "{window}: {w}");
        assert_eq!(w["peak_window_seconds"], w["seen_seconds"]);
        assert_eq!(w["top"][0]["peak"], 30, "alice's peak: {w}");
    }

    let (_, top) = admin(gw.admin, Method::GET, "/limits/login/top?window=15m").await;
    assert_eq!(
        (&top["allowed"], &top["keys_seen"], &top["keys_denied"]),
        (&10.into(), &4.into(), &1.into()),
        "{top}"
    );
    assert_eq!(top["values_shown"], false);
    let alice = top["top"][0]["key"].as_str().unwrap().to_string();
    assert!(
        alice.starts_with("login:f:") && !alice.contains("alice"),
        "hashed: {alice}"
    );
    assert_eq!(top["top"][0]["shadow_denied"], 25);

    // Looked up by value: alice's key (by its keyed hash), bob none in /top (never denied)
    // but listed by /shadow with his 3 requests.
    let (_, v) = admin(
        gw.admin,
        Method::GET,
        "/limits/login/top?window=15m&value=alice",
    )
    .await;
    assert_eq!(v["top"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["top"][0]["key"], alice.as_str());
    let (_, v) = admin(gw.admin, Method::GET, "/limits/login/top?value=bob").await;
    assert_eq!(v["top"], Value::Array(vec![]), "{v}");
    let (_, v) = admin(gw.admin, Method::GET, "/shadow?value=bob").await;
    let bob = &v["policies"][0]["windows"]["15m"]["top"];
    assert_eq!(bob.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        (&bob[0]["requests"], &bob[0]["would_be_denials"]),
        (&3.into(), &0.into())
    );
    let (status, v) = admin(gw.admin, Method::GET, "/shadow?value=").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");

    // The report, as a process: the table; alice's key looked up (her row alone); a
    // value no key holds (a line saying so, not the table).
    let table = report(gw.admin, &[]).await;
    let row = "| login | 15m | 2 s | 25 | 1 / 4 | 100.0 % / 100.0 % / 100.0 % | 3 / 1 / - per 15m (now 5) |";
    assert!(table.contains(row), "no `{row}` in:\n{table}");
    let found = report(gw.admin, &["--value", "alice"]).await;
    assert_eq!(
        found,
        format!(
            "login — keys holding `alice` over 15m (would-be denials, share, requests, peak):\n\
             \x20       25  100.0 %        30      30  {alice}\n"
        )
    );
    let none = report(gw.admin, &["--value", "zed"]).await;
    assert_eq!(none, "no key of login holds `zed` in the 15m window\n");
}

/// `tollgate shadow-report --admin ADMIN ARGS`'s stdout (exit 0).
async fn report(adm: SocketAddr, args: &[&str]) -> String {
    let mut all = vec![
        "shadow-report".to_string(),
        "--admin".into(),
        adm.to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let out = tokio::task::spawn_blocking(move || tollgate().args(&all).output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}");
    stdout
}

/// A gateway whose route `/search` has a one-minute sliding window of 100 on `ip`, in
/// shadow mode: the operator's one-minute search limit.
pub(super) async fn search_gateway(clock: &ManualClock) -> crate::common::reload::Served {
    let toml = file(
        echo_upstream().await,
        "[policies.search]\nkey = [\"ip\"]\nalgorithm = \"sliding_window\"\nlimit = 100\nperiod = \"1m\"\n\
         [[routes]]\nname = \"search\"\nmatch = { path_prefix = \"/search\" }\nupstream = \"app\"\n\
         policies = [\"search\"]\nmode = \"shadow\"\n",
    );
    serve(&toml, clock).await
}

/// 60 seconds of the four search clients on `clock`: 5 a second, 1 a second, 1 every 10 s
/// and 1 every 30 s (300, 60, 6 and 2 requests), each forwarded (shadow mode).
pub(super) async fn a_minute_of_search(gw: &crate::common::reload::Served, clock: &ManualClock) {
    for second in 0..60 {
        for (ip, per_second, every) in [
            ("10.0.0.1", 5, 1),
            ("10.0.0.2", 1, 1),
            ("10.0.0.3", 1, 10),
            ("10.0.0.4", 1, 30),
        ] {
            if second % every == 0 {
                assert_eq!(
                    admitted(gw.addr, "/search", ip, per_second).await,
                    per_second
                );
            }
        }
        clock.advance(Duration::from_secs(1));
    }
}

/// A one-minute search limit: over one minute, 300, 60, 6 and 2 requests from four
/// clients; only the busiest is refused under 60.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_minute_limit_over_a_minute_suggests_sixty() {
    let clock = ManualClock::new();
    let gw = search_gateway(&clock).await;
    a_minute_of_search(&gw, &clock).await;
    let (_, v) = admin(gw.admin, Method::GET, "/shadow").await;
    let w = &v["policies"][0]["windows"]["1m"];
    assert_eq!(w["requests"], 368, "{w}");
    assert_eq!(w["seen_seconds"], 60.0, "{w}");
    assert_eq!(
        suggestions(w)[..2],
        [(60.into(), 1.into()), (2.into(), 3.into())],
        "{w}"
    );
    assert_eq!(v["policies"][0]["algorithm"], "sliding_window");
    // Half a minute on, 90 s seen: counted in whole minutes, still 60 (an average would
    // say 40 a minute).
    clock.advance(Duration::from_secs(30));
    let (_, v) = admin(gw.admin, Method::GET, "/shadow").await;
    let w = &v["policies"][0]["windows"]["15m"];
    assert_eq!(w["seen_seconds"], 90.0, "{w}");
    assert_eq!(suggestions(w)[0], (60.into(), 1.into()), "{w}");
    assert_eq!(w["peak_window_seconds"], 60.0, "{w}");
    // /routes: a sliding window has no burst.
    let (_, routes) = admin(gw.admin, Method::GET, "/routes").await;
    let policy = &routes["routes"][0]["policies"][0];
    assert_eq!(policy["name"], "search", "{routes}");
    assert_eq!(policy["burst"], Value::Null, "{routes}");
}

/// `show_values = true` turned on by a reload: the state is kept (alice stays refused) and
/// the views show her username in clear from then on; the stored key is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_values_shows_usernames_and_a_reload_toggling_it_keeps_state() {
    let clock = ManualClock::new();
    let up = echo_upstream().await;
    let hidden = login(up, 2, "1h", "enforce", "");
    let shown = login(up, 2, "1h", "enforce", "show_values = true");
    let gw = serve(&hidden, &clock).await;
    let mut before = Vec::new();
    for _ in 0..3 {
        before.push(attempt(gw.addr, "alice").await.as_u16());
    }
    assert_eq!(before, [200, 200, 429]);
    let (_, v) = admin(gw.admin, Method::GET, "/limits/login/top").await;
    let hashed = v["top"][0]["key"].as_str().unwrap().to_string();
    assert!(!hashed.contains("alice"), "{v}");

    let (status, v) = reload(&gw, &shown).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["policies"]["login"], "kept", "{v}");
    assert_eq!(
        attempt(gw.addr, "alice").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(attempt(gw.addr, "bob").await, StatusCode::OK);
    let (_, v) = admin(gw.admin, Method::GET, "/limits/login/top?value=alice").await;
    assert_eq!(v["values_shown"], true, "{v}");
    let keys: Vec<(&str, &Value)> = v["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), &k["denied"]))
        .collect();
    assert_eq!(
        keys,
        [("login:f:alice", &2.into())],
        "one key, counted across the reload, shown in clear: {v}"
    );
    // Beside it, the key as stored: what /limits/{policy} and a reset take.
    assert_eq!(v["top"][0]["stored_key"], hashed.as_str(), "{v}");
    let (_, routes) = admin(gw.admin, Method::GET, "/routes").await;
    assert_eq!(
        routes["routes"][0]["policies"][0]["show_values"],
        serde_json::json!(["form:username"]),
        "{routes}"
    );

    let (status, v) = reload(&gw, &hidden).await;
    assert_eq!(
        (status, &v["policies"]["login"]),
        (StatusCode::OK, &"kept".into()),
        "{v}"
    );
    assert_eq!(
        attempt(gw.addr, "alice").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// The operator's toggle, counted by hand: with `[account]` present, alice 30, bob 3 and
/// carol 1 (5 per 15 minutes, shadow), a reload turning `show_values` on, then alice 2 and
/// bob 2. Three users (keys seen 3), alice alone over 5 (keys denied 1), bob's 5 the
/// top-1 suggestion, and `?value=bob` one row of 5 requests: the summaries count by the
/// stored key, the clear value only labels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_show_values_on_keeps_one_key_per_user() {
    let clock = ManualClock::new();
    let up = echo_upstream().await;
    let account = "[account]\nheader = \"x-api-key\"\n";
    let hidden = login(up, 5, "15m", "shadow", account);
    let shown = login(
        up,
        5,
        "15m",
        "shadow",
        &format!("show_values = true\n{account}"),
    );
    let gw = serve(&hidden, &clock).await;
    let step = Duration::from_millis(50);
    let mut left = [("alice", 30), ("bob", 3), ("carol", 1)];
    while left.iter().any(|(_, n)| *n > 0) {
        for (user, n) in left.iter_mut().filter(|(_, n)| *n > 0) {
            assert_eq!(attempt(gw.addr, user).await, StatusCode::OK);
            *n -= 1;
            clock.advance(step);
        }
    }
    let (status, v) = reload(&gw, &shown).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["policies"]["login"], "kept", "{v}");
    for user in ["alice", "bob", "alice", "bob"] {
        assert_eq!(attempt(gw.addr, user).await, StatusCode::OK);
        clock.advance(step);
    }

    let (_, v) = admin(gw.admin, Method::GET, "/shadow").await;
    let p = &v["policies"][0];
    assert_eq!(p["values_shown"], true, "{p}");
    for window in ["1m", "15m"] {
        let w = &p["windows"][window];
        assert_eq!(
            (&w["keys_seen"], &w["keys_denied"], &w["requests"]),
            (&3.into(), &1.into(), &38.into()),
            "{window}: {w}"
        );
        // By hand: alice 32, bob 5, carol 1: 5 refuses alice alone, 1 alice and bob.
        assert_eq!(
            suggestions(w),
            [
                (5.into(), 1.into()),
                (Value::Null, Value::Null),
                (Value::Null, Value::Null)
            ],
            "{window}: {w}"
        );
        let top = &w["top"];
        assert_eq!(top.as_array().unwrap().len(), 1, "{window}: {w}");
        assert_eq!(
            (&top[0]["key"], &top[0]["would_be_denials"], &top[0]["peak"]),
            (&"login:f:alice".into(), &27.into(), &32.into()),
            "{window}: {w}"
        );
    }
    let (_, v) = admin(gw.admin, Method::GET, "/shadow?value=bob").await;
    let bob = v["policies"][0]["windows"]["15m"]["top"]
        .as_array()
        .unwrap();
    let rows: Vec<(&Value, &Value)> = bob.iter().map(|k| (&k["key"], &k["requests"])).collect();
    assert_eq!(rows, [(&"login:f:bob".into(), &5.into())], "{v}");

    let (_, top) = admin(gw.admin, Method::GET, "/limits/login/top?window=15m").await;
    assert_eq!(
        (&top["keys_seen"], &top["keys_denied"], &top["allowed"]),
        (&3.into(), &1.into(), &11.into()),
        "{top}"
    );
    let keys: Vec<(&Value, &Value)> = (top["top"].as_array().unwrap().iter())
        .map(|k| (&k["key"], &k["shadow_denied"]))
        .collect();
    assert_eq!(keys, [(&"login:f:alice".into(), &27.into())], "{top}");
}
