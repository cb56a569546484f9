//! What the limit step hands back to the request path, and the all-or-nothing spending rule.

use std::sync::Arc;

use super::algorithm::QuotaInfo;
use super::clock::Nanos;
use super::permit::Permits;
use crate::config::Mode;

/// What one enforcing policy says about a request, for the response headers.
#[derive(Debug, Clone)]
pub struct PolicyReport {
    /// Policy name: the header item's name.
    pub name: Arc<str>,
    /// The client's quota (with headroom): `q` and `w`.
    pub quota: QuotaInfo,
    /// `r`: requests it would admit right now.
    pub remaining: u64,
    /// `t` for allowed requests: nanoseconds until full again.
    pub reset_after: Nanos,
    /// Set when this policy denied: nanoseconds until this request would be admitted.
    pub retry_after: Option<Nanos>,
}

/// The limit step's answer for one request.
#[derive(Debug, Default)]
pub struct Admission {
    /// True when an enforcing policy denied: answer 429, do not forward.
    pub denied: bool,
    /// Set when the store could not decide and the route fails closed: answer 503 with
    /// this `Retry-After`.
    pub unavailable: Option<Nanos>,
    /// Leaky bucket: hold the request this long before forwarding.
    pub delay: Nanos,
    /// Enforcing policies that applied, in the route's order.
    pub report: Vec<PolicyReport>,
    /// Concurrency cells to give back when the response ends.
    pub permits: Permits,
    /// Set when a key part the route needs is stated ambiguously (an account header on two
    /// lines, or as a comma list): answer 400 naming it; no policy was asked.
    pub ambiguous: Option<String>,
}

/// Which items to spend, given whether each admitted and its mode: a request spends only if
/// every enforcing policy allows; shadow policies spend only when *every* policy allows, so
/// their state evolves exactly as it would once enforced.
pub fn commit_plan(admits: impl Iterator<Item = bool>, modes: &[Mode]) -> Vec<bool> {
    let admits: Vec<bool> = admits.collect();
    let enforce_ok = admits
        .iter()
        .zip(modes)
        .all(|(&a, m)| a || *m != Mode::Enforce);
    let all_ok = admits.iter().all(|&a| a);
    modes
        .iter()
        .map(|m| all_ok || (enforce_ok && *m == Mode::Enforce))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_spends_all_or_nothing() {
        use Mode::*;
        assert_eq!(
            commit_plan([true, true].into_iter(), &[Enforce, Enforce]),
            vec![true, true]
        );
        assert_eq!(
            commit_plan([true, false].into_iter(), &[Enforce, Enforce]),
            vec![false, false]
        );
        // A shadow denial never blocks the enforcing spend, and spends no shadow state.
        assert_eq!(
            commit_plan([true, false, true].into_iter(), &[Enforce, Shadow, Shadow]),
            vec![true, false, false]
        );
        assert_eq!(
            commit_plan([false, true].into_iter(), &[Enforce, Shadow]),
            vec![false, false]
        );
        assert_eq!(
            commit_plan([true, true].into_iter(), &[Enforce, Shadow]),
            vec![true, true]
        );
    }
}
