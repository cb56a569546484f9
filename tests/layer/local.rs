//! The local site: what a denied and an admitted request carry, refill on a manual clock,
//! and the refusals made before any policy is asked (400, 401).

use std::sync::Arc;
use std::time::Duration;

use tollgate::layer::Limits;
use tollgate::limit::clock::ManualClock;

use crate::common::{json, text};
use crate::{app, get_with, statuses};

const TWO_PER_10S: &str = r#"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 2
period = "10s"

[layers.api]
policies = ["per_ip"]
"#;

#[tokio::test]
async fn the_third_request_gets_429_with_retry_after_and_ratelimit_headers() {
    let clock = ManualClock::new();
    let limits = Limits::from_toml(TWO_PER_10S)
        .unwrap()
        .with_clock(Arc::new(clock.clone()));
    let addr = app(&limits, "api").await;

    let first = get_with(addr, "/", &[]).await;
    assert_eq!(first.status(), 200);
    // Admitted responses carry the gateway's headers too ([response] headers = "all").
    assert_eq!(first.headers()["ratelimit-policy"], "\"per_ip\";q=2;w=10");
    assert_eq!(first.headers()["ratelimit"], "\"per_ip\";r=1;t=5");
    assert_eq!(text(first).await, "ok");
    assert_eq!(statuses(addr, 1).await, [200]);

    let denied = get_with(addr, "/", &[]).await;
    assert_eq!(denied.status(), 429);
    let h = denied.headers();
    assert_eq!(h["retry-after"], "5");
    assert_eq!(h["ratelimit"], "\"per_ip\";r=0;t=5");
    assert_eq!(h["ratelimit-policy"], "\"per_ip\";q=2;w=10");
    assert_eq!(h["content-type"], "application/problem+json");
    let body = json(denied).await;
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["violated-policies"][0], "per_ip");
    assert_eq!(body["retry_after"], 5);

    // No sleep: the clock says 5 s went by, which is one request's worth.
    clock.advance(Duration::from_secs(5));
    assert_eq!(statuses(addr, 2).await, [200, 429]);
}

#[tokio::test]
async fn ambiguous_keys_get_400_and_missing_accounts_401() {
    let limits = Limits::from_toml(
        r#"
[account]
header = "x-account"

[policies.per_key]
key = ["header:x-api-key"]
algorithm = "gcra"
limit = 100
period = "1s"

[layers.keyed]
policies = ["per_key"]

[layers.members]
policies = ["per_key"]
require_account = true
"#,
    )
    .unwrap();
    let keyed = app(&limits, "keyed").await;
    let twice = [("x-api-key", "a"), ("x-api-key", "b")];
    let resp = get_with(keyed, "/", &twice).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        json(resp).await["type"],
        "https://tollgate.dev/problems/bad_request"
    );
    assert_eq!(
        get_with(keyed, "/", &[("x-api-key", "a")]).await.status(),
        200
    );

    let members = app(&limits, "members").await;
    let resp = get_with(members, "/", &[("x-api-key", "a")]).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let with_account = [("x-api-key", "a"), ("x-account", "alice")];
    assert_eq!(get_with(members, "/", &with_account).await.status(), 200);
}

#[tokio::test]
async fn path_keys_read_the_canonical_path() {
    let limits = Limits::from_toml(
        r#"
[policies.per_path]
key = ["path"]
algorithm = "gcra"
limit = 1
period = "1m"

[layers.api]
policies = ["per_path"]
"#,
    )
    .unwrap();
    let addr = app(&limits, "api").await;
    assert_eq!(get_with(addr, "/a/b", &[]).await.status(), 200);
    // The same path spelt otherwise is the same key: no fresh budget for `/a/./b`.
    assert_eq!(get_with(addr, "/a/./b", &[]).await.status(), 429);
    assert_eq!(get_with(addr, "/a/c", &[]).await.status(), 200);
}
