//! The limit step's last act: what was decided becomes the request's [`Admission`] (the
//! report behind the rate-limit headers, the leaky-bucket delay, the permits), and every
//! decision is counted and, for shadow denials, logged.

use std::sync::Arc;

use super::admission::{Admission, PolicyReport};
use super::decided::{Decided, Pending};
use super::limiter::Limiter;
use super::metrics::Outcome;
use super::permit::Permits;
use crate::config::Mode;

impl Limiter {
    /// Metrics, shadow logs and the report of what was decided.
    pub(super) fn finish(
        &self,
        route: usize,
        route_name: &Arc<str>,
        pending: &[Pending],
        decided: &[Option<Decided>],
        permits: Permits,
    ) -> Admission {
        let mut admission = Admission {
            permits,
            ..Admission::default()
        };
        for (p, d) in pending.iter().zip(decided) {
            let Some(d) = d else { continue };
            let policy = &self.policies[p.entry.policy];
            let counters = &self.plans[route].counters[p.slot];
            if d.error_open {
                counters.count_store_error(true);
                continue;
            }
            let outcome = match (d.admitted, p.entry.mode) {
                (true, _) => Outcome::Allow,
                (false, Mode::Shadow) => Outcome::ShadowDeny,
                (false, _) => Outcome::Deny,
            };
            counters.count(outcome);
            if outcome == Outcome::ShadowDeny {
                self.log_shadow_denial(policy, route_name, &p.key);
            }
            if p.entry.mode != Mode::Enforce {
                continue;
            }
            let retry_after = (!d.admitted).then_some(d.wait.max(1));
            if d.admitted {
                admission.delay = admission.delay.max(d.wait);
            }
            admission.denied |= retry_after.is_some();
            admission.report.push(PolicyReport {
                name: policy.name.clone(),
                quota: policy.algorithm(p.headroom).quota(),
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
