//! Who the client is, on real sockets: which forwarding header a trusted proxy is believed
//! in and how its chain is walked (read back as the `X-Real-IP` the upstream receives), the
//! `method` key part, and requests that state a keyed header ambiguously.

use crate::common::*;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::Empty;

/// `[client_ip]` trusting the test client (loopback) and 10/8, believing `header`.
fn trusting(header: &str) -> String {
    format!(
        "\n[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\"]\n\
         forwarded_header = \"{header}\"\n"
    )
}

/// A gateway in front of the echo upstream; `extra` follows the route's keys.
async fn gateway(extra: &str) -> Gateway {
    Gateway::start(&config(echo_upstream().await, "", extra)).await
}

/// Send `method /` with `headers` (each pair its own field line, in order).
async fn send(
    gw: &Gateway,
    method: &str,
    headers: &[(&str, &str)],
) -> http::Response<hyper::body::Incoming> {
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(gw.url("/"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let map: &mut HeaderMap = req.headers_mut();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    send_h1(gw.addrs.listen, req).await
}

/// The client address the gateway resolved, as the upstream saw it in `X-Real-IP`.
async fn real_ip(gw: &Gateway, headers: &[(&str, &str)]) -> String {
    let resp = send(gw, "GET", headers).await;
    assert_eq!(resp.status(), StatusCode::OK);
    json(resp).await["headers"]["x-real-ip"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn only_the_configured_forwarding_header_is_believed() {
    let gw = gateway(&trusting("forwarded")).await;
    let spoof = [("x-forwarded-for", "6.6.6.6"), ("forwarded", "for=1.2.3.4")];
    assert_eq!(real_ip(&gw, &spoof).await, "1.2.3.4");
    assert_eq!(real_ip(&gw, &spoof[..1]).await, "127.0.0.1");

    let gw = gateway(&trusting("x-forwarded-for")).await;
    assert_eq!(real_ip(&gw, &spoof[1..]).await, "127.0.0.1");
    assert_eq!(real_ip(&gw, &spoof).await, "6.6.6.6");
}

#[tokio::test]
async fn x_forwarded_for_is_walked_from_the_right() {
    let gw = gateway(&trusting("x-forwarded-for")).await;
    let cases: [(&[(&str, &str)], &str); 6] = [
        // Garbage to the left of the client does not discard it.
        (&[("x-forwarded-for", "evil, 1.2.3.4")], "1.2.3.4"),
        (
            &[("x-forwarded-for", "evil"), ("x-forwarded-for", "1.2.3.4")],
            "1.2.3.4",
        ),
        // Several field lines are one list, in order.
        (
            &[
                ("x-forwarded-for", "1.2.3.4"),
                ("x-forwarded-for", "10.0.0.5"),
            ],
            "1.2.3.4",
        ),
        // A non-address before any untrusted hop: the furthest trusted hop.
        (
            &[("x-forwarded-for", "1.2.3.4, unknown, 10.0.0.7")],
            "10.0.0.7",
        ),
        (&[("x-forwarded-for", "1.2.3.4, garbage")], "127.0.0.1"),
        (
            &[("x-forwarded-for", "[2001:db8::1]:443, 10.0.0.7")],
            "2001:db8::1",
        ),
    ];
    for (headers, want) in cases {
        assert_eq!(real_ip(&gw, headers).await, want, "{headers:?}");
    }
}

#[tokio::test]
async fn forwarded_is_parsed_as_rfc_7239() {
    let gw = gateway(&trusting("forwarded")).await;
    let cases = [
        ("for=1.2.3.4;host=\"a,b\", for=10.0.0.2", "1.2.3.4"),
        (
            "for=\"[2001:db8::1]:443\";proto=https, for=10.0.0.2",
            "2001:db8::1",
        ),
        ("for=1.2.3.4:80", "1.2.3.4"),
        ("for=\"[::ffff:1.2.3.4]\"", "1.2.3.4"),
        // Obfuscated, `unknown`, or no `for`: the walk ends at the furthest trusted hop.
        ("for=1.2.3.4, for=_hidden, for=10.0.0.2", "10.0.0.2"),
        ("for=1.2.3.4, for=unknown", "127.0.0.1"),
        ("for=1.2.3.4, proto=https, for=10.0.0.2", "10.0.0.2"),
        // A client's unterminated quote cannot swallow the element a proxy appended.
        ("for=\"6.6.6.6, for=1.2.3.4", "1.2.3.4"),
    ];
    for (forwarded, want) in cases {
        assert_eq!(
            real_ip(&gw, &[("forwarded", forwarded)]).await,
            want,
            "{forwarded}"
        );
    }
}

#[tokio::test]
async fn made_up_methods_share_one_budget() {
    let policy = "policies = [\"by_method\"]\n\n[policies.by_method]\nkey = [\"ip\", \"method\"]\n\
                  algorithm = \"gcra\"\nlimit = 1\nperiod = \"1m\"\n";
    let gw = gateway(policy).await;
    assert_eq!(send(&gw, "FOO1", &[]).await.status(), StatusCode::OK);
    assert_eq!(
        send(&gw, "FOO2", &[]).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The standard methods keep their own budgets.
    assert_eq!(send(&gw, "GET", &[]).await.status(), StatusCode::OK);
    assert_eq!(send(&gw, "POST", &[]).await.status(), StatusCode::OK);
    assert_eq!(
        send(&gw, "GET", &[]).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

const KEYED: &str = "\n[account]\nheader = \"x-api-key\"\n\n\
    [policies.per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1m\"\n\n\
    [policies.per_tenant]\nkey = [\"header:x-tenant\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1m\"\n";

#[tokio::test]
async fn an_ambiguous_keyed_header_is_refused_and_spends_nothing() {
    let gw = gateway(&format!(
        "policies = [\"per_account\", \"per_tenant\"]\n{KEYED}"
    ))
    .await;
    let ambiguous: [&[(&str, &str)]; 4] = [
        &[("x-api-key", "junk-1"), ("x-api-key", "real")],
        &[("x-api-key", "junk-2, real")],
        &[("x-api-key", "real"), ("x-tenant", "t"), ("x-tenant", "t")],
        &[("x-tenant", "junk,t")],
    ];
    for headers in ambiguous {
        let resp = send(&gw, "GET", headers).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{headers:?}");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let name = headers.last().unwrap().0;
        let body = text(resp).await;
        assert!(
            body.contains(&format!("`{name}` header must appear once")),
            "{body}"
        );
    }
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    assert_eq!(metric_sum(&m, "tollgate_decisions_total{"), 0.0, "{m}");
    // Both budgets are whole: two requests pass, the third is denied.
    let normal = [("x-api-key", "real"), ("x-tenant", "t")];
    for _ in 0..2 {
        assert_eq!(send(&gw, "GET", &normal).await.status(), StatusCode::OK);
    }
    let resp = send(&gw, "GET", &normal).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // Without the header the policy does not apply, as before.
    assert_eq!(send(&gw, "GET", &[]).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn routes_that_ask_no_enforcing_policy_do_not_check() {
    let twice = [("x-api-key", "a"), ("x-api-key", "b")];
    for mode in ["off", "shadow"] {
        let gw = gateway(&format!(
            "policies = [\"per_account\"]\nmode = \"{mode}\"\n{KEYED}"
        ))
        .await;
        let resp = send(&gw, "GET", &twice).await;
        assert_eq!(resp.status(), StatusCode::OK, "{mode}");
        assert_eq!(json(resp).await["headers"]["x-api-key"], "a | b", "{mode}");
    }
}
