//! The Kubernetes example's config served without a cluster: the ConfigMap's `config.toml`
//! (its addresses alone rewritten) answers as the README's "What you will see" says. A
//! request through it carries `RateLimit-Policy: "per_ip";q=20;w=1` (the policy's numbers)
//! and `RateLimit: "per_ip";r=19;t=1` (this pod's share of the burst: 20 of 40, with
//! `expected_nodes = 2`), and `/status`, asked with the admin token, says `"nodes":2`.

use http::{Request, StatusCode};

use crate::common::process::{spawn_serve_with_env, temp_file};
use crate::common::*;
use crate::running::{header, timed};
use crate::{SECRETS, examples, rewrite, secret, yaml_doc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configmaps_config_shows_a_pods_share_and_two_nodes() {
    let cm = yaml_doc(&examples().join("kubernetes/configmap.yaml"));
    let up = echo_upstream().await;
    let toml = rewrite(
        cm["data"]["config.toml"].as_str().unwrap(),
        &[
            ("\"0.0.0.0:8080\"", "\"127.0.0.1:0\""),
            ("\"0.0.0.0:9901\"", "\"127.0.0.1:0\""),
            (
                "http://backend.default.svc.cluster.local:8080",
                &format!("http://{up}"),
            ),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("config.toml", &toml), SECRETS);

    // curl -si -H 'x-api-key: k1' http://tollgate/
    let req = Request::get(format!("http://{}/", gw.addr))
        .header("x-api-key", "k1")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = timed(send_h1(gw.addr, req)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let policy = header(&resp, "ratelimit-policy");
    let left = header(&resp, "ratelimit");
    assert!(policy.starts_with("\"per_ip\";q=20;w=1, "), "{policy}");
    assert!(left.starts_with("\"per_ip\";r=19;t=1, "), "{left}");

    // curl -s -H "Authorization: Bearer …" http://127.0.0.1:9901/status
    let admin = gw.admin.expect("the ConfigMap names an admin listener");
    let req = Request::get(format!("http://{admin}/status"))
        .header(
            "authorization",
            format!("Bearer {}", secret("TOLLGATE_ADMIN_TOKEN")),
        )
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let status = json(timed(send_h1(admin, req)).await).await;
    assert_eq!(status["nodes"], 2, "{status}");
}
