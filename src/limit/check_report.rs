//! The limit step's last act: what was decided becomes the request's [`Admission`] (the
//! report behind the rate-limit headers, the leaky-bucket delay, the permits), and every
//! decision is counted and, for shadow denials, logged.

use super::admission::{Admission, Decision, Outcome as Decided, PolicyReport};
use super::algorithm::Verdict;
use super::check::Check;
use super::clock::Nanos;
use super::metrics::Outcome;
use super::permit::Permits;
use super::policy::AnyAlgorithm;
use crate::config::{KeyPart, Mode};

impl Check<'_> {
    /// Metrics, shadow logs and the report of what was decided. Last: the deciding key is
    /// moved out for the access log.
    pub(super) fn report(&mut self, permits: Permits) -> Admission {
        let mut admission = Admission {
            permits,
            ..Admission::default()
        };
        // The deciding ask, by rank: an enforcing denial, a shadow denial, the longest
        // delay, the first that applied (`decision`).
        let mut deciding: Option<(u8, u64, usize, Option<Nanos>)> = None;
        for (i, ask) in self.asks.iter().enumerate() {
            let Some(d) = ask.decided else { continue };
            let policy = &self.sites.policies[ask.entry.policy];
            let counters = &self.route.counters[ask.slot];
            if d.error_open {
                counters.count_store_error(true);
                continue;
            }
            let outcome = match (d.admitted(), ask.entry.mode) {
                (true, _) => Outcome::Allow,
                (false, Mode::Shadow) => Outcome::ShadowDeny,
                (false, _) => Outcome::Deny,
            };
            let (rank, wait) = match (outcome, d.verdict) {
                (Outcome::Deny, _) => (3, 0),
                (Outcome::ShadowDeny, _) => (2, 0),
                (_, Verdict::Delay(delay)) if delay > 0 => (1, delay),
                _ => (0, 0),
            };
            let retry = match d.verdict {
                Verdict::Deny { retry_after } if outcome == Outcome::Deny => {
                    Some(retry_after.max(1))
                }
                _ => None,
            };
            if deciding.is_none_or(|(r, w, ..)| (rank, wait) > (r, w)) {
                deciding = Some((rank, wait, i, retry));
            }
            counters.count(outcome);
            (self.sites.top).record(ask.entry.policy, &ask.key, outcome, ask.entry.mode);
            if outcome == Outcome::ShadowDeny {
                self.sites
                    .log_shadow_denial(policy, self.route_name, &ask.key);
            }
            if !ask.enforcing() {
                continue;
            }
            let retry_after = match d.verdict {
                Verdict::Allow => None,
                Verdict::Delay(delay) => {
                    admission.delay = admission.delay.max(delay);
                    None
                }
                Verdict::Deny { retry_after } => Some(retry_after.max(1)),
            };
            admission.denied |= retry_after.is_some();
            let algorithm = policy.algorithm(ask.headroom);
            admission.report.push(PolicyReport {
                name: policy.label.clone(),
                quota: algorithm.quota(),
                remaining: d.remaining,
                reset_after: d.reset_after,
                next_after: d
                    .next_after
                    .unwrap_or_else(|| next_from_reply(algorithm, d.reset_after)),
                retry_after,
                partition: partition(&policy.key, &ask.key),
            });
        }
        if admission.denied {
            admission.delay = 0;
            admission.permits = Permits::default();
        }
        if let Some((rank, _, i, retry_after)) = deciding {
            let outcome = [
                Decided::Allow,
                Decided::Delay,
                Decided::ShadowDeny,
                Decided::Deny,
            ];
            let others = (self.asks.iter_mut().enumerate())
                .filter(|(j, a)| *j != i && a.decided.is_some())
                .map(|(_, a)| std::mem::take(&mut a.key))
                .collect();
            let ask = &mut self.asks[i];
            admission.decision = Decision {
                outcome: outcome[usize::from(rank)],
                policy: Some(self.sites.policies[ask.entry.policy].label.clone()),
                key: Some(std::mem::take(&mut ask.key)),
                retry_after,
                others,
            };
        }
        admission
    }
}

/// Until one more cell, from a decision that gives only the time until full (a denial that
/// waiting never ends, whose `t` is then this): for the rate
/// algorithms a cell comes every `T = period / limit` and the state is full at
/// `reset_after`, so one comes after `reset_after mod T` (T when that is 0). Exact for gcra
/// and token_bucket; a leaky bucket whose `max_delay` is not a multiple of T gains its
/// slot up to T later. A sliding window's gain depends on its two counts, which the reply
/// does not carry: its `t` stays the time until full, the one bound the reply gives.
fn next_from_reply(algorithm: &AnyAlgorithm, reset_after: Nanos) -> Nanos {
    let q = algorithm.quota();
    let period = q.period.as_nanos();
    if reset_after == 0 || period == 0 || q.limit == 0 || algorithm.is_sliding_window() {
        return reset_after;
    }
    // In units of 1/limit ns, T is `period` exactly.
    let rem = (u128::from(reset_after) * u128::from(q.limit)) % period;
    let next = if rem == 0 { period } else { rem };
    u64::try_from(next.div_ceil(u128::from(q.limit))).map_or(reset_after, |n| n.min(reset_after))
}

/// The `pk` of an account-keyed policy's key: the account's keyed hash (`acct:` and 32
/// hex digits in the key, after a part separator, `keys.rs`) as 16 bytes; `None` for other
/// keys.
fn partition(parts: &[KeyPart], key: &str) -> Option<[u8; 16]> {
    if !parts.contains(&KeyPart::Account) {
        return None;
    }
    let hex = key.split(":acct:").nth(1)?.get(..32)?;
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
