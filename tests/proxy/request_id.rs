//! The request id (`[server] request_id_header`, default `x-request-id`): kept from a
//! trusted proxy, replaced for anyone else, forwarded to the upstream, returned to the
//! client, and in the body of every answer the gateway makes itself. Over real sockets.

use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;

/// A GET of `path` with `headers`; (status, returned id, body as JSON).
async fn ask(
    gw: &Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String, serde_json::Value) {
    let mut req = Request::get(gw.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send_h1(gw.addrs.listen, req.body(Empty::<Bytes>::new()).unwrap()).await;
    let status = resp.status();
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    (status, id, json(resp).await)
}

fn is_uuid_v4(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_clients_id_is_replaced_and_the_upstream_sees_the_returned_one() {
    let gw = Gateway::start(&config(echo_upstream().await, "", "")).await;
    let (status, id, echo) = ask(&gw, "/", &[("x-request-id", "chosen-by-client")]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(is_uuid_v4(&id), "{id}");
    assert_eq!(echo["headers"]["x-request-id"], id.as_str());
    let (_, second, _) = ask(&gw, "/", &[]).await;
    assert!(is_uuid_v4(&second) && second != id, "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_id_is_kept_and_cannot_be_dropped_by_connection() {
    let extra = "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
    let gw = Gateway::start(&config(echo_upstream().await, "", extra)).await;
    let (_, id, echo) = ask(&gw, "/", &[("x-request-id", "lb-42")]).await;
    assert_eq!(id, "lb-42");
    assert_eq!(echo["headers"]["x-request-id"], "lb-42");
    // Named in Connection it is still forwarded: the upstream must see the logged id.
    let hop = [("x-request-id", "lb-43"), ("connection", "x-request-id")];
    let (_, id, echo) = ask(&gw, "/", &hop).await;
    assert_eq!(
        (id.as_str(), &echo["headers"]["x-request-id"]),
        ("lb-43", &"lb-43".into())
    );
    // A value no log should hold is replaced even from a trusted proxy.
    let (_, id, echo) = ask(&gw, "/", &[("x-request-id", "two words")]).await;
    assert!(is_uuid_v4(&id), "{id}");
    assert_eq!(echo["headers"]["x-request-id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_own_answers_carry_the_id_in_header_and_body() {
    let policy =
        "[policies.once]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1m\"\n";
    let text = config(echo_upstream().await, "", "policies = [\"once\"]\n") + policy;
    let gw = Gateway::start(&text).await;
    let (status, _, _) = ask(&gw, "/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, id, body) = ask(&gw, "/", &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(is_uuid_v4(&id), "{id}");
    assert_eq!(body["request_id"], id.as_str(), "{body}");
    // A 400 from the canonical step, too.
    let (status, id, body) = ask(&gw, "/a%2Fb", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["request_id"], id.as_str(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_is_configurable() {
    let extra = "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
    let text = config(
        echo_upstream().await,
        "request_id_header = \"x-trace-id\"\n",
        extra,
    );
    let gw = Gateway::start(&text).await;
    let req = Request::get(gw.url("/"))
        .header("x-trace-id", "edge-7")
        .header("x-request-id", "not-this-one")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send_h1(gw.addrs.listen, req).await;
    assert_eq!(resp.headers()["x-trace-id"], "edge-7");
    let echo = json(resp).await;
    assert_eq!(echo["headers"]["x-trace-id"], "edge-7");
    assert_eq!(
        echo["headers"]["x-request-id"], "not-this-one",
        "another header, untouched"
    );
}
