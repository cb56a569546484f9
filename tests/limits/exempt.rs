//! `[exempt]` and `[policies.NAME.exempt]` over real sockets: an exempt client is never
//! denied by the policies it is exempt from (counted as `outcome="exempt"`), still by the
//! others; accounts match raw or by their `hash:` form, ambiguous ones never.

use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;

fn gateway_config(up: std::net::SocketAddr) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
         [account]\nheader = \"x-api-key\"\n\
         [exempt]\ncidrs = [\"10.20.0.0/16\"]\n\
         [upstreams.app]\nurls = [\"http://{up}\"]\n\
         [policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\n\
         [policies.per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\n\
         exempt = {{ accounts = [\"partner\", \"hash:{{HASH}}\"] }}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n\
         policies = [\"per_ip\", \"per_account\"]\n"
    )
}

async fn statuses(
    addr: std::net::SocketAddr,
    ip: &str,
    account: Option<&str>,
    n: usize,
) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get_as(addr, "/x", ip, account).await.status().as_u16());
    }
    out
}

fn exempt_count(metrics: &str, policy: &str) -> f64 {
    metric_sum(
        metrics,
        &format!(
            "tollgate_decisions_total{{route=\"api\",policy=\"{policy}\",outcome=\"exempt\"}}"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exempt_clients_pass_the_policies_they_are_exempt_from_only() {
    let up = echo_upstream().await;
    // The hashed form of "other-partner", as the admin API shows keys: find it through a
    // key read, then exempt it by hash in the file.
    let probe = Gateway::start(&gateway_config(up).replace("{HASH}", &"0".repeat(32))).await;
    let admin = probe.addrs.admin_listen.unwrap();
    let resp = send_h1(
        admin,
        Request::get(format!(
            "http://{admin}/limits/per_account?account=other-partner"
        ))
        .body(Empty::<Bytes>::new())
        .unwrap(),
    )
    .await;
    let key = json(resp).await["key"].as_str().unwrap().to_string();
    let hash = key.rsplit(':').next().unwrap().to_string();
    assert_eq!(hash.len(), 32, "{key}");
    drop(probe);

    let gw = Gateway::start(&gateway_config(up).replace("{HASH}", &hash)).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    // The exempt network: neither per_ip (2/h) nor per_account applies.
    assert_eq!(
        statuses(addr, "10.20.3.4", Some("alice"), 5).await,
        [200; 5]
    );
    // Anyone else: per_ip denies the third.
    assert_eq!(statuses(addr, "192.0.2.1", None, 3).await, [200, 200, 429]);
    // A partner account (raw in the file) is exempt from per_account only: per_ip still
    // counts its address.
    assert_eq!(
        statuses(addr, "192.0.2.2", Some("partner"), 3).await,
        [200, 200, 429]
    );
    // The same by hash.
    assert_eq!(
        statuses(addr, "192.0.2.3", Some("other-partner"), 2).await,
        [200, 200]
    );
    // A non-exempt account: per_account (1/h) denies its second request.
    assert_eq!(
        statuses(addr, "192.0.2.4", Some("bob"), 2).await,
        [200, 429]
    );
    // An account stated twice buys nothing: ambiguous, refused before any policy.
    let twice = Request::get(format!("http://{addr}/x"))
        .header("x-forwarded-for", "192.0.2.5")
        .header("x-api-key", "partner")
        .header("x-api-key", "partner")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(send_h1(addr, twice).await.status(), StatusCode::BAD_REQUEST);
    let m = metrics_text(admin).await;
    assert_eq!(exempt_count(&m, "per_ip"), 5.0, "{m}");
    assert_eq!(exempt_count(&m, "per_account"), 5.0 + 3.0 + 2.0, "{m}");
    // `/config` shows the lists, accounts only hashed.
    let cfg = json(send_h1(admin, get(&format!("http://{admin}/config"))).await).await;
    let accounts = &cfg["exempt"]["policies"]["per_account"]["accounts"];
    assert_eq!(accounts.as_array().map(Vec::len), Some(2), "{cfg}");
    assert!(!cfg.to_string().contains("\"partner\""), "{cfg}");
    assert_eq!(cfg["exempt"]["global"]["cidrs"][0], "10.20.0.0/16");
}

/// An exempt request shows nothing of the policy (no `RateLimit` headers: it was not
/// asked), an IPv6 network matches its addresses, and a reload's new list applies to the
/// very next request — both ways: a network added is exempt, one removed is limited again
/// with its key's state as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exemptions_show_no_headers_match_ipv6_and_follow_a_reload() {
    use crate::common::reload::{file, policy, reload, route, serve};
    let up = echo_upstream().await;
    let clock = tollgate::limit::clock::ManualClock::new();
    let with = |cidrs: &str| {
        file(
            up,
            &format!(
                "[exempt]\ncidrs = [{cidrs}]\n{}{}",
                policy("per_ip", "gcra", 1, ""),
                route("api", "/", &["per_ip"])
            ),
        )
    };
    let s = serve(&with("\"2001:db8:77::/48\""), &clock).await;
    let v6 = "2001:db8:77:1::9";
    for _ in 0..3 {
        let r = get_as(s.addr, "/x", v6, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("ratelimit").is_none(), "{:?}", r.headers());
        assert!(r.headers().get("ratelimit-policy").is_none());
    }
    let other = "198.51.100.9";
    let r = get_as(s.addr, "/x", other, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers().get("ratelimit").is_some(),
        "a limited client sees its state"
    );
    assert_eq!(get_as(s.addr, "/x", other, None).await.status(), 429);

    // The lists swap: 198.51.100.0/24 exempt, the IPv6 network limited again.
    let (status, body) = reload(&s, &with("\"198.51.100.0/24\"")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(get_as(s.addr, "/x", other, None).await.status(), 200);
    assert_eq!(get_as(s.addr, "/x", v6, None).await.status(), 200);
    assert_eq!(
        get_as(s.addr, "/x", v6, None).await.status(),
        429,
        "no longer exempt: one an hour"
    );
    // Back: the address's spent cell from before is still there.
    assert_eq!(reload(&s, &with("")).await.0, StatusCode::OK);
    assert_eq!(get_as(s.addr, "/x", other, None).await.status(), 429);
}
