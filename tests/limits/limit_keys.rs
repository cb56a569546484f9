//! Key parts and headroom through the real gateway: IPv6 /64s, CGNAT and `shared_ranges`
//! headroom, `header:NAME` and `method` budgets.

use crate::common::limits::*;
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use tollgate::limit::clock::ManualClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_clients_share_their_64_and_cgnat_gets_headroom() {
    let clock = ManualClock::new();
    let gw = gateway(
        echo_upstream().await,
        PER_IP,
        "policies = [\"per_ip\"]",
        &clock,
    )
    .await;
    assert_eq!(
        call(&gw, "2001:db8:1:2::1", None).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        call(&gw, "2001:db8:1:2::ffff", None).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        call(&gw, "2001:db8:1:2:aaaa::7", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        call(&gw, "2001:db8:1:3::1", None).await.status(),
        StatusCode::OK,
        "another /64"
    );

    // 100.64.0.0/10 gets limit and burst x4 (default cgnat_headroom): 8 at once.
    for i in 0..8 {
        let r = call(&gw, "100.64.7.7", None).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        if i == 0 {
            assert_eq!(
                header(&r, "ratelimit-policy").unwrap(),
                "\"per_ip\";q=8;w=1"
            );
        }
    }
    assert_eq!(
        call(&gw, "100.64.7.7", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Admitted requests in a row for client `ip` (with `account`) before the first 429, and the
/// `RateLimit-Policy` of the first answer.
async fn admitted_in_a_row(gw: &Gateway, ip: &str, account: Option<&str>) -> (u32, String) {
    let first = call(gw, ip, account).await;
    assert_eq!(first.status(), StatusCode::OK, "{ip}: first request");
    let policy = header(&first, "ratelimit-policy").unwrap_or_default();
    let mut n = 1;
    while call(gw, ip, account).await.status() == StatusCode::OK {
        n += 1;
        assert!(n <= 100, "{ip}: never denied");
    }
    (n, policy)
}

const SHARED: &str = r#"shared_ranges = [
  { cidr = "198.51.100.0/24", headroom = 10 },
  { cidr = "198.51.100.128/25", headroom = 3 },
]"#;

/// A client in a `shared_ranges` CIDR gets limit and burst × its headroom, the most specific
/// range winning; clients outside every range get the plain limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_ranges_get_their_headroom() {
    let clock = ManualClock::new();
    let up = echo_upstream().await;
    let gw = gateway_with(up, SHARED, PER_IP, "policies = [\"per_ip\"]", &clock).await;
    let (n, policy) = admitted_in_a_row(&gw, "198.51.100.7", None).await;
    assert_eq!((n, policy.as_str()), (20, "\"per_ip\";q=20;w=1"));
    let (n, policy) = admitted_in_a_row(&gw, "198.51.100.200", None).await;
    assert_eq!(
        (n, policy.as_str()),
        (6, "\"per_ip\";q=6;w=1"),
        "the /25 is more specific than the /24"
    );
    let (n, policy) = admitted_in_a_row(&gw, "203.0.113.7", None).await;
    assert_eq!((n, policy.as_str()), (2, "\"per_ip\";q=2;w=1"), "no range");
}

/// Headroom is for ip-keyed policies: an account keyed policy gives a client in a shared
/// range (or CGNAT) the plain limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_range_headroom_is_not_given_to_account_keys() {
    let clock = ManualClock::new();
    let up = echo_upstream().await;
    let per_acct = PER_IP
        .replace("per_ip", "per_acct")
        .replace("[\"ip\"]", "[\"account\"]");
    let gw = gateway_with(up, SHARED, &per_acct, "policies = [\"per_acct\"]", &clock).await;
    let (n, policy) = admitted_in_a_row(&gw, "198.51.100.7", Some("key-a")).await;
    // The account's `pk` partition follows q and w (`ratelimit_fields.rs`).
    assert!(!policy.contains(','), "one item: {policy}");
    assert_eq!(
        (n, policy.split(";pk=").next()),
        (2, Some("\"per_acct\";q=2;w=1"))
    );
    let (n, _) = admitted_in_a_row(&gw, "100.64.1.1", Some("key-b")).await;
    assert_eq!(n, 2, "nor CGNAT headroom");
}

async fn call_with(gw: &Gateway, method: &str, headers: &[(&str, &str)]) -> StatusCode {
    let mut req = Request::builder()
        .method(method)
        .uri(gw.url("/x"))
        .header("x-forwarded-for", "203.0.113.9");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send_h1(gw.addrs.listen, req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .status()
}

/// `header:NAME`: each value of the header is its own budget (same client address for all);
/// a request without it is not limited by the policy; the header on two lines is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_key_part_gives_each_value_a_budget() {
    let clock = ManualClock::new();
    let per_tenant = PER_IP
        .replace("per_ip", "per_tenant")
        .replace("[\"ip\"]", "[\"header:x-tenant\"]");
    let gw = gateway(
        echo_upstream().await,
        &per_tenant,
        "policies = [\"per_tenant\"]",
        &clock,
    )
    .await;
    let tenant = |t: &'static str| [("x-tenant", t)];
    for _ in 0..2 {
        assert_eq!(call_with(&gw, "GET", &tenant("a")).await, StatusCode::OK);
    }
    assert_eq!(
        call_with(&gw, "GET", &tenant("a")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..2 {
        assert_eq!(
            call_with(&gw, "GET", &tenant("b")).await,
            StatusCode::OK,
            "another value, another budget"
        );
    }
    assert_eq!(
        call_with(&gw, "GET", &tenant("b")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..3 {
        assert_eq!(
            call_with(&gw, "GET", &[]).await,
            StatusCode::OK,
            "no header: the policy does not apply"
        );
    }
    assert_eq!(
        call_with(&gw, "GET", &[("x-tenant", "c"), ("x-tenant", "d")]).await,
        StatusCode::BAD_REQUEST,
        "an ambiguous key header is refused"
    );
}

/// `method`: each standard method its own budget; made-up methods share one (`other`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_key_part_folds_unknown_methods() {
    let clock = ManualClock::new();
    let per_method = PER_IP
        .replace("per_ip", "per_method")
        .replace("[\"ip\"]", "[\"method\"]")
        .replace("burst = 2", "burst = 1")
        .replace("limit = 2", "limit = 1");
    let gw = gateway(
        echo_upstream().await,
        &per_method,
        "policies = [\"per_method\"]",
        &clock,
    )
    .await;
    for (method, want) in [
        ("GET", StatusCode::OK),
        ("GET", StatusCode::TOO_MANY_REQUESTS),
        ("DELETE", StatusCode::OK),
        ("DELETE", StatusCode::TOO_MANY_REQUESTS),
        ("FROB", StatusCode::OK),
        ("WIBBLE", StatusCode::TOO_MANY_REQUESTS),
    ] {
        assert_eq!(call_with(&gw, method, &[]).await, want, "{method}");
    }
}
