//! Attacks on issue 16's tiers, overrides and `cost_header` against a client that states
//! things twice. Each test asserts the SAFE behaviour, so a failure demonstrates a break.

use std::net::SocketAddr;

use crate::common::config::{limited, policy};
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;

async fn send(addr: SocketAddr, headers: &[(&str, &str)]) -> StatusCode {
    let mut req = Request::get(format!("http://{addr}/x")).header("x-forwarded-for", "203.0.113.9");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .status()
}

/// Was a break (medium, config-dependent; fixed): an override that *lowers* an account's numbers (an
/// abusive partner capped at 1 an hour) on a policy keyed by something other than the
/// account (`key = ["ip"]`, accepted by `check`). `TierTable::pick` treats an account
/// stated twice as "no account" and falls back to the policy's own numbers, and because
/// no key part needs the account, nothing answers 400: the capped client sends its
/// `x-api-key` twice and gets the base 100 an hour — while a backend reading the first
/// value still serves it as itself. Safe: the duplicate is a 400, or the cap still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_account_cannot_escape_a_lowering_override() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "p",
            &["ip"],
            "gcra",
            100,
            "1h",
            "overrides = { abuser = { limit = 1 } }",
        ))
        .app_route("api", "policies = [\"p\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    assert_eq!(send(addr, &[("x-api-key", "abuser")]).await, StatusCode::OK);
    assert_eq!(
        send(addr, &[("x-api-key", "abuser")]).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the override caps the account at 1"
    );
    let mut escaped = 0;
    for _ in 0..5 {
        let s = send(addr, &[("x-api-key", "abuser"), ("x-api-key", "abuser")]).await;
        escaped += usize::from(s == StatusCode::OK);
    }
    assert_eq!(
        escaped, 0,
        "the capped account, stating its key twice, was admitted {escaped} more times"
    );
}

/// Was a break (low; fixed): shadow mode must not change what clients see (issue 16: every item
/// "keeps ... shadow mode"; `Limiter::asks` drops a shadow policy's ambiguous key for this
/// reason). But `request_cost(..)?` runs before the mode is looked at, so a `cost_header`
/// value out of range on a policy in `mode = "shadow"` is a 400 to the client. Rolling a
/// priced policy out in shadow starts refusing requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_policy_bad_price_changes_nothing() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "p",
            &["ip"],
            "gcra",
            100,
            "1h",
            "mode = \"shadow\"\ncost_header = \"x-cost\"\nmax_cost = 10",
        ))
        .app_route("api", "policies = [\"p\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    assert_eq!(send(addr, &[("x-cost", "3")]).await, StatusCode::OK);
    for bad in ["0", "11", "-1", "1.5"] {
        assert_eq!(
            send(addr, &[("x-cost", bad)]).await,
            StatusCode::OK,
            "x-cost: {bad} on a shadow-only policy"
        );
    }
}

/// HELD: the 429 of a tier shows the tier's numbers (not the base policy's), and a tier
/// header stated twice, re-cased, padded or unknown gets the base numbers, never a better
/// tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_tier_denial_headers_and_header_tricks() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "p",
            &["account"],
            "gcra",
            1,
            "1h",
            "tier_header = \"x-plan\"\ntiers = { pro = { limit = 3 } }",
        ))
        .app_route("api", "policies = [\"p\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let addr = gw.addrs.listen;
    let get = |acct: &'static str, plans: &'static [&'static str]| async move {
        let mut req = Request::get(format!("http://{addr}/x")).header("x-api-key", acct);
        for p in plans {
            req = req.header("x-plan", *p);
        }
        send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await
    };
    for _ in 0..3 {
        assert_eq!(get("a", &["pro"]).await.status(), StatusCode::OK);
    }
    let denied = get("a", &["pro"]).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let pol = denied.headers()["ratelimit-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(pol.starts_with("\"p\";q=3;w=3600"), "{pol}");
    // Tricks: each gets the base 1 (one pass, then 429), never pro's 3.
    for (acct, plans) in [
        ("b", &["pro", "pro"][..]),
        ("c", &["PRO"][..]),
        ("d", &["pro, pro"][..]),
        ("e", &["pr%6F"][..]),
    ] {
        assert_eq!(get(acct, plans).await.status(), StatusCode::OK, "{plans:?}");
        assert_eq!(
            get(acct, plans).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{plans:?} must not buy the pro tier"
        );
    }
}

/// Was a break (low, operator-facing; fixed): the admin API's `/limits/{policy}` ignores overrides and
/// tiers. For an account whose override caps it at 1 (and which is denied right now),
/// `GET /limits/p?account=abuser` reads the base policy's key (full) — and a `DELETE`
/// there resets a key the account never uses. Safe: the view (and reset) follows the
/// variant the account's requests are asked under.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_view_reads_the_accounts_override() {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy(
            "p",
            &["account"],
            "gcra",
            100,
            "1h",
            "overrides = { abuser = { limit = 1 } }",
        ))
        .app_route("api", "policies = [\"p\"]")
        .build();
    let gw = Gateway::start(&text).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    assert_eq!(send(addr, &[("x-api-key", "abuser")]).await, StatusCode::OK);
    assert_eq!(
        send(addr, &[("x-api-key", "abuser")]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let url = format!("http://{admin}/limits/p?account=abuser");
    let v = json(send_h1(admin, get(&url)).await).await;
    assert_eq!(
        v["remaining"].as_u64(),
        Some(0),
        "the account is denied, but the admin API shows {v}"
    );
}
