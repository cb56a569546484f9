//! A rule's key through the admin API, as a route's: `GET /limits/{policy}?key=…`.

use crate::common::rls::request;
use crate::common::{get, json, send_h1};
use crate::{MESSAGING, served};

#[tokio::test(flavor = "multi_thread")]
async fn limits_shows_a_rules_key() {
    let s = served("", MESSAGING).await;
    let mut c = s.client().await;
    c.answer(request("messaging", &[&[("remote_address", "10.0.0.1")]]))
        .await;
    let admin = s.admin.expect("admin listener");
    let url = format!(
        "http://{admin}/limits/messaging.remote_address?key=messaging_remote_address_10.0.0.1_"
    );
    let view = json(send_h1(admin, get(&url)).await).await;
    assert_eq!(view["limit"], 2, "{view}");
    assert_eq!(view["remaining"], 1, "{view}");
    assert_eq!(view["site"], "local", "{view}");
    let missing = format!("http://{admin}/limits/messaging.remote_address");
    let resp = send_h1(admin, get(&missing)).await;
    assert_eq!(resp.status(), http::StatusCode::BAD_REQUEST);
}
