//! The sites that keep state in Redis (central, lease) with a real `redis-server`, shadow
//! mode, and a store that is down, answered as `on_store_error` says within its timeout.

use std::time::{Duration, Instant};

use tollgate::layer::Limits;

use crate::common::redis::RedisServer;
use crate::common::{dead_port, json};
use crate::{app, get_with, sample, statuses};

fn redis_config(url: &str, site: &str, limit: u32) -> String {
    format!(
        r#"
[store]
kind = "redis"
urls = ["{url}"]
timeout = "500ms"

[policies.shared]
key = ["route"]
algorithm = "token_bucket"
limit = {limit}
period = "1h"
site = "{site}"

[layers.api]
policies = ["shared"]
on_store_error = "closed"
"#
    )
}

/// Two apps, each with its own `Limits` (two processes, as far as the limiter can tell),
/// spend one budget in Redis.
#[tokio::test]
async fn two_apps_on_one_redis_share_a_central_budget() {
    let redis = RedisServer::start();
    let config = redis_config(&redis.url(), "central", 4);
    let a = app(&Limits::from_toml(&config).unwrap(), "api").await;
    let b = app(&Limits::from_toml(&config).unwrap(), "api").await;
    assert_eq!(statuses(a, 2).await, [200, 200]);
    assert_eq!(statuses(b, 2).await, [200, 200]);
    // Four spent between them: each app's next request is denied.
    let denied = get_with(b, "/", &[]).await;
    assert_eq!(denied.status(), 429);
    assert!(denied.headers().contains_key("retry-after"));
    assert_eq!(statuses(a, 1).await, [429]);
    // The budget is in Redis, under the store's key prefix.
    let mut conn = redis.connect().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tg:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "no central state in Redis");
}

#[tokio::test]
async fn the_lease_site_spends_cells_leased_from_redis() {
    let redis = RedisServer::start();
    let config = redis_config(&redis.url(), "lease", 3);
    let a = app(&Limits::from_toml(&config).unwrap(), "api").await;
    assert_eq!(statuses(a, 4).await, [200, 200, 200, 429]);
    // The coordinator in Redis has leased every cell: a second app gets none.
    let b = app(&Limits::from_toml(&config).unwrap(), "api").await;
    assert_eq!(statuses(b, 1).await, [429]);
}

#[tokio::test]
async fn shadow_mode_forwards_everything_and_counts_what_it_would_deny() {
    let limits = Limits::from_toml(
        r#"
[policies.one]
key = ["ip"]
algorithm = "gcra"
limit = 1
period = "1m"

[layers.trial]
policies = ["one"]
mode = "shadow"
"#,
    )
    .unwrap();
    let addr = app(&limits, "trial").await;
    assert_eq!(statuses(addr, 3).await, [200, 200, 200]);
    let metrics = limits.metrics_text();
    let series = |outcome: &str| {
        format!("tollgate_decisions_total{{route=\"trial\",policy=\"one\",outcome=\"{outcome}\"}}")
    };
    assert_eq!(sample(&metrics, &series("shadow_deny")), 2.0, "{metrics}");
    assert_eq!(sample(&metrics, &series("allow")), 1.0, "{metrics}");
}

#[tokio::test]
async fn a_store_that_is_down_is_answered_as_on_store_error_says_within_its_timeout() {
    let dead = dead_port().await;
    let config = format!(
        r#"
[store]
kind = "redis"
urls = ["redis://{dead}"]
timeout = "100ms"

[policies.shared]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1s"
site = "central"

[layers.closed]
policies = ["shared"]
on_store_error = "closed"

[layers.open]
policies = ["shared"]
on_store_error = "open"
"#
    );
    let limits = Limits::from_toml(&config).unwrap();
    let closed = app(&limits, "closed").await;
    let open = app(&limits, "open").await;

    let started = Instant::now();
    let resp = get_with(closed, "/", &[]).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let body = json(resp).await;
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    assert_eq!(body["violated-policies"][0], "shared");

    let started = Instant::now();
    assert_eq!(statuses(open, 1).await, [200]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}
