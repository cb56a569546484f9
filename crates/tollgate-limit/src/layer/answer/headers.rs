//! Rate-limit answers: the 429 and the draft-ietf-httpapi-ratelimit-headers fields.
//!
//! `RateLimit-Policy: "per_ip";q=100;w=1` and `RateLimit: "per_ip";r=57;t=1` are
//! Structured Field Lists (RFC 9651) with one item per enforcing policy that applied.
//! `Retry-After` (RFC 9110 §10.2.3) on a 429 names the same moment as the largest `t`.

use std::cell::RefCell;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};

use super::problem_of;
use crate::PolicyReport;
use crate::algorithm::{NEVER, QuotaInfo};
use crate::clock::Nanos;
use crate::layer::body::ResponseBody;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The draft's problem type for a request over quota (IANA HTTP Problem Types registry).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The draft's problem type for a temporary reduction in capacity: tollgate's 503 when the
/// store cannot decide and the route fails closed.
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// `[response]`: which rate-limit headers answers carry (the gateway's config key; the
/// layer's too). The default is the draft's two fields on every limited response.
#[derive(Debug, Clone, Copy)]
pub struct ResponseHeaders {
    /// Where `RateLimit-Policy` / `RateLimit` appear.
    pub headers: HeadersWhere,
    /// Also send `X-RateLimit-Limit` / `-Remaining` / `-Reset` for older clients.
    pub legacy_headers: bool,
}

impl Default for ResponseHeaders {
    fn default() -> Self {
        ResponseHeaders {
            headers: HeadersWhere::All,
            legacy_headers: false,
        }
    }
}

/// `response.headers` (a config key: the names are the user-facing contract).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadersWhere {
    /// On every response of a route with policies.
    #[default]
    All,
    /// Only on 429s.
    Denied,
    /// Never.
    None,
}

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Whole seconds, rounded up.
pub fn ceil_secs(n: Nanos) -> u64 {
    n.div_ceil(NANOS_PER_SEC)
}

/// `q` and `w`: the window in whole seconds (at least 1), and the quota scaled to it when
/// the period is not a whole number of seconds (rounded down, never promising more).
pub fn quota_q_w(q: &QuotaInfo) -> (u64, Option<u64>) {
    let period = q.period.as_nanos() as u64;
    if period == 0 {
        return (q.limit, None); // concurrency: no window
    }
    let w = ceil_secs(period).max(1);
    let scaled = (q.limit as u128 * (w * NANOS_PER_SEC) as u128 / period as u128) as u64;
    (scaled, Some(w))
}

/// True for a wait no amount of waiting ends: the algorithms' [`NEVER`] (a cost above
/// what the state can ever hold, e.g. above a node's `burst / N` share), or anything within
/// a factor of two of it (centuries), which no client should be told to sleep.
pub fn is_never(wait: Nanos) -> bool {
    wait >= NEVER / 2
}

/// The `t` of one item: for a denying policy its wait (≥ 1 s); otherwise the draft's
/// "seconds until additional quota is made available", i.e. until `r` grows by one (0 when
/// the quota is full). A denial that waiting never ends has no wait to give: its `t` is
/// that of an allowed item.
fn t_of(r: &PolicyReport) -> u64 {
    match r.retry_after {
        Some(wait) if !is_never(wait) => ceil_secs(wait).max(1),
        _ => ceil_secs(r.next_after.min(NEVER / 2)),
    }
}

/// An sf-string: the policy name in quotes, `"` and `\\` escaped (names are validated ASCII;
/// neither byte occurs inside a UTF-8 sequence, so escaping bytes is escaping characters).
fn sf_string(out: &mut Line, s: &str) {
    out.put(b"\"");
    if s.bytes().any(|b| b == b'"' || b == b'\\') {
        for b in s.bytes() {
            if b == b'"' || b == b'\\' {
                out.put(b"\\");
            }
            out.put(&[b]);
        }
    } else {
        out.put(s.as_bytes());
    }
    out.put(b"\"");
}

/// `;NAME=:BASE64:`, an sf-binary parameter (RFC 9651 §3.3.5: standard alphabet, padded).
fn sf_bytes(out: &mut Line, name: &str, bytes: &[u8]) {
    use base64::Engine;
    out.put(b";");
    out.put(name.as_bytes());
    out.put(b"=:");
    let mut encoded = [0u8; 24]; // 16 bytes: 24 characters, padded
    match base64::engine::general_purpose::STANDARD.encode_slice(bytes, &mut encoded) {
        Ok(n) => out.put(&encoded[..n]),
        Err(_) => out.put(
            base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .as_bytes(),
        ),
    }
    out.put(b":");
}

/// `;NAME=N`, an sf-integer parameter (`NAME` with its `;` and `=`: `b";q="`).
fn sf_int(out: &mut Line, digits: &mut itoa::Buffer, name: &[u8], n: u64) {
    out.put(name);
    out.put(digits.format(n).as_bytes());
}

/// Add the rate-limit headers for `report` where `[response] headers` allows them.
pub fn add_headers(
    headers: &mut HeaderMap,
    report: &[PolicyReport],
    cfg: &ResponseHeaders,
    denied: bool,
) {
    if !shown(report, cfg, denied) {
        return;
    }
    add_draft_headers(headers, report);
    if cfg.legacy_headers {
        add_legacy_headers(headers, report);
    }
}

/// The draft's two fields of a denial alone, where `[response] headers` allows them: a
/// gRPC answer's (gRPC clients read headers too; the legacy trio stays HTTP's).
pub(crate) fn add_denied_draft_headers(
    headers: &mut HeaderMap,
    report: &[PolicyReport],
    cfg: &ResponseHeaders,
) {
    if shown(report, cfg, true) {
        add_draft_headers(headers, report);
    }
}

/// Whether a response carries the rate-limit headers of `report`.
fn shown(report: &[PolicyReport], cfg: &ResponseHeaders, denied: bool) -> bool {
    !report.is_empty()
        && match cfg.headers {
            HeadersWhere::All => true,
            HeadersWhere::Denied => denied,
            HeadersWhere::None => false,
        }
}

/// `RateLimit-Policy` and `RateLimit`: one item per enforcing policy. Every limited
/// response carries them, so they are written as bytes, numbers by `itoa`: `String`s grown
/// by `write!` cost ~2 000 instructions a request (callgrind, a route with one local
/// policy), more than the policy's own check. `RateLimit-Policy` says only what the
/// policies are, the same on every response of a route: it is taken from [`LAST_POLICY`],
/// and so is the start of each `RateLimit` item (`"NAME";r=`).
fn add_draft_headers(headers: &mut HeaderMap, report: &[PolicyReport]) {
    let mut state = Line::new();
    let mut digits = itoa::Buffer::new();
    let policy = LAST_POLICY.with_borrow_mut(|last| {
        let memo = match last {
            Some(memo) if memo.is_for(report) => memo,
            _ => last.insert(PolicyMemo::of(report)?),
        };
        for (i, (r, item)) in report.iter().zip(&memo.items).enumerate() {
            if i > 0 {
                state.put(b", ");
            }
            state.put(&item.named);
            state.put(digits.format(remaining(r)).as_bytes());
            state.put(b";t=");
            state.put(digits.format(t_of(r)).as_bytes());
            if let Some(pk) = &r.partition {
                sf_bytes(&mut state, "pk", pk);
            }
        }
        Some(memo.value.clone())
    });
    // A name no header can carry (names are validated: never) gets neither field.
    let (Some(policy), Ok(state)) = (policy, HeaderValue::from_bytes(state.bytes())) else {
        return;
    };
    headers.insert(RATELIMIT_POLICY.clone(), policy);
    headers.insert(RATELIMIT.clone(), state);
}

fn write_policy(report: &[PolicyReport]) -> Line {
    let mut policy = Line::new();
    let mut digits = itoa::Buffer::new();
    for (i, r) in report.iter().enumerate() {
        if i > 0 {
            policy.put(b", ");
        }
        let (q, w) = quota_q_w(&r.quota);
        sf_string(&mut policy, &r.name);
        sf_int(&mut policy, &mut digits, b";q=", q);
        match w {
            Some(w) => sf_int(&mut policy, &mut digits, b";w=", w),
            // A concurrency limit counts requests in flight, over no window.
            None => policy.put(b";qu=\"concurrent-requests\""),
        }
        if let Some(pk) = &r.partition {
            sf_bytes(&mut policy, "pk", pk);
        }
    }
    policy
}

thread_local! {
    /// The `RateLimit-Policy` value this worker thread wrote last, and what it was written
    /// of. Why: the value depends on the policies alone (name, quota, an account's
    /// partition), so a route's responses repeat it; kept, it is a reference count's
    /// increment instead of writing, validating and copying it again, and an allocation
    /// less (`benches/instructions.sh`: the headers' part of a request in BENCHMARKS.md).
    /// Why a thread's memo and not a value built at config load: the report names its
    /// policies by name, and a policy's quota differs by the client's headroom
    /// (`[client_ip] shared_ranges`) and its `pk` by account; the memo compares exactly
    /// what the value is written of, so it can never be stale, and a reload needs no hook.
    /// It holds the names it was written for (`Arc`) and no request's data but the last
    /// account's `pk`, which that response carried.
    static LAST_POLICY: RefCell<Option<PolicyMemo>> = const { RefCell::new(None) };
}

/// A `RateLimit-Policy` value and the items it was written of.
struct PolicyMemo {
    items: Vec<PolicyItem>,
    value: HeaderValue,
}

/// What a `RateLimit-Policy` item is written of, and the start of its `RateLimit` item.
struct PolicyItem {
    name: Arc<str>,
    quota: QuotaInfo,
    partition: Option<[u8; 16]>,
    /// `"NAME";r=`: the name as an sf-string, written once.
    named: Box<[u8]>,
}

impl PolicyItem {
    fn of(r: &PolicyReport) -> Self {
        let mut named = Line::new();
        sf_string(&mut named, &r.name);
        named.put(b";r=");
        PolicyItem {
            name: r.name.clone(),
            quota: r.quota,
            partition: r.partition,
            named: named.bytes().into(),
        }
    }
}

impl PolicyMemo {
    /// `report`'s value and items, written now; `None` for a value no header can carry.
    fn of(report: &[PolicyReport]) -> Option<Self> {
        Some(PolicyMemo {
            value: HeaderValue::from_bytes(write_policy(report).bytes()).ok()?,
            items: report.iter().map(PolicyItem::of).collect(),
        })
    }

    /// Written of the same items as `report` would be (names compared by pointer first:
    /// the same policy's report shares its name's `Arc`).
    fn is_for(&self, report: &[PolicyReport]) -> bool {
        self.items.len() == report.len()
            && self.items.iter().zip(report).all(|(m, r)| {
                m.quota == r.quota
                    && m.partition == r.partition
                    && (Arc::ptr_eq(&m.name, &r.name) || m.name == r.name)
            })
    }
}

/// A header value being written: on the stack for the usual one to three items, on the
/// heap past that. The one copy into the `HeaderValue` is its one allocation. By hand over
/// `arrayvec` rather than `SmallVec`: `SmallVec::extend_from_slice` goes through its
/// general `insert_from_slice` (~50 instructions a call, a dozen calls a response).
struct Line {
    stack: arrayvec::ArrayVec<u8, 192>,
    heap: Vec<u8>,
}

impl Line {
    fn new() -> Self {
        Line {
            stack: arrayvec::ArrayVec::new(),
            heap: Vec::new(),
        }
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if self.heap.is_empty() {
            if self.stack.try_extend_from_slice(bytes).is_ok() {
                return;
            }
            self.heap.extend_from_slice(&self.stack);
        }
        self.heap.extend_from_slice(bytes);
    }

    fn bytes(&self) -> &[u8] {
        match self.heap.is_empty() {
            true => &self.stack,
            false => &self.heap,
        }
    }
}

/// The legacy `X-RateLimit-*` trio describes one policy: the one closest to denying.
fn add_legacy_headers(headers: &mut HeaderMap, report: &[PolicyReport]) {
    let Some(tightest) = report.iter().min_by_key(|r| match r.retry_after {
        Some(_) => 0,
        None => r.remaining.saturating_add(1),
    }) else {
        return;
    };
    let (q, _) = quota_q_w(&tightest.quota);
    let trio = [
        ("x-ratelimit-limit", q),
        ("x-ratelimit-remaining", remaining(tightest)),
        ("x-ratelimit-reset", t_of(tightest)),
    ];
    for (name, value) in trio {
        headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
    }
}

/// `r`: 0 for the policy that denied.
fn remaining(r: &PolicyReport) -> u64 {
    if r.retry_after.is_some() {
        0
    } else {
        r.remaining
    }
}

/// A denial's `Retry-After` in seconds: the longest wait of the denying policies, rounded
/// up. `None` when a denying policy can never admit this request (its cost is more than
/// the state can hold): any number would be either a lie or 584 years, and a client told
/// to retry would retry forever.
pub fn retry_after(report: &[PolicyReport]) -> Option<u64> {
    let wait = (report.iter())
        .filter_map(|r| r.retry_after)
        .max()
        .unwrap_or(NANOS_PER_SEC);
    (!is_never(wait)).then(|| ceil_secs(wait).max(1))
}

/// The 429 for a denied request: problem body naming the denying policies and the wait
/// (`retry_after`, from [`retry_after`]; without one the body says retrying will not help).
pub fn too_many_requests(
    report: &[PolicyReport],
    retry_after: Option<u64>,
    cfg: &ResponseHeaders,
    request_id: Option<&str>,
) -> Response<ResponseBody> {
    let names: Vec<&str> = (report.iter())
        .filter(|r| r.retry_after.is_some())
        .map(|r| &*r.name)
        .collect();
    let detail = match retry_after {
        Some(secs) => format!(
            "rate limit exceeded ({}); retry in {secs} s",
            names.join(", ")
        ),
        None => format!(
            "rate limit exceeded ({}); this request costs more than the limit can ever \
             admit here, so retrying will not help",
            names.join(", ")
        ),
    };
    let body = Denied {
        detail: &detail,
        policies: &names,
        policy: names.first().copied().unwrap_or(""),
        request_id,
        retry_after,
        status: 429,
        title: "Too Many Requests",
        kind: QUOTA_EXCEEDED,
        violated: &names,
    };
    let mut resp = problem_of(StatusCode::TOO_MANY_REQUESTS, &body);
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    add_headers(resp.headers_mut(), report, cfg, true);
    resp
}

/// A 429's problem body. The draft's problem type and member (`violated-policies`);
/// `policy`, `policies` and `retry_after` stay for clients written against earlier
/// tollgate versions. A struct serialized as it is, not a `json!` map: the map cost every
/// 429 a tree of nine members built, sorted and dropped (~1 200 instructions for the
/// `request_id` member alone, callgrind). Members in the order the map wrote them.
#[derive(serde::Serialize)]
struct Denied<'a> {
    detail: &'a str,
    policies: &'a [&'a str],
    policy: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    retry_after: Option<u64>,
    status: u16,
    title: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(rename = "violated-policies")]
    violated: &'a [&'a str],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn report(
        name: &str,
        limit: u64,
        period_ms: u64,
        remaining: u64,
        reset_ms: u64,
        retry_ms: Option<u64>,
    ) -> PolicyReport {
        PolicyReport {
            name: Arc::from(name),
            quota: QuotaInfo {
                limit,
                period: Duration::from_millis(period_ms),
            },
            remaining,
            reset_after: reset_ms * 1_000_000,
            next_after: reset_ms * 1_000_000,
            retry_after: retry_ms.map(|m| m * 1_000_000),
            partition: None,
        }
    }

    #[test]
    fn concurrency_says_its_unit_and_accounts_their_partition() {
        let mut h = HeaderMap::new();
        let mut acct = report("per_acct", 10, 60_000, 9, 6_000, None);
        acct.partition = Some([0xfb; 16]);
        let r = [acct, report("inflight", 4, 0, 3, 0, None)];
        add_headers(&mut h, &r, &all(), false);
        let pk = "pk=:+/v7+/v7+/v7+/v7+/v7+w==:";
        assert_eq!(
            h["ratelimit-policy"],
            format!("\"per_acct\";q=10;w=60;{pk}, \"inflight\";q=4;qu=\"concurrent-requests\"")
                .as_str()
        );
        assert_eq!(
            h["ratelimit"],
            format!("\"per_acct\";r=9;t=6;{pk}, \"inflight\";r=3;t=0").as_str()
        );
    }

    fn all() -> ResponseHeaders {
        ResponseHeaders {
            headers: HeadersWhere::All,
            legacy_headers: true,
        }
    }

    #[test]
    fn headers_match_the_draft_examples() {
        let mut h = HeaderMap::new();
        let r = [
            report("per_ip", 100, 1000, 57, 430, None),
            report("per_account_login", 5, 60_000, 0, 0, Some(41_200)),
        ];
        add_headers(&mut h, &r, &all(), true);
        assert_eq!(
            h["ratelimit-policy"],
            "\"per_ip\";q=100;w=1, \"per_account_login\";q=5;w=60"
        );
        assert_eq!(
            h["ratelimit"],
            "\"per_ip\";r=57;t=1, \"per_account_login\";r=0;t=42"
        );
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-limit"], "5");
    }

    /// The thread's last `RateLimit-Policy` value is taken again only for the same items:
    /// another quota (a client's headroom), partition or policy of the same name is
    /// written anew, and the first value again after it.
    #[test]
    fn the_kept_policy_value_is_never_another_reports() {
        let policy_of = |r: &[PolicyReport]| {
            let mut h = HeaderMap::new();
            add_headers(&mut h, r, &all(), false);
            h["ratelimit-policy"].to_str().unwrap().to_owned()
        };
        let base = report("per_ip", 100, 1000, 57, 430, None);
        let doubled = report("per_ip", 200, 1000, 57, 430, None);
        let mut acct = report("per_ip", 100, 1000, 57, 430, None);
        acct.partition = Some([0; 16]);
        let two = [base.clone(), report("b", 5, 60_000, 0, 0, None)];
        assert_eq!(
            policy_of(std::slice::from_ref(&base)),
            "\"per_ip\";q=100;w=1"
        );
        assert_eq!(
            policy_of(std::slice::from_ref(&base)),
            "\"per_ip\";q=100;w=1"
        );
        assert_eq!(
            policy_of(std::slice::from_ref(&doubled)),
            "\"per_ip\";q=200;w=1"
        );
        assert_eq!(
            policy_of(std::slice::from_ref(&acct)),
            "\"per_ip\";q=100;w=1;pk=:AAAAAAAAAAAAAAAAAAAAAA==:"
        );
        assert_eq!(policy_of(&two), "\"per_ip\";q=100;w=1, \"b\";q=5;w=60");
        assert_eq!(policy_of(&two[..1]), "\"per_ip\";q=100;w=1");
    }

    /// Values longer than the stack's line are written whole.
    #[test]
    fn long_values_spill_whole() {
        let name = "n".repeat(150);
        let r = [
            report(&name, 7, 1000, 3, 0, None),
            report("b", 5, 1000, 4, 0, None),
        ];
        let mut h = HeaderMap::new();
        add_headers(&mut h, &r, &all(), false);
        assert_eq!(
            h["ratelimit"],
            format!("\"{name}\";r=3;t=0, \"b\";r=4;t=0").as_str()
        );
        assert_eq!(
            h["ratelimit-policy"],
            format!("\"{name}\";q=7;w=1, \"b\";q=5;w=1").as_str()
        );
    }

    #[test]
    fn sub_second_periods_scale_q() {
        assert_eq!(
            quota_q_w(&QuotaInfo {
                limit: 10,
                period: Duration::from_millis(500)
            }),
            (20, Some(1))
        );
        assert_eq!(
            quota_q_w(&QuotaInfo {
                limit: 10,
                period: Duration::from_millis(1500)
            }),
            (13, Some(2))
        );
        assert_eq!(
            quota_q_w(&QuotaInfo {
                limit: 3,
                period: Duration::ZERO
            }),
            (3, None)
        );
    }

    #[test]
    fn retry_after_is_the_largest_wait_rounded_up() {
        let r = [
            report("a", 1, 1000, 0, 0, Some(1)),
            report("b", 1, 1000, 0, 0, Some(2_300)),
        ];
        let resp = too_many_requests(
            &r,
            retry_after(&r),
            &ResponseHeaders {
                headers: HeadersWhere::None,
                legacy_headers: false,
            },
            None,
        );
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], "3");
        assert!(resp.headers().get("ratelimit").is_none());
    }

    #[test]
    fn a_never_wait_is_not_sent_as_a_number() {
        let mut r = report("split", 10, 1000, 0, 400, None);
        r.retry_after = Some(NEVER);
        let r = [r];
        let resp = too_many_requests(&r, retry_after(&r), &all(), None);
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(resp.headers().get("retry-after").is_none());
        assert_eq!(resp.headers()["ratelimit"], "\"split\";r=0;t=1");
        assert_eq!(resp.headers()["x-ratelimit-reset"], "1");
    }
}
