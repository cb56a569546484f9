//! Which route a request takes, and what its upstream is sent, however the request or the
//! config spells it: a route's host as the operator wrote it, a method in lower case, what
//! `strip_prefix` leaves, and an IPv4 client behind an IPv6 translator. Each test began as a
//! way around a limit found by a hostile review.

use crate::common::config::ConfigBuilder;
use crate::common::*;

fn get(target: &str, host: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// `match.host` written with a trailing dot, in capitals or as a bracketed IPv6 literal is
/// the host the router compares (`check` accepted all three, and they never matched);
/// requests match it whatever their port, case or trailing dot. (A port in `match.host` is
/// refused at load: `tests/common/fixtures/invalid/route_host_with_port.toml`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_host_matches_its_requests_however_it_is_written() {
    let up = echo_upstream().await;
    for (configured, sent) in [
        ("shop.example.", "shop.example"),
        ("shop.example.", "shop.example.:8080"),
        ("Shop.Example", "shop.EXAMPLE"),
        ("[::1]", "[::1]:8080"),
        ("::1", "[::1]"),
        // IPv6 literals compare in RFC 5952's form, however either side spells them (was:
        // `[2001:DB8:0:0::1]` passed `check` and never matched `[2001:db8::1]`).
        ("[2001:DB8:0:0::1]", "[2001:db8::1]"),
        ("0:0:0:0:0:0:0:1", "[::1]:8080"),
        ("[::1]", "[0:0::1]"),
    ] {
        let cfg = ConfigBuilder::without_admin("")
            .upstream(up)
            .text(&format!(
                "[[routes]]\nname = \"shop\"\nmatch = {{ path_prefix = \"/\", host = \"{configured}\" }}\nupstream = \"app\"\n"
            ))
            .build();
        let gw = Gateway::start(&cfg).await;
        let answer = raw(gw.addrs.listen, &get("/x", sent)).await;
        assert_eq!(status(&answer), 200, "host = {configured:?}, Host: {sent}");
        assert_eq!(
            status(&raw(gw.addrs.listen, &get("/x", "other.example")).await),
            404
        );
    }
}

/// Methods are upper case: `post /login` would miss a `methods = ["POST"]` route and its
/// limit, and a backend that upper-cases methods (Django, Flask) would serve it as the
/// login POST. It is refused before any route or policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_in_lower_case_is_refused() {
    let up = echo_upstream().await;
    let cfg = ConfigBuilder::new("")
        .upstream(up)
        .policy("login", &["route"], "gcra", 1, "1h", "")
        .app_route(
            "login",
            "match = { path_prefix = \"/login\", methods = [\"POST\"] }\npolicies = [\"login\"]",
        )
        .app_route("rest", "")
        .build();
    let gw = Gateway::start(&cfg).await;
    let post = |m: &str| {
        format!("{m} /login HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    };
    assert_eq!(status(&raw(gw.addrs.listen, &post("POST")).await), 200);
    assert_eq!(status(&raw(gw.addrs.listen, &post("POST")).await), 429);
    for m in ["post", "Post", "pOST", "purge"] {
        let answer = raw(gw.addrs.listen, &post(m)).await;
        assert_eq!(status(&answer), 400, "{m}: {answer}");
    }
    assert_eq!(status(&raw(gw.addrs.listen, &post("PURGE")).await), 200);
}

/// `strip_prefix` cuts the route's prefix, which may end inside a segment (`/pub` matches
/// `/pub..`): what is left must not start a dot segment upstream, or `/pub../private/x`
/// would reach `/public/../private/x`, which a backend resolves to `/private/x` (the strict
/// route's). On a `case_insensitive` route the prefix is cut in whatever case it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strip_prefix_never_leaves_a_dot_segment_and_cuts_any_case() {
    let up = echo_upstream().await;
    let cfg = ConfigBuilder::new("")
        .text(&format!(
            "[upstreams.pub]\nurls = [\"http://{up}/public\"]\n[upstreams.priv]\nurls = [\"http://{up}/private\"]\n"
        ))
        .policy("strict", &["route"], "gcra", 1, "1h", "")
        .text(
            "[[routes]]\nname = \"priv\"\nmatch = { path_prefix = \"/priv\" }\nstrip_prefix = true\nupstream = \"priv\"\npolicies = [\"strict\"]\n\
             [[routes]]\nname = \"pub\"\nmatch = { path_prefix = \"/pub\", case_insensitive = true }\nstrip_prefix = true\nupstream = \"pub\"\n",
        )
        .build();
    let gw = Gateway::start(&cfg).await;
    let uri = |answer: &str| {
        let at = answer.split("\"uri\":\"").nth(1).unwrap_or("-");
        at.split('"').next().unwrap_or("-").to_owned()
    };
    let first = raw(gw.addrs.listen, &get("/priv/x", "a")).await;
    assert_eq!((status(&first), uri(&first).as_str()), (200, "/private/x"));
    assert_eq!(
        status(&raw(gw.addrs.listen, &get("/priv/x", "a")).await),
        429
    );
    for dot in ["/pub../private/x", "/pub./x", "/PUB.."] {
        let answer = raw(gw.addrs.listen, &get(dot, "a")).await;
        assert_eq!(
            status(&answer),
            400,
            "{dot}: upstream sent {}",
            uri(&answer)
        );
    }
    for (sent, upstream) in [
        ("/PUB/x", "/public/x"),
        ("/pubx/y", "/public/x/y"),
        ("/Pub", "/public/"),
    ] {
        let answer = raw(gw.addrs.listen, &get(sent, "a")).await;
        assert_eq!(
            (status(&answer), uri(&answer)),
            (200, upstream.to_owned()),
            "{sent}"
        );
    }
}

/// A gateway trusting loopback's `X-Forwarded-For` (with `client_ip` added to
/// `[client_ip]`), one `ip` policy of 1 an hour on every path.
async fn per_ip_gateway(client_ip: &str) -> Gateway {
    let up = echo_upstream().await;
    let cfg = ConfigBuilder::new("")
        .trust_loopback(client_ip)
        .upstream(up)
        .policy("per_ip", &["ip"], "gcra", 1, "1h", "")
        .app_route("all", "policies = [\"per_ip\"]")
        .build();
    Gateway::start(&cfg).await
}

/// An IPv4 client seen through a NAT64 / SIIT translator (`64:ff9b::a.b.c.d`) is that IPv4
/// client: one abusive client behind the translator does not spend the others' budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv4_clients_behind_a_nat64_translator_have_their_own_budgets() {
    let gw = per_ip_gateway("").await;
    let ask = |ip: &'static str| get_as(gw.addrs.listen, "/", ip, None);
    assert_eq!(ask("64:ff9b::192.0.2.1").await.status(), 200);
    assert_eq!(ask("64:ff9b::192.0.2.1").await.status(), 429);
    assert_eq!(ask("192.0.2.1").await.status(), 429, "the same IPv4 client");
    assert_eq!(ask("64:ff9b::198.51.100.7").await.status(), 200);
}

/// A client keyed as the IPv4 address its NAT64 address carries has that address's headroom:
/// a carrier's NAT pool in `shared_ranges` (headroom 3) keeps its 3× through the translator.
/// (Was: looked up on the IPv6 address, 1×, on the very key the IPv4 path decides at 3×.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nat64_client_gets_the_headroom_of_the_ipv4_it_is_keyed_as() {
    let gw = per_ip_gateway("shared_ranges = [{ cidr = \"198.51.100.0/24\", headroom = 3 }]").await;
    let ask = |ip: &'static str| get_as(gw.addrs.listen, "/", ip, None);
    // On IPv4 the pool's address has 3 requests an hour.
    for i in 0..3 {
        assert_eq!(ask("198.51.100.8").await.status(), 200, "IPv4 request {i}");
    }
    // Through the translator, the same key at the same pool's headroom.
    for i in 0..3 {
        assert_eq!(
            ask("64:ff9b::198.51.100.7").await.status(),
            200,
            "NAT64 request {i} of a client in shared_ranges"
        );
    }
}
