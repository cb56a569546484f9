//! `GET` and `DELETE /limits/{policy}?ip=…&account=…&route=…&method=…&path=…&header.NAME=…
//! &query.NAME=…&cookie.NAME=…&jwt.CLAIM=…&key=…`: one key's state, and resetting it (what
//! redis-cell and envoy ratelimit users ask for). The key is built from the same parts a
//! request brings, by the limiter's own code (`limit/inspect.rs`); the answer is JSON.
//! `query.` and `cookie.` take the decoded value, `jwt.` the claim's value (an operator
//! has the claim, not a token), `path` the path as a client would send it.

use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::method_not_allowed;
use crate::body::{ResponseBody, full};
use crate::config::PathRules;
use crate::limit::Limiter;
use crate::limit::inspect::{InspectError, KeyQuery};
use crate::normalize::normalize_path;

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
        Ok(view) => json(&view),
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
            // A rate limit service rule's key (a `[Given]` policy's).
            "key" => q.given = Some(value),
            "route" => q.route = Some(value),
            "method" => {
                let m = Method::from_bytes(value.as_bytes())
                    .map_err(|_| format!("method: `{value}` is not a method"))?;
                q.method = Some(m);
            }
            // The default path rules, as the proxy makes a path canonical; a path they
            // refuse is taken as already canonical.
            "path" => {
                q.path = Some(match normalize_path(&value, PathRules::default()) {
                    Ok(p) => p.into_owned(),
                    Err(_) => value,
                })
            }
            other => {
                let Some((kind, part)) = other.split_once('.') else {
                    return Err(unknown(other));
                };
                let list = match kind {
                    "header" => {
                        q.headers.push((part.to_ascii_lowercase(), value));
                        continue;
                    }
                    "query" => &mut q.query,
                    "cookie" => &mut q.cookies,
                    "jwt" => &mut q.claims,
                    "form" => &mut q.form,
                    "json" => &mut q.json,
                    _ => return Err(unknown(other)),
                };
                list.push((part.to_owned(), value));
            }
        }
    }
    Ok(q)
}

fn unknown(name: &str) -> String {
    format!(
        "unknown parameter `{name}` (ip, account, route, method, path, header.NAME, query.NAME, \
         cookie.NAME, jwt.CLAIM, form.NAME, json.POINTER, key)"
    )
}

/// 200 with `view` as pretty JSON.
pub(super) fn json(view: &impl serde::Serialize) -> Response<ResponseBody> {
    let mut body = serde_json::to_vec_pretty(view).unwrap_or_default();
    body.push(b'\n');
    let mut resp = Response::new(full(bytes::Bytes::from(body)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(super) fn problem(status: StatusCode, detail: &str) -> Response<ResponseBody> {
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
