//! The RateLimit fields and problem types as the latest draft
//! (draft-ietf-httpapi-ratelimit-headers-12) defines them, read from real responses with an
//! independent RFC 9651 parser (the `sfv` crate), not tollgate's own serializer: `q`, `w`,
//! `qu` for concurrency, `pk` for account partitions, `r` and `t`; the 429's
//! `quota-exceeded` problem with `violated-policies` and a `Retry-After` no earlier than
//! `t`; the fail-closed 503's `temporary-reduced-capacity`.

use crate::common::config::{ConfigBuilder, policy, route};
use crate::common::*;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Empty;
use sfv::{BareItem, List, ListEntry, Parser};

/// One list member: its string name and its parameters by key.
struct Member {
    name: String,
    params: Vec<(String, BareItem)>,
}

impl Member {
    fn int(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_integer().map(i64::from)
    }
    fn get(&self, key: &str) -> Option<&BareItem> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

fn field(headers: &HeaderMap, name: &str) -> Vec<Member> {
    let value = headers.get(name).unwrap_or_else(|| panic!("no {name}"));
    let list: List = Parser::new(value.as_bytes())
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not an sf-list: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => Member {
                name: item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("{name}: a policy name is an sf-string"))
                    .as_str()
                    .to_string(),
                params: item
                    .params
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_string(), v))
                    .collect(),
            },
            ListEntry::InnerList(_) => panic!("{name}: an inner list"),
        })
        .collect()
}

fn by_name<'a>(members: &'a [Member], name: &str) -> &'a Member {
    members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

async fn get(addr: std::net::SocketAddr, account: &str) -> http::Response<hyper::body::Incoming> {
    get_as(addr, "/api", "192.0.2.1", Some(account)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_and_problems_parse_as_the_draft_says() {
    let up = echo_upstream().await;
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .account()
        .upstream(up)
        .text(&policy("per_ip", &["ip"], "gcra", 3, "1h", ""))
        .text(&policy("per_acct", &["account"], "gcra", 5, "1h", ""))
        .text("[policies.inflight]\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 4\n")
        .route("api", &["per_ip", "per_acct", "inflight"], "closed")
        .build();
    let gw = Gateway::start(&cfg).await;
    let resp = get(gw.addrs.listen, "alice").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let policy_field = field(resp.headers(), "ratelimit-policy");
    let state = field(resp.headers(), "ratelimit");
    let (ip, acct, inflight) = (
        by_name(&policy_field, "per_ip"),
        by_name(&policy_field, "per_acct"),
        by_name(&policy_field, "inflight"),
    );
    assert_eq!((ip.int("q"), ip.int("w")), (Some(3), Some(3600)));
    assert!(ip.get("qu").is_none(), "requests is the default unit");
    assert_eq!(inflight.int("q"), Some(4));
    assert_eq!(
        inflight
            .get("qu")
            .and_then(BareItem::as_string)
            .map(|s| s.as_str()),
        Some("concurrent-requests")
    );
    assert!(
        inflight.get("w").is_none(),
        "no window for requests in flight"
    );
    // The account's partition: 16 bytes, the same in both fields, none for ip keys.
    let pk = acct
        .get("pk")
        .and_then(BareItem::as_byte_sequence)
        .expect("pk");
    assert_eq!(pk.len(), 16);
    assert_eq!(
        by_name(&state, "per_acct")
            .get("pk")
            .and_then(BareItem::as_byte_sequence),
        Some(pk)
    );
    assert!(ip.get("pk").is_none());
    assert_eq!(by_name(&state, "per_ip").int("r"), Some(2));
    // `t` is "until additional quota": 3 an hour is a cell every 1 200 s.
    assert_eq!(by_name(&state, "per_ip").int("t"), Some(1200));
    // Concurrency quota comes back when a request ends, not with time.
    assert_eq!(by_name(&state, "inflight").int("t"), Some(0));
    // Another account is another partition.
    let bob = get(gw.addrs.listen, "bob").await;
    // Two cells short of full (2 400 s) is still one cell (1 200 s) from the next.
    let bob_state = field(bob.headers(), "ratelimit");
    assert_eq!(by_name(&bob_state, "per_ip").int("r"), Some(1));
    assert_eq!(by_name(&bob_state, "per_ip").int("t"), Some(1200));
    let bob_pk = field(bob.headers(), "ratelimit-policy");
    assert_ne!(
        by_name(&bob_pk, "per_acct")
            .get("pk")
            .and_then(BareItem::as_byte_sequence),
        Some(pk)
    );

    // per_ip (3) is spent: the third request above was bob's.
    let denied = get(gw.addrs.listen, "alice").await;
    assert_eq!(denied.status(), StatusCode::OK);
    let denied = get(gw.addrs.listen, "alice").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: i64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let t = by_name(&field(denied.headers(), "ratelimit"), "per_ip")
        .int("t")
        .unwrap();
    assert!(
        retry_after >= t,
        "Retry-After {retry_after} earlier than t={t}"
    );
    assert_eq!(
        by_name(&field(denied.headers(), "ratelimit"), "per_ip").int("r"),
        Some(0)
    );
    let body = json(denied).await;
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["violated-policies"], serde_json::json!(["per_ip"]));
}

/// `t` of the store's sites, whose replies carry only the time until full: derived from
/// the rate for gcra (exact) and the lease's view (one emission interval at most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_sites_say_when_the_next_cell_comes() {
    let redis = crate::common::redis::RedisServer::start();
    let up = echo_upstream().await;
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .upstream(up)
        .redis(&redis.url(), "500ms")
        .text(&policy("c", &["ip"], "gcra", 3, "1h", "site = \"central\""))
        .text(&policy("l", &["ip"], "gcra", 4, "1h", "site = \"lease\""))
        .text(&route("api", &["c", "l"], "closed"))
        .build();
    let gw = Gateway::start(&cfg).await;
    for (sent, c_r) in [(1, 2), (2, 1)] {
        let resp = get_as(gw.addrs.listen, "/api", "192.0.2.9", None).await;
        assert_eq!(resp.status(), StatusCode::OK, "request {sent}");
        let state = field(resp.headers(), "ratelimit");
        let (c, l) = (by_name(&state, "c"), by_name(&state, "l"));
        assert_eq!(c.int("r"), Some(c_r));
        // The store says full in 1 200·sent s (minus its ms); the next cell in 1 200.
        assert_eq!(c.int("t"), Some(1200), "central after {sent}");
        // The lease's `r` is what this node holds; one more comes within 1h / 4.
        assert!(l.int("r").is_some_and(|r| r < 4));
        assert_eq!(l.int("t"), Some(900), "lease after {sent}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_decide_is_temporary_reduced_capacity() {
    let up = echo_upstream().await;
    let dead = dead_port().await;
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .upstream(up)
        .redis(&format!("redis://{dead}"), "200ms")
        .text(&policy("c", &["ip"], "gcra", 3, "1h", "site = \"central\""))
        .text(&route("api", &["c"], "closed"))
        .build();
    let gw = Gateway::start(&cfg).await;
    let req = Request::get(format!("http://{}/api", gw.addrs.listen))
        .header("x-forwarded-for", "192.0.2.1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send_h1(gw.addrs.listen, req).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.headers().contains_key("retry-after"));
    let body = json(resp).await;
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    assert_eq!(body["violated-policies"], serde_json::json!(["c"]));
}
