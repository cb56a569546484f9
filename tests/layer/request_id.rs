//! tower-http's `SetRequestIdLayer` outside the rate-limit layer names each request: the
//! layer's problem bodies carry that id as `request_id`, as the gateway's do.

use axum::Router;
use axum::routing::get;
use http::HeaderName;
use tollgate::layer::Limits;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

use crate::common::json;
use crate::{get_with, serve};

#[tokio::test]
async fn a_refusal_names_the_id_tower_http_set() {
    let limits = Limits::from_toml(
        "[policies.once]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1m\"\n\n\
         [layers.api]\npolicies = [\"once\"]\n",
    )
    .unwrap();
    let id = HeaderName::from_static("x-request-id");
    // Layers wrap outward: the id is set first, then the limit, then it is returned.
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(limits.layer("api").unwrap())
        .layer(PropagateRequestIdLayer::new(id.clone()))
        .layer(SetRequestIdLayer::new(id, MakeRequestUuid));
    let addr = serve(router).await;
    assert_eq!(get_with(addr, "/", &[]).await.status(), 200);
    let denied = get_with(addr, "/", &[]).await;
    assert_eq!(denied.status(), 429);
    let returned = denied.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = json(denied).await;
    assert_eq!(body["request_id"], returned.as_str(), "{body}");
    // An id the client sent is what tower-http keeps (the app's own trust decision).
    let denied = get_with(addr, "/", &[("x-request-id", "client-9")]).await;
    assert_eq!(json(denied).await["request_id"], "client-9");
}
