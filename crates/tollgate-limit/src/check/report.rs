//! The limit step's last act: what was decided becomes the request's `Admission` (the
//! report behind the rate-limit headers, the leaky-bucket delay, the access log's
//! decision; `Check::end` adds the permits), and every decision is counted and, for shadow
//! denials, logged.

use crate::admission::{Admit, Decision, PolicyReport};
use crate::algorithm::Verdict;
use crate::ask::{Ask, Decided as AskDecided};
use crate::check::Check;
use crate::clock::Nanos;
use crate::metrics::PolicyOutcome;
use crate::policy::{AnyAlgorithm, PolicyRuntime};
use crate::spec::{KeyPart, Mode};

/// What the asks decided, for the request's [`Admission`].
pub(crate) struct Reported {
    /// The enforcing policies that applied, in the route's order.
    pub report: Vec<PolicyReport>,
    /// The longest leaky-bucket delay an enforcing policy asked for (0: none).
    pub delay: Nanos,
    /// Which policy and key decided (the outcome is the answer's: `Admission::new`).
    pub decision: Decision,
    /// How the request was admitted, by the deciding ask: `None` when an enforcing policy
    /// denied it.
    pub admitted_as: Option<Admit>,
}

/// The deciding ask so far: its rank (an enforcing denial 3, a shadow denial 2, a delay 1,
/// else 0), its delay, its index and its `retry_after`.
type Deciding = (u8, u64, usize, Option<Nanos>);

impl Check<'_> {
    /// Metrics, shadow logs and the report of what was decided. Last: the deciding key is
    /// moved out for the access log.
    pub(crate) fn report(&mut self) -> Reported {
        // Sized once: grown from empty, its first push cost a reallocation's path.
        let (mut report, mut delay) = (Vec::with_capacity(self.asks.len()), 0);
        // The deciding ask, by rank: an enforcing denial, a shadow denial, the longest
        // delay, the first that applied (`decision`).
        let mut deciding: Option<Deciding> = None;
        for (i, ask) in self.asks.iter().enumerate() {
            let Some(d) = ask.decided else { continue };
            let policy = &self.sites.policies[ask.entry.policy];
            let counters = &self.route.counters[ask.slot];
            if d.error_open {
                counters.count_store_error(true);
                continue;
            }
            let outcome = match (d.admitted(), ask.entry.mode) {
                (true, _) => PolicyOutcome::Allow,
                (false, Mode::Shadow) => PolicyOutcome::ShadowDeny,
                (false, _) => PolicyOutcome::Deny,
            };
            let (rank, wait) = match (outcome, d.verdict) {
                (PolicyOutcome::Deny, _) => (3, 0),
                (PolicyOutcome::ShadowDeny, _) => (2, 0),
                (_, Verdict::Delay(delay)) if delay > 0 => (1, delay),
                _ => (0, 0),
            };
            let retry = match d.verdict {
                Verdict::Deny { retry_after } if outcome == PolicyOutcome::Deny => {
                    Some(retry_after.max(1))
                }
                _ => None,
            };
            if deciding.is_none_or(|(r, w, ..)| (rank, wait) > (r, w)) {
                deciding = Some((rank, wait, i, retry));
            }
            counters.count(outcome);
            let (key, shown) = (&ask.key, ask.shown.as_deref());
            (self.sites.top).record(ask.entry.policy, key, shown, outcome, ask.entry.mode);
            if outcome == PolicyOutcome::ShadowDeny {
                self.sites
                    .log_shadow_denial(policy, self.route_name, &ask.key);
            }
            if !ask.enforcing() {
                continue;
            }
            if let Verdict::Delay(d) = d.verdict {
                delay = delay.max(d);
            }
            report.push(policy_report(policy, ask, d));
        }
        let admitted_as = match deciding {
            None | Some((0, ..)) => Some(Admit::Allow),
            Some((1, ..)) => Some(Admit::Delay),
            Some((2, ..)) => Some(Admit::ShadowDeny),
            Some(_) => None,
        };
        Reported {
            report,
            delay,
            decision: self.decision(deciding),
            admitted_as,
        }
    }

    /// The access log's decision: the deciding ask's policy and key, and the other asks'
    /// keys (moved out: the request is done with them).
    fn decision(&mut self, deciding: Option<Deciding>) -> Decision {
        let Some((_, _, i, retry_after)) = deciding else {
            return Decision::default();
        };
        let others = (self.asks.iter_mut().enumerate())
            .filter(|(j, a)| *j != i && a.decided.is_some())
            .map(|(_, a)| std::mem::take(&mut a.key))
            .collect();
        let ask = &mut self.asks[i];
        Decision {
            policy: Some(self.sites.policies[ask.entry.policy].label.clone()),
            site: Some(ask.entry.site.name()),
            key: Some(std::mem::take(&mut ask.key)),
            retry_after,
            others,
            ..Decision::default()
        }
    }
}

/// What enforcing policy `policy` said of `ask`, for the RateLimit headers.
fn policy_report(policy: &PolicyRuntime, ask: &Ask, d: AskDecided) -> PolicyReport {
    let retry_after = match d.verdict {
        Verdict::Allow | Verdict::Delay(_) => None,
        Verdict::Deny { retry_after } => Some(retry_after.max(1)),
    };
    let algorithm = policy.algorithm(ask.headroom);
    PolicyReport {
        name: policy.label.clone(),
        quota: algorithm.quota(),
        remaining: d.remaining,
        reset_after: d.reset_after,
        next_after: d
            .next_after
            .unwrap_or_else(|| next_from_reply(algorithm, d.reset_after)),
        retry_after,
        partition: partition(&policy.key, &ask.key),
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
/// keys. The parts are split at `:` (a byte search) rather than searched for `":acct:"`:
/// the substring searcher's setup and scan cost ~630 instructions a request (callgrind,
/// an account-keyed policy), more than the rest of the report.
fn partition(parts: &[KeyPart], key: &str) -> Option<[u8; 16]> {
    if !parts.contains(&KeyPart::Account) {
        return None;
    }
    // The first part is the policy's name; the hash follows the first `acct` part after it.
    let mut after = key.split(':').skip(1).skip_while(|p| *p != "acct");
    after.next()?;
    let hex = after.next()?.get(..32)?;
    let mut out = [0u8; 16];
    hex::decode_to_slice(hex, &mut out).ok()?;
    Some(out)
}
