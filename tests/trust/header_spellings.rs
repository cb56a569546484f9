//! Protected header names in every spelling a CGI-style backend reads alike (`_` and `-`),
//! over real sockets (issue 30, items 3 and 4): forwarding claims, vendor client-IP headers
//! and method overrides reach the echo upstream only from the peers allowed to send them,
//! and in `method_override = "route"` mode an override is limited as the method it names.

use std::net::SocketAddr;

use crate::common::config::ConfigBuilder;
use crate::common::*;

/// Every spelling the red team sent (all dashes, all underscores, the two mixes) of the
/// forwarding claims, and the vendor client-IP and host headers in a dashed and an
/// underscore spelling: each with its own value, so the echo shows which got through.
fn forged() -> Vec<(String, String)> {
    let mut names = Vec::new();
    for suffix in ["Host", "Port", "Prefix", "Server"] {
        for (a, b) in [("_", "_"), ("-", "_"), ("_", "-")] {
            names.push(format!("X{a}Forwarded{b}{suffix}"));
        }
    }
    for claim in ["X-Original-URL", "X-Rewrite-URL"] {
        names.push(claim.replace('-', "_"));
        names.push(claim.replacen('-', "_", 1));
        names.push(
            claim
                .rsplit_once('-')
                .map(|(a, b)| format!("{a}_{b}"))
                .unwrap(),
        );
    }
    for vendor in [
        "True-Client-IP",
        "CF-Connecting-IP",
        "X-Client-IP",
        "Client-IP",
        "X-Original-Host",
        "Fastly-Client-IP",
        "X-Cluster-Client-IP",
        "X-Forwarded",
        "Forwarded-For",
        "X-Host",
        "X-Forwarded-Scheme",
        "X-Original-Forwarded-For",
        "X-ProxyUser-Ip",
        // The red team's (issue 30 review): gunicorn's SCRIPT_NAME path rewrite, Tornado's
        // X-Scheme, gunicorn's X-Forwarded-Protocol, nginx setups' X-Original-URI, XFCC.
        "Script-Name",
        "X-Scheme",
        "X-Forwarded-Protocol",
        "X-Original-URI",
        "X-Forwarded-Uri",
        "X-Forwarded-Client-Cert",
    ] {
        names.push(vendor.to_owned());
        names.push(vendor.replace('-', "_"));
    }
    names
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n, format!("forged-{i}")))
        .collect()
}

/// `method path` with `headers` as raw HTTP/1.1 (names as written): the whole answer.
async fn echoed(gw: &Gateway, method: &str, path: &str, headers: &[(String, String)]) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    raw(gw.addrs.listen, &head).await
}

/// The echo upstream's JSON from a raw answer.
fn echo(answer: &str) -> serde_json::Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|_| panic!("no echo in {answer:?}"))
}

/// A gateway in front of the echo upstream, trusting loopback (the test client) or not.
async fn gateway(trusted: bool, extra_server: &str) -> Gateway {
    let b = ConfigBuilder::new(extra_server);
    let b = if trusted { b.trust_loopback("") } else { b };
    Gateway::start(
        &b.upstream(echo_upstream().await)
            .app_route("all", "")
            .build(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_in_every_spelling_are_dropped_from_untrusted_peers_and_twins_from_trusted() {
    let forged = forged();
    let untrusted = gateway(false, "").await;
    let answer = echoed(&untrusted, "GET", "/", &forged).await;
    let h = &echo(&answer)["headers"];
    for (name, _) in &forged {
        let name = name.to_ascii_lowercase();
        assert!(h.get(&name).is_none(), "{name} reached the upstream: {h}");
    }
    assert_eq!(h["x-real-ip"], "127.0.0.1");

    // From a trusted proxy, the dashed names it writes; an underscore twin is a value the
    // proxy may have passed on from its client, dropped.
    let trusted = gateway(true, "").await;
    let answer = echoed(&trusted, "GET", "/", &forged).await;
    let h = &echo(&answer)["headers"];
    for (name, value) in &forged {
        let name = name.to_ascii_lowercase();
        match name.contains('_') {
            true => assert!(h.get(&name).is_none(), "{name} reached the upstream: {h}"),
            false => assert_eq!(h[&name], *value, "{name}: {h}"),
        }
    }
}

/// The three override names, dashed and in underscore spellings.
fn overrides(method: &str) -> Vec<(String, String)> {
    [
        "X-HTTP-Method-Override",
        "X_Method_Override",
        "X-HTTP_Method",
    ]
    .iter()
    .map(|n| (n.to_string(), method.to_string()))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_overrides_are_dropped_from_everyone_by_default() {
    for trusted in [false, true] {
        let gw = gateway(trusted, "").await;
        let answer = echoed(&gw, "GET", "/login", &overrides("POST")).await;
        let echo = echo(&answer);
        assert_eq!(echo["method"], "GET", "{answer}");
        for (name, _) in overrides("POST") {
            let name = name.to_ascii_lowercase();
            assert!(echo["headers"].get(&name).is_none(), "{name}: {answer}");
        }
    }
}

/// `method_override = "route"`: a POST-only login route (1 an hour) beside an unlimited
/// catch-all.
fn route_mode(up: SocketAddr) -> String {
    ConfigBuilder::new("method_override = \"route\"")
        .upstream(up)
        .policy("login", &["route"], "gcra", 1, "1h", "")
        .app_route(
            "login",
            "match = { path_prefix = \"/login\", methods = [\"POST\"] }\npolicies = [\"login\"]",
        )
        .app_route("rest", "")
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_route_mode_an_override_is_limited_as_the_method_it_names() {
    let gw = Gateway::start(&route_mode(echo_upstream().await)).await;
    // Routed (and forwarded) as the POST it names: the backend runs what was limited.
    let one = [("X-HTTP-Method-Override".to_string(), "POST".to_string())];
    let answer = echoed(&gw, "GET", "/login", &one).await;
    assert_eq!(status(&answer), 200, "{answer}");
    let echo = echo(&answer);
    assert_eq!(echo["method"], "POST", "{answer}");
    assert!(echo["headers"].get("x-http-method-override").is_none());
    // The login budget is spent: a plain POST, and every override spelling, are denied.
    assert_eq!(status(&echoed(&gw, "POST", "/login", &[]).await), 429);
    for header in overrides("POST") {
        let answer = echoed(&gw, "GET", "/login", &[header]).await;
        assert_eq!(status(&answer), 429, "{answer}");
    }
    // A GET without an override still takes the catch-all.
    assert_eq!(status(&echoed(&gw, "GET", "/login", &[]).await), 200);
    // Not one upper-case known method: refused, never routed as something else.
    for bad in [
        vec![("X-HTTP-Method-Override", "post")],
        vec![("X-HTTP-Method", "HEAD")],
    ] {
        let bad: Vec<_> = bad
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            status(&echoed(&gw, "GET", "/login", &bad).await),
            400,
            "{bad:?}"
        );
    }
    let two = [overrides("POST")[0].clone(), overrides("GET")[1].clone()];
    assert_eq!(status(&echoed(&gw, "GET", "/login", &two).await), 400);
}
