//! `GET` and `DELETE /limits/{policy}?ip=…&account=…&route=…&method=…&header.NAME=…`: one
//! key's state, and resetting it (what redis-cell and envoy ratelimit users ask for). The
//! key is built from the same parts a request brings, by the limiter's own code
//! (`limit/inspect.rs`); the answer is JSON.

use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::method_not_allowed;
use crate::body::{ResponseBody, full};
use crate::limit::Limiter;
use crate::limit::inspect::{InspectError, KeyQuery};

/// Answer `/limits/...`.
pub async fn answer<B>(limiter: &Limiter, req: &Request<B>) -> Response<ResponseBody> {
    let reset = match *req.method() {
        Method::GET => false,
        Method::DELETE => true,
        _ => return method_not_allowed("GET, DELETE"),
    };
    let policy = req.uri().path().trim_start_matches("/limits/");
    let query = match parse(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return problem(StatusCode::BAD_REQUEST, &e),
    };
    match limiter.inspect(policy, &query, reset).await {
        Ok(view) => {
            let mut body = serde_json::to_vec_pretty(&view).unwrap_or_default();
            body.push(b'\n');
            let mut resp = Response::new(full(bytes::Bytes::from(body)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e @ InspectError::NoPolicy(_)) => problem(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e @ InspectError::BadKey(_)) => problem(StatusCode::BAD_REQUEST, &e.to_string()),
        Err(e @ InspectError::Unavailable(_)) => {
            problem(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
    }
}

/// The key parts of a query string; an unknown parameter is an error (a typo must not read
/// another key).
fn parse(query: &str) -> Result<KeyQuery, String> {
    let mut q = KeyQuery::default();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match &*name {
            "ip" => {
                let ip = value
                    .parse()
                    .map_err(|_| format!("ip: `{value}` is not an IP address"))?;
                q.ip = Some(ip);
            }
            "account" => q.account = Some(value),
            "route" => q.route = Some(value),
            "method" => {
                let m = Method::from_bytes(value.as_bytes())
                    .map_err(|_| format!("method: `{value}` is not a method"))?;
                q.method = Some(m);
            }
            other => match other.strip_prefix("header.") {
                Some(h) => q.headers.push((h.to_ascii_lowercase(), value)),
                None => {
                    return Err(format!(
                        "unknown parameter `{other}` (ip, account, route, method, header.NAME)"
                    ));
                }
            },
        }
    }
    Ok(q)
}

fn problem(status: StatusCode, detail: &str) -> Response<ResponseBody> {
    let body = serde_json::json!({
        "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut resp = Response::new(full(bytes::Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}
