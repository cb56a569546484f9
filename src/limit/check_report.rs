//! The limit step's last act: what was decided becomes the request's [`Admission`] (the
//! report behind the rate-limit headers, the leaky-bucket delay, the permits), and every
//! decision is counted and, for shadow denials, logged.

use super::admission::{Admission, PolicyReport};
use super::algorithm::Verdict;
use super::check::Check;
use super::metrics::Outcome;
use super::permit::Permits;
use crate::config::Mode;

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
            });
        }
        if admission.denied {
            admission.delay = 0;
            admission.permits = Permits::default();
        }
        admission
    }
}
