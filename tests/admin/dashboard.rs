//! `GET /dashboard` in a real browser (headless Chromium): three clients at different rates
//! into a shadow route, and the page shows them in the order and with the counts that
//! `/limits/{policy}/top` gives, a value looked up (`#value=`) lists only its keys, the
//! shadow card shows `/shadow`'s suggestion; and with an admin token the page asks for it
//! while every data endpoint answers 401 without it, or takes it from the URL's fragment
//! (`#token=`).
//!
//! `UPDATE_SCREENSHOT=1 cargo test --test admin dashboard` also writes `docs/src/images/dashboard.png` (the
//! README's picture); without it the screenshot goes to a temporary file, so a test run
//! leaves the checkout as it was.

use std::net::SocketAddr;

use crate::common::browser::{attr, dump_dom, elements, screenshot};
use crate::common::config::{ConfigBuilder, route};
use crate::common::*;
use http::{StatusCode, header};
use serde_json::Value;

/// The three clients of the shadow route, busiest first, and their requests per round.
const CLIENTS: [(&str, usize); 3] = [("203.0.113.7", 6), ("198.51.100.23", 3), ("192.0.2.41", 1)];
/// Sampler ticks with traffic between them: that many 10-second buckets of the charts.
const ROUNDS: usize = 24;

/// `search` in shadow (10 a minute per IP) and `login` enforced (3 a minute per IP).
fn config(up: SocketAddr, extra_server: &str) -> String {
    ConfigBuilder::new(extra_server)
        .trust_loopback("")
        .upstream(up)
        .policy("search_ip", &["ip"], "gcra", 10, "1m", "")
        .policy("login_ip", &["ip"], "gcra", 3, "1m", "")
        .text(
            "[[routes]]\nname = \"search\"\nmatch = { path_prefix = \"/search\" }\n\
             upstream = \"app\"\npolicies = [\"search_ip\"]\nmode = \"shadow\"\n",
        )
        .text(&route("login", &["login_ip"], "open"))
        .build()
}

/// Rounds of traffic, a sampler tick after each: the three clients on `search` (every
/// request forwarded: the route is in shadow), one password guesser on `login`.
async fn drive(gw: &Gateway) {
    let sampler = gw.sampler.clone().expect("sampled by hand");
    sampler.tick();
    for round in 0..ROUNDS {
        // A little swell and ebb, so the charts have a shape.
        let wave = [0, 1, 2, 3, 2, 1][round % 6];
        for (ip, per_round) in CLIENTS {
            let n = per_round + wave * per_round / 3;
            assert_eq!(admitted(gw.addrs.listen, "/search/q", ip, n).await, n);
        }
        admitted(gw.addrs.listen, "/login", "100.64.9.9", 1 + wave / 2).await;
        sampler.tick();
    }
}

/// `/limits/{policy}/top` as the page asks for it.
async fn top(admin: SocketAddr, policy: &str) -> Value {
    let url = format!("http://{admin}/limits/{policy}/top?window=15m&n=10");
    let resp = send_h1(admin, get(&url)).await;
    assert_eq!(resp.status(), StatusCode::OK, "{url}");
    json(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_top_keys_in_order_with_their_counts() {
    let gw = Gateway::start_sampled_by_hand(&config(echo_upstream().await, "")).await;
    let admin = gw.addrs.admin_listen.unwrap();
    drive(&gw).await;
    let expected = top(admin, "search_ip").await;
    let expected = expected["top"].as_array().expect("a top list").clone();
    assert_eq!(expected.len(), 3, "{expected:#?}");
    for (row, (ip, _)) in expected.iter().zip(CLIENTS) {
        let key = row["key"].as_str().unwrap();
        assert!(key.contains(ip), "{ip} in this place: {expected:#?}");
    }

    let dom = dump_dom(&format!("http://{admin}/dashboard")).await;
    assert!(dom.contains("<body data-state=\"ok\">"), "rendered:\n{dom}");
    let table = dom
        .split("<table class=\"top\" data-policy=\"search_ip\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no top-keys table for search_ip:\n{dom}"));
    let rows = elements(table, "<tr data-key=");
    let shown: Vec<(String, u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            let n = |name| attr(r, name).unwrap().parse::<u64>().unwrap();
            let key = attr(r, "data-key").unwrap().to_string();
            (
                key,
                n("data-denied"),
                n("data-shadow-denied"),
                n("data-allowed"),
            )
        })
        .collect();
    let given: Vec<(String, u64, u64, u64)> = expected
        .iter()
        .map(|k| {
            let n = |name: &str| k[name].as_u64().unwrap();
            let key = k["key"].as_str().unwrap().to_string();
            (key, n("denied"), n("shadow_denied"), n("allowed"))
        })
        .collect();
    assert_eq!(
        shown, given,
        "the page's rows, in order, against /limits/search_ip/top"
    );
    // What a person reads, not only the attributes: each count as a cell of its row.
    for (key, denied, shadow, allowed) in &given {
        let row = table
            .split(&format!("<tr data-key=\"{key}\""))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap();
        for cell in [
            key.to_string(),
            denied.to_string(),
            shadow.to_string(),
            allowed.to_string(),
        ] {
            assert!(row.contains(&format!(">{cell}</td>")), "{cell} in {row}");
        }
    }
    // One chart per (route, policy), and the status the page shows.
    assert!(
        dom.contains("data-route=\"search\" data-policy=\"search_ip\""),
        "{dom}"
    );
    assert!(
        dom.contains("data-route=\"login\" data-policy=\"login_ip\""),
        "{dom}"
    );
    assert!(dom.contains(">store memory</span>"), "{dom}");

    // A value looked up from the URL (`#value=`, as if typed in the box): only its keys.
    let looked = dump_dom(&format!("http://{admin}/dashboard#value=198.51.100.23")).await;
    assert!(looked.contains("<body data-state=\"ok\">"), "{looked}");
    let table = looked
        .split("<table class=\"top\" data-policy=\"search_ip\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no top-keys table for search_ip:\n{looked}"));
    let keys: Vec<String> = elements(table, "<tr data-key=")
        .iter()
        .map(|r| attr(r, "data-key").unwrap().to_string())
        .collect();
    assert_eq!(keys, ["search_ip:ip:198.51.100.23"], "{table}");
    assert!(
        looked.contains("keys holding the value “198.51.100.23”"),
        "{looked}"
    );
    // The shadow card: its suggestion, as `/shadow` gives it.
    let shadow = json(send_h1(admin, get(&format!("http://{admin}/shadow"))).await).await;
    let first = &shadow["policies"][0]["windows"]["15m"]["by_top"][0];
    let limit = first["suggested_limit"].as_u64().unwrap();
    let upper = first["suggested_limit_upper"].as_u64().unwrap();
    let shown = match upper > limit {
        true => format!("{limit}–{upper}"),
        false => limit.to_string(),
    };
    assert!(
        dom.contains(&format!(
            "<dd class=\"suggestion\" data-k=\"1\" data-limit=\"{limit}\" data-limit-upper=\"{upper}\">limit {shown} per 1m refuses 1 key"
        )),
        "{dom}"
    );

    let png = match std::env::var_os("UPDATE_SCREENSHOT") {
        Some(_) => repo_path("docs/src/images/dashboard.png"),
        None => std::env::temp_dir().join(format!("tollgate-dashboard-{}.png", std::process::id())),
    };
    screenshot(&format!("http://{admin}/dashboard"), &png, 1280, 900).await;
}

const TOKEN: &str = "dashboard-token-Qw8rT2mZ5x";

/// With `admin_token_env`: the page is served without the token (it holds no data), with
/// a CSP that allows only itself; every endpoint it reads answers 401 without the token;
/// in the browser, the page asks for the token instead of showing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_data_needs_it_and_the_page_asks_for_it() {
    let toml = config(echo_upstream().await, "admin_token_env = \"TG_DASH_TOKEN\"");
    let gw = crate::common::process::spawn_serve_with_env(
        &crate::common::process::temp_file("dashboard-token.toml", &toml),
        &[("TG_DASH_TOKEN", TOKEN)],
    );
    let admin = gw.admin.unwrap();
    let page = send_h1(admin, get(&format!("http://{admin}/dashboard"))).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(
        page.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    let csp = page.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-"),
        "{csp}"
    );
    assert!(
        csp.contains("connect-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(text(page).await.contains("<title>tollgate</title>"));

    for path in [
        "/activity",
        "/status",
        "/limits/search_ip/top?window=15m",
        "/shadow",
    ] {
        let url = format!("http://{admin}{path}");
        let resp = send_h1(admin, get(&url)).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
        let with = http::Request::get(&url)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        assert_eq!(
            send_h1(admin, with).await.status(),
            StatusCode::OK,
            "{path}"
        );
    }

    let dom = dump_dom(&format!("http://{admin}/dashboard")).await;
    assert!(dom.contains("<body data-state=\"token\">"), "{dom}");
    assert!(
        dom.contains("<form id=\"login\" autocomplete=\"off\">"),
        "the form shows: {dom}"
    );
    assert!(
        dom.contains("<main id=\"main\" hidden=\"\">"),
        "nothing else does: {dom}"
    );

    // A script or a headless browser: the token in the URL's fragment (never sent to the
    // gateway), which the page sends as the Authorization header.
    let dom = dump_dom(&format!("http://{admin}/dashboard#token={TOKEN}")).await;
    assert!(dom.contains("<body data-state=\"ok\">"), "{dom}");
    assert!(
        dom.contains(">store memory</span>"),
        "the data shows: {dom}"
    );
    assert!(
        !dom.contains(TOKEN),
        "the token is written nowhere in the page"
    );
    let dom = dump_dom(&format!("http://{admin}/dashboard#token=not-{TOKEN}")).await;
    assert!(dom.contains("<body data-state=\"token\">"), "{dom}");
    assert!(dom.contains("That token was refused."), "{dom}");
}

/// A token with `+ / = % & #` in it, as `admin_token_env` allows (any printable ASCII),
/// and `%41` in it, which also reads as URL-encoded `A`.
const ODD_TOKEN: &str = "tg+Kq/9=x%41&z#Wm-7";

/// The fragment's token, pasted as it is or URL-encoded, opens the page: the page takes
/// everything after `token=` up to a `&value=` or the end, tries it URL-decoded and then as
/// written, and the token is written nowhere in the page afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_url_characters_opens_the_page_raw_or_encoded() {
    let toml = config(echo_upstream().await, "admin_token_env = \"TG_DASH_ODD\"");
    let gw = crate::common::process::spawn_serve_with_env(
        &crate::common::process::temp_file("dashboard-odd-token.toml", &toml),
        &[("TG_DASH_ODD", ODD_TOKEN)],
    );
    let admin = gw.admin.unwrap();
    assert_eq!(
        admitted(gw.addr, "/search/q", "198.51.100.23", 12).await,
        12
    );
    let encoded: String = form_urlencoded::byte_serialize(ODD_TOKEN.as_bytes())
        .collect::<String>()
        .replace('+', "%20");
    for fragment in [
        format!("token={ODD_TOKEN}"),
        format!("token={encoded}"),
        format!("token={ODD_TOKEN}&value=198.51.100.23"),
        format!("value=198.51.100.23&token={ODD_TOKEN}"),
    ] {
        let dom = dump_dom(&format!("http://{admin}/dashboard#{fragment}")).await;
        assert!(
            dom.contains("<body data-state=\"ok\">"),
            "#{fragment}:\n{dom}"
        );
        assert!(dom.contains(">store memory</span>"), "#{fragment}: {dom}");
        assert!(
            !dom.contains("Wm-7"),
            "#{fragment}: the token is in the page"
        );
        if fragment.contains("value=") {
            assert!(
                dom.contains("keys holding the value “198.51.100.23”"),
                "#{fragment}: {dom}"
            );
        }
    }
    let dom = dump_dom(&format!("http://{admin}/dashboard#token=tg+Kq/9=x%41")).await;
    assert!(dom.contains("That token was refused."), "{dom}");

    let png = std::env::temp_dir().join(format!("tollgate-odd-{}.png", std::process::id()));
    let url = format!("http://{admin}/dashboard#token={ODD_TOKEN}&value=198.51.100.23");
    screenshot(&url, &png, 1280, 900).await;
}
