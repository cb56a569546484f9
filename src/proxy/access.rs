//! Step 7 of the request path, *observe*: the access-log line, written last so it sees the
//! final status (target `tollgate::access`; `telemetry` buffers it and picks its file).
//! Envoy's rate limit service writes its calls' lines here too (`rls/service/log.rs`).

use std::net::IpAddr;
use std::time::Duration;

use tracing::info;

use crate::limit::Decision;

/// What one access-log line says about a request.
pub(crate) struct Access<'a> {
    pub route: &'a str,
    pub method: &'a http::Method,
    /// The canonical path, or the raw one when the request was refused before it was made
    /// canonical.
    pub path: &'a str,
    pub status: u16,
    pub took: Duration,
    pub client: IpAddr,
    /// The id the request was forwarded and answered with (`proxy::request_id`).
    pub request_id: &'a str,
    /// What the limit step decided; `None` for a request that never reached it (refused
    /// before routing, no route).
    pub decision: Option<&'a Decision>,
}

/// `took` in milliseconds to the microsecond, as logged: whole microseconds divided by
/// 1000 is the double nearest that decimal, which prints as it (`0.316`, not the
/// `0.31612300000000004` of seconds times 1000).
fn duration_ms(took: Duration) -> f64 {
    // Exact below 2^53 µs (285 years).
    took.as_micros() as f64 / 1e3
}

/// One access-log line: the request, its answer, and what the limit step decided
/// (`decision`, the deciding `policy` and its `key`, the other deciding policies' `keys`
/// space-separated, `retry_after` in whole seconds as the header says it).
pub(crate) fn access_log(a: &Access<'_>) {
    let decision = a.decision;
    let retry_after = decision
        .and_then(|d| d.retry_after)
        .map(|n| n.div_ceil(1_000_000_000));
    // Joined only when a route's second policy decided too (most have one).
    let others = decision
        .filter(|d| !d.others.is_empty())
        .map(|d| d.others.join(" "));
    info!(
        target: "tollgate::access",
        route = a.route,
        method = %a.method,
        path = a.path,
        status = a.status,
        duration_ms = duration_ms(a.took),
        duration_us = u64::try_from(a.took.as_micros()).unwrap_or(u64::MAX),
        client = %a.client,
        request_id = a.request_id,
        decision = decision.map(|d| d.outcome().as_str()),
        policy = decision.and_then(|d| d.policy.as_deref()),
        key = decision.and_then(|d| d.key.as_deref()),
        keys = others.as_deref(),
        retry_after,
    );
}
