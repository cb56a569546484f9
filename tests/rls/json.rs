//! `POST /json` on `[rls] json_listen`, as envoyproxy/ratelimit's JSON handler answers: the
//! response in protobuf's JSON mapping, 200 when OK, 429 when OVER_LIMIT, 400 for a body
//! that is no request or a request the service refuses; `GET /healthcheck`.

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::common::{send_h1, text};
use crate::{MESSAGING, served};

async fn post(addr: std::net::SocketAddr, body: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{addr}/json"))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = send_h1(addr, req).await;
    let status = resp.status();
    (status, text(resp).await)
}

#[tokio::test(flavor = "multi_thread")]
async fn json_answers_200_then_429() {
    let s = served("json_listen = \"127.0.0.1:0\"", MESSAGING).await;
    let addr = s.json.expect("json_listen bound");
    let call = json!({
        "domain": "messaging",
        "descriptors": [{"entries": [{"key": "remote_address", "value": "10.1.1.1"}]}],
    })
    .to_string();
    let (status, body) = post(addr, &call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer,
        json!({
            "overallCode": "OK",
            "statuses": [{
                "code": "OK",
                "currentLimit": {"name": "per_address", "requestsPerUnit": 2, "unit": "MINUTE"},
                "limitRemaining": 1,
                "durationUntilReset": answer["statuses"][0]["durationUntilReset"],
            }],
        })
    );
    assert_eq!(post(addr, &call).await.0, StatusCode::OK);
    let (status, body) = post(addr, &call).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("\"overallCode\":\"OVER_LIMIT\""), "{body}");
    assert_eq!(post(addr, "{not json").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(
        post(addr, "{\"domain\": 3}").await.0,
        StatusCode::BAD_REQUEST
    );
    // A request the service refuses is 400 with the service's reason, as ratelimit answers.
    let (status, body) = post(addr, r#"{"domain": "", "descriptors": []}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("domain"), "{body}");
    // Load balancers' health check, as on ratelimit's HTTP port.
    let req = Request::get(format!("http://{addr}/healthcheck"))
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send_h1(addr, req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "OK\n");
}
