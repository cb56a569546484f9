//! `POST /json` as envoyproxy/ratelimit's JSON handler answers it (`[rls] json_listen`): the
//! body a `RateLimitRequest` in protobuf's JSON mapping, the answer the `RateLimitResponse`
//! so mapped, 200 when OK and 429 when OVER_LIMIT; a body that is not such a request, or one the
//! service refuses (an empty domain, a bound passed), is 400 with its message, as ratelimit
//! answers; a store that cannot decide (`on_store_error = "error"`) 503. `GET /healthcheck`
//! is 200 `OK`, as on ratelimit's HTTP port. The
//! JSON is mapped by hand: envoy-types carries no serde mapping, and these few fields are
//! the whole of it (both field spellings accepted, as protobuf's parser does).

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value, json};

use super::RlsState;
use crate::body::{ResponseBody, full};

impl RlsState {
    /// One request of the JSON listener.
    pub async fn json<B>(&self, req: Request<B>) -> Response<ResponseBody>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let started = std::time::Instant::now();
        // envoyproxy/ratelimit's HTTP port also answers load balancers' health checks.
        if req.uri().path() == "/healthcheck" && req.method() == Method::GET {
            return plain(StatusCode::OK, "OK");
        }
        if req.uri().path() != "/json" {
            return plain(StatusCode::NOT_FOUND, "not found: POST /json");
        }
        if req.method() != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST /json");
        }
        // JSON spells a request out at most a few times its protobuf size.
        let limit = 4 * self.served.load().bounds.max_message_bytes();
        let body = match Limited::new(req.into_body(), limit).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
        };
        let request = match serde_json::from_slice::<Value>(&body)
            .map_err(|e| e.to_string())
            .and_then(|v| request(&v))
        {
            Ok(r) => r,
            Err(why) => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    &format!("not a RateLimitRequest: {why}"),
                );
            }
        };
        let (answer, decision) = self.decide(&request).await;
        let resp = match answer {
            Ok(answer) => {
                let status = match Code::try_from(answer.overall_code) {
                    Ok(Code::Ok) => StatusCode::OK,
                    Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                    _ => StatusCode::INTERNAL_SERVER_ERROR,
                };
                let mut resp = Response::new(full(Bytes::from(response(&answer).to_string())));
                *resp.status_mut() = status;
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                resp
            }
            // envoyproxy/ratelimit answers a request its service refuses with 400; a store
            // that cannot decide (`on_store_error = "error"`) is this side's trouble: 503.
            Err(status) => plain(
                match status.code() {
                    tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                    tonic::Code::Internal | tonic::Code::Unknown => {
                        StatusCode::INTERNAL_SERVER_ERROR
                    }
                    _ => StatusCode::BAD_REQUEST,
                },
                status.message(),
            ),
        };
        super::log::log(&super::log::Call {
            domain: &request.domain,
            path: "/json",
            status: resp.status().as_u16(),
            started,
            client: None,
            request_id: "",
            decision: decision.as_ref(),
        });
        resp
    }
}

fn plain(status: StatusCode, text: &str) -> Response<ResponseBody> {
    let mut resp = Response::new(full(Bytes::from(format!("{text}\n"))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Field `camel` or `snake` of `v`.
fn field<'v>(v: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    v.get(camel)
        .or_else(|| v.get(snake))
        .filter(|f| !f.is_null())
}

/// A string field, or "".
fn string(v: &Value, name: &str) -> Result<String, String> {
    match v.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("`{name}` must be a string, not {other}")),
    }
}

/// An unsigned number as protobuf's JSON writes it: a number or a decimal string.
fn unsigned(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("`{what}` must be an unsigned number, not {v}"))
}

fn request(v: &Value) -> Result<RateLimitRequest, String> {
    if !v.is_object() {
        return Err("the body must be a JSON object".into());
    }
    let descriptors = match field(v, "descriptors", "descriptors") {
        None => Vec::new(),
        Some(Value::Array(all)) => all.iter().map(descriptor).collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("`descriptors` must be a list, not {other}")),
    };
    let hits = match field(v, "hitsAddend", "hits_addend") {
        Some(h) => unsigned(h, "hitsAddend")?,
        None => 0,
    };
    Ok(RateLimitRequest {
        domain: string(v, "domain")?,
        descriptors,
        hits_addend: u32::try_from(hits).map_err(|_| "`hitsAddend` is past u32".to_string())?,
    })
}

fn descriptor(v: &Value) -> Result<RateLimitDescriptor, String> {
    let entries = match field(v, "entries", "entries") {
        None => Vec::new(),
        Some(Value::Array(all)) => (all.iter())
            .map(|e| {
                Ok(Entry {
                    key: string(e, "key")?,
                    value: string(e, "value")?,
                })
            })
            .collect::<Result<_, String>>()?,
        Some(other) => return Err(format!("`entries` must be a list, not {other}")),
    };
    let limit = match field(v, "limit", "limit") {
        None => None,
        Some(l) => Some(RateLimitOverride {
            requests_per_unit: u32::try_from(
                match field(l, "requestsPerUnit", "requests_per_unit") {
                    Some(n) => unsigned(n, "requestsPerUnit")?,
                    None => 0,
                },
            )
            .map_err(|_| "`requestsPerUnit` is past u32".to_string())?,
            unit: match field(l, "unit", "unit") {
                Some(Value::String(u)) => PbUnit::from_str_name(u).map_or(0, |u| u as i32),
                _ => 0,
            },
        }),
    };
    let hits_addend = match field(v, "hitsAddend", "hits_addend") {
        Some(h) => Some(UInt64Value {
            value: unsigned(h, "hitsAddend")?,
        }),
        None => None,
    };
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits: matches!(
            field(v, "isNegativeHits", "is_negative_hits"),
            Some(Value::Bool(true))
        ),
    })
}

/// The response as protobuf's JSON mapping writes it (lowerCamelCase, defaults left out,
/// enums by name, durations as seconds with an `s`).
fn response(r: &RateLimitResponse) -> Value {
    let code = |c: i32| Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name());
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code(r.overall_code)));
    let statuses: Vec<Value> = r.statuses.iter().map(|s| status(s, code)).collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers = (r.response_headers_to_add.iter())
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

fn status(s: &DescriptorStatus, code: impl Fn(i32) -> &'static str) -> Value {
    let mut out = Map::new();
    out.insert("code".into(), json!(code(s.code)));
    if let Some(l) = &s.current_limit {
        let mut limit = Map::new();
        if !l.name.is_empty() {
            limit.insert("name".into(), json!(l.name));
        }
        if l.requests_per_unit != 0 {
            limit.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
        }
        let unit = PbUnit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name());
        limit.insert("unit".into(), json!(unit));
        out.insert("currentLimit".into(), Value::Object(limit));
    }
    if s.limit_remaining != 0 {
        out.insert("limitRemaining".into(), json!(s.limit_remaining));
    }
    if let Some(d) = &s.duration_until_reset {
        // 0, 3, 6 or 9 fractional digits, as protobuf writes them.
        let mut text = format!("{}.{:09}", d.seconds, d.nanos);
        for _ in 0..3 {
            match text.strip_suffix("000") {
                Some(t) => text.truncate(t.len()),
                None => break,
            }
        }
        let text = format!("{}s", text.trim_end_matches('.'));
        out.insert("durationUntilReset".into(), json!(text));
    }
    Value::Object(out)
}
