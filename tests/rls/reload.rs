//! A reload (`POST /reload`) re-reads the YAML: a rule whose meaning did not change keeps
//! its counters; a new rule answers at once.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Empty;

use crate::common::rls::{RlsServed, codes, request};
use crate::common::{send_h1, text};
use crate::{MESSAGING, served};

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_keeps_the_counters_of_unchanged_rules() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let address = request("messaging", &[&[("remote_address", "10.0.0.1")]]);
    assert_eq!(codes(&c.answer(address.clone()).await), [("OK".into(), 1)]);
    let added = format!(
        "{MESSAGING}  - key: added\n    rate_limit:\n      unit: hour\n      requests_per_unit: 7\n"
    );
    s.write_yaml(&added);
    let (status, body) = reload(&s).await;
    assert!(status.is_success(), "{status}: {body}");
    // The unchanged rule kept its count: one left, not two.
    assert_eq!(codes(&c.answer(address.clone()).await), [("OK".into(), 0)]);
    assert_eq!(codes(&c.answer(address).await)[0].0, "OVER_LIMIT");
    let r = c.answer(request("messaging", &[&[("added", "x")]])).await;
    assert_eq!(codes(&r), [("OK".into(), 6)]);
}

/// The service's sockets are bound once: a reload that moves `[rls] listen` is refused and
/// the running YAML stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_moves_the_listener_is_refused() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    let toml = std::fs::read_to_string(&s.config).unwrap();
    let moved = toml.replace(
        "listen = \"127.0.0.1:0\"\nconfig",
        "listen = \"127.0.0.1:1\"\nconfig",
    );
    assert_ne!(moved, toml);
    std::fs::write(&s.config, moved).unwrap();
    s.write_yaml("domain: messaging\ndescriptors: []\n");
    let (status, body) = reload(&s).await;
    assert!(!status.is_success(), "{status}: {body}");
    assert!(body.contains("[rls] listen"), "{body}");
    let address = request("messaging", &[&[("remote_address", "10.0.0.1")]]);
    assert_eq!(codes(&c.answer(address).await), [("OK".into(), 1)]);
}

/// `POST /reload` on the service's admin listener: its status and body.
async fn reload(s: &RlsServed) -> (http::StatusCode, String) {
    let admin = s.admin.expect("admin listener");
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{admin}/reload"))
        .header("host", admin.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send_h1(admin, req).await;
    (resp.status(), text(resp).await)
}
