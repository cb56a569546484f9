//! The limiter's entry point for a front end that knows its keys (Envoy's rate limit
//! service: a descriptor is a key, not a request to read one from). A "route" of policies
//! keyed `[Given]` is asked a list of `(policy, key, cost)` and walks the same sites as a
//! proxied request — all or nothing, shadow policies never changing the answer — and each
//! ask gets its own result back (the service answers per descriptor).

use std::num::NonZeroU32;
use std::ops::ControlFlow;
use std::time::Duration;

use super::{Limiter, LimiterError};
use crate::admission::{Admission, Answer};
use crate::algorithm::Verdict;
use crate::ask::{Ask, keeps};
use crate::check::{Check, Stop};
use crate::clock::Nanos;
use crate::cost::Price;
use crate::spec::{KeyPart, LimiterSpec, Mode, OnMissingKey};

/// One ask a caller states itself: policy `policy` (by name, keyed `[Given]`), counted
/// under `key`, spending `cost` cells.
#[derive(Debug, Clone, Copy)]
pub struct KeyAsk<'a> {
    pub policy: &'a str,
    pub key: &'a str,
    pub cost: NonZeroU32,
}

/// What [`Limiter::check_keys`] decided: the request's admission (admitted, denied, or the
/// store could not decide and the route fails closed) and each ask's own result, in the
/// order asked.
#[derive(Debug)]
pub struct Keyed {
    pub admission: Admission,
    pub asks: Vec<KeyResult>,
}

/// One ask's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyResult {
    /// Its policy admits a request of this cost (a shadow policy may say no without
    /// refusing anything: see `mode`); `true` when it was not decided.
    pub allowed: bool,
    /// The policy's effective mode on this route.
    pub mode: Mode,
    /// Its quota: cells per period.
    pub limit: u64,
    pub period: Duration,
    /// Cells left after this request (a refused request spent nothing, so what was left
    /// before it); `None` when the walk stopped before this ask was decided (another
    /// policy denied first) or the store failed and the route fails open.
    pub remaining: Option<u64>,
    /// Nanoseconds until its state is full again.
    pub reset_after: Nanos,
    /// When its policy said no: nanoseconds until a request of this cost would be admitted.
    pub retry_after: Option<Nanos>,
}

/// Why [`Limiter::check_keys`] could not ask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyAskError {
    #[error("no route `{0}`")]
    NoRoute(String),
    #[error("route `{route}` asks no policy `{policy}` keyed by a given key")]
    NoPolicy { route: String, policy: String },
}

impl Limiter {
    /// The index of route `name`, for [`Limiter::check_keys`].
    pub fn route_index(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| &*r.name == name)
    }

    /// Decide `asks` on route `route` (see the module doc). The same key of the same
    /// policy asked twice is one ask of their summed cost (two writes of one state in one
    /// walk would count one of them), and both get its result.
    pub async fn check_keys(
        &self,
        route: usize,
        asks: &[KeyAsk<'_>],
    ) -> Result<Keyed, KeyAskError> {
        let limits = self
            .routes
            .get(route)
            .ok_or_else(|| KeyAskError::NoRoute(route.to_string()))?;
        // Which merged ask answers each of the caller's.
        let mut of: Vec<usize> = Vec::with_capacity(asks.len());
        let mut merged: Vec<Ask> = Vec::with_capacity(asks.len());
        for a in asks {
            let found = limits.entries.iter().enumerate().find(|(_, e)| {
                let p = &self.sites.policies[e.policy];
                &*p.name == a.policy && p.key == [KeyPart::Given]
            });
            let Some((slot, entry)) = found else {
                return Err(KeyAskError::NoPolicy {
                    route: limits.name.to_string(),
                    policy: a.policy.to_owned(),
                });
            };
            let key = format!("{}:{}", a.policy, a.key);
            if let Some(i) = merged.iter().position(|m| m.slot == slot && m.key == key) {
                let m = &mut merged[i];
                m.cost = m.cost.saturating_add(a.cost.get());
                m.cheapest = false;
                of.push(i);
                continue;
            }
            let price = Price {
                cost: a.cost.get(),
                cheapest: a.cost.get() == 1,
                streamed: false,
            };
            of.push(merged.len());
            merged.push(Ask::new(*entry, slot, key, NonZeroU32::MIN, price));
        }
        if merged.is_empty() {
            return Ok(Keyed {
                admission: Admission::default(),
                asks: Vec::new(),
            });
        }
        let mut check = Check {
            sites: &self.sites,
            route: limits,
            route_name: &limits.name,
            asks: merged,
            held: Vec::new(),
            store_deadline: None,
        };
        let walked = if check.waits() {
            check.walk().await
        } else {
            check.local();
            ControlFlow::Continue(())
        };
        let results = self.results(&check);
        let admission = match walked {
            ControlFlow::Break(Stop::Refused(refused)) => {
                check.give_back_all();
                *refused
            }
            _ => check.end(),
        };
        let unavailable = matches!(admission.answer, Answer::Unavailable { .. });
        let asks = of
            .into_iter()
            .map(|i| match unavailable {
                // The store decided nothing: no figure of it is true.
                true => KeyResult {
                    remaining: None,
                    ..results[i]
                },
                false => results[i],
            })
            .collect();
        Ok(Keyed { admission, asks })
    }

    /// Each walked ask's result, before the check's end gives back what a refused
    /// request spent: such a spend is reported as given back.
    fn results(&self, check: &Check<'_>) -> Vec<KeyResult> {
        let enforce_ok = !check.blocked();
        let all_ok = (check.asks.iter()).all(|a| a.decided.is_none_or(|d| d.admitted()));
        check
            .asks
            .iter()
            .map(|ask| {
                let policy = &self.sites.policies[ask.entry.policy];
                let quota = policy.algorithm(ask.headroom).quota();
                let mut result = KeyResult {
                    allowed: true,
                    mode: ask.entry.mode,
                    limit: quota.limit,
                    period: quota.period,
                    remaining: None,
                    reset_after: 0,
                    retry_after: None,
                };
                let Some(d) = ask.decided.filter(|d| !d.error_open) else {
                    return result;
                };
                let given_back = d.committed && !keeps(ask.entry.mode, enforce_ok, all_ok);
                result.remaining = Some(match given_back {
                    true => (d.remaining + u64::from(ask.cost)).min(quota.limit),
                    false => d.remaining,
                });
                result.reset_after = d.reset_after;
                if let Verdict::Deny { retry_after } = d.verdict {
                    result.allowed = false;
                    result.retry_after = Some(retry_after.max(1));
                }
                result
            })
            .collect()
    }
}

/// A policy keyed `[Given]` is the whole key, never skipped for a missing part in a way
/// that spends (`shared`) or refuses (`deny`), and its route asks nothing else: the
/// proxy's requests never carry the caller's key, so on such a route they are asked
/// nothing; the caller's asks are the route's whole list.
pub(super) fn check_spec(spec: &LimiterSpec) -> Result<(), LimiterError> {
    let given = |p: &crate::spec::Policy| p.key.contains(&KeyPart::Given);
    for p in spec.policies.iter().filter(|p| given(p)) {
        if p.key != [KeyPart::Given] {
            return Err(LimiterError::Spec(format!(
                "policy `{}`: a given key is the whole key",
                p.name
            )));
        }
        if p.on_missing_key.is_some_and(|m| m != OnMissingKey::Skip) {
            return Err(LimiterError::Spec(format!(
                "policy `{}`: a given key is never missing (`on_missing_key` must be unset)",
                p.name
            )));
        }
    }
    for r in &spec.routes {
        let n = r
            .policies
            .iter()
            .filter(|&&i| given(&spec.policies[i]))
            .count();
        if n > 0 && (n != r.policies.len() || r.require_account) {
            return Err(LimiterError::Spec(format!(
                "route `{}`: a route of given-key policies asks nothing else",
                r.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
