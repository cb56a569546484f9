//! An [`ErrorAnswer`] written as RFC 9457 problem details (`application/problem+json`), so
//! clients get one machine-readable shape for every refusal tollgate makes itself. The 429's
//! body is `headers.rs`' (the draft's quota-exceeded members).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::headers::{self, ResponseHeaders, TEMPORARY_REDUCED_CAPACITY};
use super::{ErrorAnswer, ProblemBody};
use crate::layer::body::{ResponseBody, full};

/// The problem-details response of `answer`; `request_id`, when the request has one, is
/// the body's `request_id` member. Logging is the caller's (it knows the route and client).
pub fn problem_response(
    answer: &ErrorAnswer<'_>,
    cfg: &ResponseHeaders,
    request_id: Option<&str>,
) -> Response<ResponseBody> {
    let (status, retry_after) = (answer.status, answer.retry_after);
    let policies = match answer.body {
        ProblemBody::QuotaExceeded { report } => {
            return headers::too_many_requests(report, retry_after, cfg, request_id);
        }
        ProblemBody::ReducedCapacity { policies } => Some(policies),
        ProblemBody::Plain => None,
    };
    let mut body = serde_json::json!({
        "type": format!("https://tollgate.dev/problems/{}", answer.kind),
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": answer.detail,
    });
    if let Some(policies) = policies {
        body["type"] = TEMPORARY_REDUCED_CAPACITY.into();
        body["violated-policies"] = policies.iter().map(|p| p.to_string()).collect();
    }
    if let Some(id) = request_id {
        body["request_id"] = id.into();
    }
    let mut resp = problem(status, body);
    if answer.challenge {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// A `application/problem+json` response with the given status and JSON body.
pub fn problem(status: StatusCode, body: serde_json::Value) -> Response<ResponseBody> {
    problem_of(status, &body)
}

/// [`problem`] of any serializable body.
pub fn problem_of(status: StatusCode, body: &impl serde::Serialize) -> Response<ResponseBody> {
    // A struct of strings and numbers serializes without failing. Written on the stack and
    // copied once: `to_vec` grew its buffer twice for a usual 429 body, and the `Vec` with
    // spare room cost `Bytes` a shared header (`benches/allocations.rs`, the abuse row).
    let mut bytes = smallvec::SmallVec::<[u8; 512]>::new();
    if serde_json::to_writer(&mut bytes, body).is_err() {
        bytes.clear();
    }
    let mut resp = Response::new(full(Bytes::copy_from_slice(&bytes)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}
