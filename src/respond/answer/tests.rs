//! Every [`GatewayError`] variant, walked: its HTTP status and gRPC code say the same thing,
//! and both written answers carry what [`GatewayError::answer`] says.

use std::mem::discriminant;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::BodyExt;

use super::super::{error_response, error_response_grpc};
use super::{GatewayError, GrpcCode};
use crate::config::{HeadersWhere, Response as ResponseConfig};
use crate::limit::PolicyReport;
use crate::limit::algorithm::QuotaInfo;
use crate::limit::keys::MissingKey;
use crate::limit::layer::answer::{ProblemBody, percent_encode};

/// The variant after `e`, or `None` after the last. An exhaustive match with no wildcard:
/// a new variant does not compile until it has an arm here, and that arm puts it in the
/// walk (`every_error`), so it is checked below.
fn after(e: &GatewayError) -> Option<GatewayError> {
    let missing = || MissingKey {
        policy: "login".into(),
        what: "the `x-username` header".into(),
    };
    Some(match e {
        GatewayError::NoRoute { .. } => GatewayError::UpstreamUnavailable {
            upstream: "app".into(),
            reason: "tcp connect error: Connection refused (os error 111)".into(),
        },
        GatewayError::UpstreamUnavailable { .. } => GatewayError::UpstreamTimeout {
            upstream: "app".into(),
            timeout: Duration::from_secs(5),
        },
        GatewayError::UpstreamTimeout { .. } => GatewayError::BadRequest("two hosts".into()),
        GatewayError::BadRequest(_) => GatewayError::RequestTimeout {
            timeout: Duration::from_secs(10),
        },
        GatewayError::RequestTimeout { .. } => GatewayError::PayloadTooLarge { limit: 1024 },
        GatewayError::PayloadTooLarge { .. } => GatewayError::LoopDetected {
            pseudonym: "tollgate".into(),
        },
        GatewayError::LoopDetected { .. } => GatewayError::UnexpectedUpgrade {
            upstream: "app".into(),
            what: "websocket".into(),
        },
        GatewayError::UnexpectedUpgrade { .. } => GatewayError::Unauthenticated,
        GatewayError::Unauthenticated => GatewayError::MissingCredential(missing()),
        GatewayError::MissingCredential(_) => GatewayError::MissingKey(missing()),
        GatewayError::MissingKey(_) => GatewayError::RateLimited(vec![PolicyReport {
            name: Arc::from("per_ip"),
            quota: QuotaInfo {
                limit: 10,
                period: Duration::from_secs(60),
            },
            remaining: 0,
            reset_after: 6_000_000_000,
            next_after: 6_000_000_000,
            retry_after: Some(5_500_000_000),
            partition: None,
        }]),
        GatewayError::RateLimited(_) => GatewayError::NoClientAddress,
        GatewayError::NoClientAddress => GatewayError::StoreUnavailable {
            retry_after: 2_000_000_000,
            policies: vec![Arc::from("login")],
        },
        GatewayError::StoreUnavailable { .. } => return None,
    })
}

/// One error of each variant, in `after`'s order.
fn every_error() -> Vec<GatewayError> {
    let mut all = vec![GatewayError::NoRoute {
        method: Method::GET,
        path: "/nowhere".into(),
    }];
    while let Some(next) = after(all.last().expect("one")) {
        let seen = all.iter().any(|e| discriminant(e) == discriminant(&next));
        assert!(!seen, "`after` walks back to {next:?}");
        all.push(next);
    }
    all
}

/// The gRPC codes that say what an HTTP status says (grpc/doc/statuscodes.md). A status
/// not listed has no code agreed yet: the test fails until one is.
fn agrees(status: StatusCode, code: GrpcCode) -> bool {
    use GrpcCode as G;
    let agreed: &[GrpcCode] = match status.as_u16() {
        400 => &[G::InvalidArgument],
        401 => &[G::Unauthenticated],
        404 => &[G::Unimplemented],
        408 | 504 => &[G::DeadlineExceeded],
        413 | 429 => &[G::ResourceExhausted],
        // An upstream that cannot be reached is UNAVAILABLE (clients retry it); one that
        // answered wrongly is UNKNOWN.
        502 => &[G::Unavailable, G::Unknown],
        503 => &[G::Unavailable],
        508 => &[G::Unknown],
        500 => &[G::Internal],
        _ => &[],
    };
    agreed.contains(&code)
}

fn cfg() -> ResponseConfig {
    ResponseConfig {
        headers: HeadersWhere::All,
        legacy_headers: true,
    }
}

#[test]
fn every_variant_has_a_status_and_a_grpc_code_that_agree() {
    let all = every_error();
    assert_eq!(all.len(), 14, "{all:?}");
    for e in &all {
        let a = e.answer();
        assert!(
            a.status.is_client_error() || a.status.is_server_error(),
            "{e:?}: {}",
            a.status
        );
        assert!(
            agrees(a.status, a.grpc),
            "{e:?}: HTTP {} is answered to gRPC as {:?}",
            a.status,
            a.grpc
        );
        assert_eq!(a.challenge, a.status == StatusCode::UNAUTHORIZED, "{e:?}");
        let waits = matches!(a.status.as_u16(), 429 | 503);
        assert_eq!(a.retry_after.is_some(), waits, "{e:?}");
        assert!(!a.detail.is_empty(), "{e:?}");
        assert!(!a.detail.contains("os error"), "{e:?}: {}", a.detail);
        let quota = matches!(a.body, ProblemBody::QuotaExceeded { .. });
        assert_eq!(quota, a.status == StatusCode::TOO_MANY_REQUESTS, "{e:?}");
    }
}

/// The problem answer and the gRPC answer both say what `answer` says.
#[tokio::test]
async fn both_answers_are_written_from_the_one_table() {
    for e in &every_error() {
        let a = e.answer();
        let http = error_response(e, &cfg(), Some("req-1"));
        assert_eq!(http.status(), a.status, "{e:?}");
        assert_eq!(
            http.headers().contains_key("www-authenticate"),
            a.challenge,
            "{e:?}"
        );
        let retry = |r: &http::Response<_>| {
            (r.headers().get("retry-after")).map(|v| v.to_str().unwrap().parse::<u64>().unwrap())
        };
        assert_eq!(retry(&http), a.retry_after, "{e:?}");
        let grpc = error_response_grpc(e, &cfg());
        assert_eq!(grpc.status(), StatusCode::OK, "{e:?}");
        assert_eq!(
            grpc.headers()["grpc-status"],
            a.grpc.number().to_string().as_str(),
            "{e:?}"
        );
        assert_eq!(
            grpc.headers()["grpc-message"],
            percent_encode(&a.detail).as_str(),
            "{e:?}"
        );
        assert_eq!(retry(&grpc), a.retry_after, "{e:?}");
        let body = http.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["status"], a.status.as_u16(), "{e:?}");
        assert_eq!(body["request_id"], "req-1", "{e:?}");
        if let ProblemBody::Plain = a.body {
            let kind = format!("https://tollgate.dev/problems/{}", a.kind);
            assert_eq!(body["type"], kind.as_str(), "{e:?}");
            assert_eq!(body["detail"], &*a.detail, "{e:?}");
        }
    }
}

/// The tower layer's 500 (no peer address) is written from the table byte for byte as it
/// was written by hand in `layer/service.rs`: problem details, no `request_id`.
#[tokio::test]
async fn the_layers_500_is_the_answer_it_always_was() {
    let resp = error_response(&GatewayError::NoClientAddress, &cfg(), None);
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let names: Vec<&str> = resp.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["content-type"]);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        concat!(
            r#"{"detail":"the rate limiter cannot tell the client's address","#,
            r#""status":500,"title":"Internal Server Error","#,
            r#""type":"https://tollgate.dev/problems/no_client_address"}"#
        )
    );
}
