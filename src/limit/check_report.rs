//! The limit step's last act: what was decided becomes the request's [`Admission`] (the
//! report behind the rate-limit headers, the leaky-bucket delay, the permits), and every
//! decision is counted and, for shadow denials, logged.

use super::admission::{Admission, PolicyReport};
use super::algorithm::Verdict;
use super::check::Check;
use super::metrics::Outcome;
use super::permit::Permits;
use crate::config::{KeyPart, Mode};

impl Check<'_> {
    /// Metrics, shadow logs and the report of what was decided.
    pub(super) fn report(&self, permits: Permits) -> Admission {
        let mut admission = Admission {
            permits,
            ..Admission::default()
        };
        for ask in &self.asks {
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
            counters.count(outcome);
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
            admission.report.push(PolicyReport {
                name: policy.name.clone(),
                quota: policy.algorithm(ask.headroom).quota(),
                remaining: d.remaining,
                reset_after: d.reset_after,
                retry_after,
                partition: partition(&policy.key, &ask.key),
            });
        }
        if admission.denied {
            admission.delay = 0;
            admission.permits = Permits::default();
        }
        admission
    }
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
