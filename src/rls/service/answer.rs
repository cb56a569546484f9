//! One `ShouldRateLimit` call answered: each descriptor matched (`RlsConfig::apply`:
//! `replaces` across them), every counted one asked of the limiter at once
//! (`Limiter::check_keys`: the request spends only if every enforcing rule allows it), and
//! the answer written per descriptor as envoyproxy/ratelimit writes it: `code`,
//! `current_limit`, `limit_remaining`, `duration_until_reset` (on OVER_LIMIT, the wait until
//! a request of that cost would pass), the `overall_code`, and with `[rls] headers` the
//! draft RateLimit headers of the descriptor closest to its limit.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tonic::Status;

use super::{RlsState, bounds};
use crate::limit::clock::Nanos;
use crate::limit::spec::Mode;
use crate::limit::{Answer, Decision, KeyAsk, KeyAskError, KeyResult, Keyed};
use crate::rls::{Applied, Descriptor, Entry, Unit};
use crate::rls::{OnStoreError, Served};

/// Logged once per process: Envoy sent a descriptor `limit` override, which is not applied.
static OVERRIDE_WARNED: AtomicBool = AtomicBool::new(false);

impl RlsState {
    /// The answer to `req`, or the gRPC error it gets; and what the limiter decided, for the
    /// access log (`None` when it was not asked).
    pub(super) async fn decide(&self, req: &RateLimitRequest) -> Decided {
        // A reload swaps the limiter, then the YAML: a call between the two may find a rule
        // the limiter does not have yet (or no longer), and is asked again on both new.
        match self.decide_once(req).await {
            Err(Retry) => self.decide_once(req).await.unwrap_or_else(|Retry| {
                let status =
                    Status::unavailable("the rate limit config is being reloaded: try again");
                (Err(status), None)
            }),
            Ok(decided) => decided,
        }
    }

    async fn decide_once(&self, req: &RateLimitRequest) -> Result<Decided, Retry> {
        let served = self.served.load_full();
        if let Err(status) = bounds::check(req, &served.bounds) {
            return Ok((Err(status), None));
        }
        let entries: Vec<Vec<Entry<'_>>> = (req.descriptors.iter())
            .map(|d| {
                (d.entries.iter())
                    .map(|e| Entry {
                        key: &e.key,
                        value: &e.value,
                    })
                    .collect()
            })
            .collect();
        if req.descriptors.iter().any(|d| d.limit.is_some())
            && !OVERRIDE_WARNED.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                domain = %req.domain,
                "a descriptor carries a `limit` override (Envoy's per-request limit): tollgate does not apply overrides yet and answers with the YAML's rule (logged once)"
            );
        }
        // Overrides are not applied (above): each descriptor gets the YAML's rule.
        let descriptors: Vec<Descriptor<'_>> = (entries.iter())
            .map(|e| Descriptor {
                entries: e,
                limit: None,
            })
            .collect();
        let applied = served.yaml.apply(&req.domain, &descriptors);
        let costs: Vec<NonZeroU32> = (req.descriptors.iter())
            .map(|d| {
                let hits = d
                    .hits_addend
                    .map_or(u64::from(req.hits_addend), |h| h.value);
                // 0 means 1, as Envoy and ratelimit read it.
                NonZeroU32::new(u32::try_from(hits).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN)
            })
            .collect();
        // Each counted descriptor's key; a rule of 0 per unit refuses without asking.
        let mut keys: Vec<Option<String>> = vec![None; applied.len()];
        let mut zero_refuses = false;
        for (i, a) in applied.iter().enumerate() {
            let Applied::Limited(m) = a else { continue };
            match m.rule().limit {
                Some(l) if l.requests_per_unit == 0 => zero_refuses |= !m.rule().shadow_mode,
                _ => keys[i] = Some(m.key(&req.domain, &descriptors[i])),
            }
        }
        let asks: Vec<(usize, KeyAsk<'_>)> = (applied.iter().enumerate())
            .filter_map(|(i, a)| match (a, &keys[i]) {
                (Applied::Limited(m), Some(key)) => Some((
                    i,
                    KeyAsk {
                        policy: &m.rule().policy,
                        key,
                        cost: costs[i],
                    },
                )),
                _ => None,
            })
            .collect();
        let keyed = match (zero_refuses, asks.is_empty()) {
            (false, false) => Some(self.ask(&req.domain, &asks).await?),
            _ => None,
        };
        let domain = served.domains.get(&req.domain);
        let unavailable = keyed
            .as_ref()
            .is_some_and(|k| matches!(k.admission.answer, Answer::Unavailable { .. }));
        let decision = keyed.as_ref().map(|k| k.admission.decision.clone());
        if unavailable && domain.is_some_and(|d| d.on_store_error == OnStoreError::Error) {
            let status =
                Status::unavailable("the store could not decide (on_store_error = \"error\")");
            return Ok((Err(status), decision));
        }
        let result = |i: usize| {
            let at = asks.iter().position(|(d, _)| *d == i)?;
            keyed.as_ref().map(|k| k.asks[at])
        };
        let statuses: Vec<DescriptorStatus> = (applied.iter().enumerate())
            .map(|(i, a)| status(a, result(i), unavailable))
            .collect();
        Ok((Ok(response(statuses, &served)), decision))
    }

    /// The limiter's decision on `asks` (the descriptors' indexes beside them).
    async fn ask(&self, domain: &str, asks: &[(usize, KeyAsk<'_>)]) -> Result<Keyed, Retry> {
        let limiter = self.limiter.current();
        let route = limiter.route_index(domain).ok_or(Retry)?;
        let asks: Vec<KeyAsk<'_>> = asks.iter().map(|(_, a)| *a).collect();
        match limiter.check_keys(route, &asks).await {
            Ok(keyed) => Ok(keyed),
            Err(KeyAskError::NoRoute(_) | KeyAskError::NoPolicy { .. }) => Err(Retry),
        }
    }
}

/// The limiter and the YAML disagreed (a reload between them): ask again.
struct Retry;

/// A call's answer (or gRPC error) and the limiter's decision, when it was asked.
pub(super) type Decided = (Result<RateLimitResponse, Status>, Option<Decision>);

/// One descriptor's status: `result` is its ask's, when it was asked; `unavailable`: the
/// store could not decide and the domain fails closed.
fn status(applied: &Applied<'_>, result: Option<KeyResult>, unavailable: bool) -> DescriptorStatus {
    let ok = |remaining: u32| DescriptorStatus {
        code: Code::Ok as i32,
        limit_remaining: remaining,
        ..DescriptorStatus::default()
    };
    let m = match applied {
        Applied::NoRule | Applied::Replaced(_) => return ok(0),
        Applied::Unlimited(_) => return ok(u32::MAX),
        Applied::Limited(m) => m,
    };
    let rule = m.rule();
    let Some(limit) = rule.limit else {
        return ok(u32::MAX);
    };
    let current_limit = Some(RateLimit {
        name: rule.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit: unit(limit.unit) as i32,
    });
    let shadow = rule.shadow_mode;
    let (over, remaining, wait) = match result {
        _ if limit.requests_per_unit == 0 => (!shadow, 0, None),
        Some(_) if unavailable => (!shadow, 0, None),
        Some(r) => {
            let over = !r.allowed && r.mode == Mode::Enforce;
            let unit = u64::try_from(limit.period().as_nanos()).unwrap_or(u64::MAX);
            // Bounded as envoyproxy/ratelimit's window is, which Envoy passes on as
            // `x-ratelimit-reset`: on OK, the time until the rule's whole limit is back, at
            // most one unit (a sliding window's older requests may weigh a little past it);
            // on OVER_LIMIT, the wait for a request of this cost, at most two units (no
            // algorithm waits longer for a request the limit can hold; one costing more
            // than the limit never passes, and is not told to wait for ages).
            let wait = if over {
                r.retry_after.map(|w| w.min(unit.saturating_mul(2)))
            } else {
                Some(r.reset_after.min(unit))
            };
            (over, r.remaining.unwrap_or(0), wait)
        }
        // Not asked: another descriptor's rule of 0 refused the request first.
        None => (false, 0, None),
    };
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit,
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: wait.map(duration),
        ..DescriptorStatus::default()
    }
}

/// The whole answer: OVER_LIMIT when any descriptor is.
fn response(statuses: Vec<DescriptorStatus>, served: &Served) -> RateLimitResponse {
    let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
    let headers = match served.headers {
        true => ratelimit_headers(&statuses),
        false => Vec::new(),
    };
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: headers,
        ..RateLimitResponse::default()
    }
}

/// The draft RateLimit headers as envoyproxy/ratelimit writes them, of the counted
/// descriptor with the fewest requests left: `RateLimit-Limit: N, N;w=SECONDS`,
/// `RateLimit-Remaining`, `RateLimit-Reset` (whole seconds, rounded up).
fn ratelimit_headers(statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
    let Some((s, limit)) = (statuses.iter())
        .filter_map(|s| Some((s, s.current_limit.as_ref()?)))
        .min_by_key(|(s, _)| s.limit_remaining)
    else {
        return Vec::new();
    };
    let window = PbUnit::try_from(limit.unit).map_or(0, |u| match u {
        PbUnit::Second => 1,
        PbUnit::Minute => 60,
        PbUnit::Hour => 3600,
        PbUnit::Day => 86_400,
        PbUnit::Week => 7 * 86_400,
        PbUnit::Month => 30 * 86_400,
        PbUnit::Year => 365 * 86_400,
        PbUnit::Unknown => 0,
    });
    let reset = s
        .duration_until_reset
        .map_or(0, |d| d.seconds + i64::from(d.nanos > 0));
    let header = |key: &str, value: String| HeaderValue {
        key: key.into(),
        value,
        ..HeaderValue::default()
    };
    let n = limit.requests_per_unit;
    vec![
        header("RateLimit-Limit", format!("{n}, {n};w={window}")),
        header("RateLimit-Remaining", s.limit_remaining.to_string()),
        header("RateLimit-Reset", reset.to_string()),
    ]
}

fn unit(u: Unit) -> PbUnit {
    match u {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

fn duration(n: Nanos) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(n / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from(n % 1_000_000_000).unwrap_or(0),
    }
}
