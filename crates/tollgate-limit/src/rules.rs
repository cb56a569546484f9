//! What makes a policy mean something, whoever builds it: the rules about the limiter's own
//! meaning (a cost the state can pay, a site the algorithm can be decided at, a lease's
//! batch and lifetimes), written once here. The gateway's config validation calls them where it
//! checks a `[policies.NAME]` table and prints each [`SpecError`] with the file and key, as
//! `tollgate check` always has; [`Policy::check`] and [`LimiterSpec::validate`] run them
//! all on a spec built in code (`in_code.rs`), as governor's `Quota` cannot be built
//! invalid. What only a file can get wrong (a duration's spelling, an unknown field) stays
//! the gateway's.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::spec::{AlgorithmName, LimiterSpec, MIN_PERIOD, Policy, Site};

/// A spec part that means nothing, named as `tollgate check` names the key:
/// `{place}.{field}: {detail}` (`policies.login.cost: 5 is more than …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}.{field}: {detail}")]
pub struct SpecError {
    /// The table: `policies.NAME`, `routes.NAME`.
    pub place: String,
    /// The key within it: `cost`, `period`, `algorithm`.
    pub field: &'static str,
    /// What is wrong, as `tollgate check` says it after the key.
    pub detail: String,
}

impl SpecError {
    /// The error of policy `policy`'s `field`.
    pub(crate) fn policy(policy: &str, field: &'static str, detail: impl Into<String>) -> Self {
        SpecError {
            place: format!("policies.{policy}"),
            field,
            detail: detail.into(),
        }
    }
}

/// Only gcra and token_bucket have a burst; the others hold `limit` (or one slot).
pub fn is_bursty(algorithm: AlgorithmName) -> bool {
    matches!(algorithm, AlgorithmName::Gcra | AlgorithmName::TokenBucket)
}

/// A cost no full state can pay would deny every request forever: `cost` must fit in the
/// burst (gcra, token_bucket) or the limit (the others). The error is the `cost` field's.
pub fn cost_fits(
    algorithm: AlgorithmName,
    limit: NonZeroU32,
    burst: NonZeroU32,
    cost: NonZeroU32,
) -> Result<(), (&'static str, String)> {
    let (what, cap) = if is_bursty(algorithm) {
        ("burst", burst)
    } else {
        ("limit", limit)
    };
    if cost > cap {
        return Err((
            "cost",
            format!("{cost} is more than the {what} ({cap}): no request could ever pass"),
        ));
    }
    Ok(())
}

/// `local_first` saves a store call: only a central policy makes one. The error is the
/// `local_first` field's.
pub fn local_first_fits(site: Site, local_first: bool) -> Result<(), (&'static str, String)> {
    if local_first && site != Site::Central {
        return Err((
            "local_first",
            "only central policies have a store call to save".into(),
        ));
    }
    Ok(())
}

/// The peer sites carry whole cells between nodes (an owner's reservation given back, a
/// gossiped delta applied): only the rate algorithms can take cells spent elsewhere. The
/// error is the `algorithm` field's.
pub fn peer_algorithm_fits(
    site: Site,
    algorithm: AlgorithmName,
) -> Result<(), (&'static str, String)> {
    let site = match site {
        Site::Owner | Site::Gossip => site.name(),
        _ => return Ok(()),
    };
    if !matches!(
        algorithm,
        AlgorithmName::Gcra | AlgorithmName::TokenBucket | AlgorithmName::SlidingWindow
    ) {
        return Err((
            "algorithm",
            format!(
                "{} cannot be decided at site \"{site}\": only gcra, token_bucket and \
                 sliding_window can count cells another node spent (a concurrency slot or a \
                 queued request lives in one process; use site = \"local\" or \"central\")",
                algorithm.name()
            ),
        ));
    }
    Ok(())
}

/// Leases hand out GCRA cells (a token bucket is the same quota, so it leases too). The
/// error is the `site` field's.
pub fn lease_algorithm_fits(
    site: Site,
    algorithm: AlgorithmName,
) -> Result<(), (&'static str, String)> {
    if site == Site::Lease && !is_bursty(algorithm) {
        return Err((
            "site",
            format!(
                "{} cannot be leased: leases hand out GCRA cells (use gcra or token_bucket)",
                algorithm.name()
            ),
        ));
    }
    Ok(())
}

/// The most cells a lease batch may carry (`lease_max`).
pub const MAX_LEASE_BATCH: u64 = 100_000;

/// The longest a leased cell lives, and the longest batch target (`lease_ttl`,
/// `lease_target`).
pub const MAX_LEASE_SPAN: Duration = Duration::from_secs(3600);

/// `lease_max`: 1 to [`MAX_LEASE_BATCH`] cells a batch. The error is the `lease_max`
/// field's.
pub fn lease_max_fits(max: u64) -> Result<NonZeroU32, (&'static str, String)> {
    match u32::try_from(max).ok().and_then(NonZeroU32::new) {
        Some(m) if u64::from(m.get()) <= MAX_LEASE_BATCH => Ok(m),
        _ => Err((
            "lease_max",
            format!("{max} is out of range: use 1 to {MAX_LEASE_BATCH}"),
        )),
    }
}

/// `lease_ttl` and `lease_target` (`field`): 1ms to [`MAX_LEASE_SPAN`].
pub fn lease_span_fits(field: &'static str, span: Duration) -> Result<(), (&'static str, String)> {
    if !(MIN_PERIOD..=MAX_LEASE_SPAN).contains(&span) {
        return Err((field, "must be at least 1ms and at most 1h".into()));
    }
    Ok(())
}

/// A batch must be spent before its cells expire: `lease_target` at most `lease_ttl`. The
/// error is the `lease_target` field's.
pub fn lease_target_fits(ttl: Duration, target: Duration) -> Result<(), (&'static str, String)> {
    if target > ttl {
        return Err((
            "lease_target",
            format!(
                "{target:?} is longer than lease_ttl ({ttl:?}): batches would expire before they are spent"
            ),
        ));
    }
    Ok(())
}

impl Policy {
    /// Every rule of this file on this policy: the first it breaks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_limit::spec::{AlgorithmName, KeyPart, Policy, Site};
    ///
    /// let mut p = Policy::new("p", vec![KeyPart::Ip], AlgorithmName::SlidingWindow, 5, Duration::from_secs(1))?;
    /// p.site = Site::Lease;
    /// let err = p.check().unwrap_err();
    /// assert_eq!(err.to_string(), "policies.p.site: sliding_window cannot be leased: leases hand out GCRA cells (use gcra or token_bucket)");
    /// # Ok::<(), tollgate_limit::SpecError>(())
    /// ```
    pub fn check(&self) -> Result<(), SpecError> {
        cost_fits(self.algorithm, self.limit, self.burst, self.cost)
            .and_then(|()| local_first_fits(self.site, self.local_first))
            .and_then(|()| peer_algorithm_fits(self.site, self.algorithm))
            .and_then(|()| lease_algorithm_fits(self.site, self.algorithm))
            .and_then(|()| lease_max_fits(self.lease.max.get().into()).map(drop))
            .and_then(|()| lease_span_fits("lease_ttl", self.lease.ttl))
            .and_then(|()| lease_span_fits("lease_target", self.lease.target))
            .and_then(|()| lease_target_fits(self.lease.ttl, self.lease.target))
            .map_err(|(field, detail)| SpecError::policy(&self.name, field, detail))
    }
}

impl LimiterSpec {
    /// Every policy's [`Policy::check`]: the first rule a policy breaks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_limit::spec::{AlgorithmName, KeyPart, LimiterSpec, Policy};
    ///
    /// let mut p = Policy::new("p", vec![KeyPart::Ip], AlgorithmName::Gcra, 5, Duration::from_secs(1))?;
    /// p.cost = 6.try_into().unwrap();
    /// let err = LimiterSpec::in_memory(vec![p]).validate().unwrap_err();
    /// assert_eq!(err.to_string(), "policies.p.cost: 6 is more than the burst (5): no request could ever pass");
    /// # Ok::<(), tollgate_limit::SpecError>(())
    /// ```
    pub fn validate(&self) -> Result<(), SpecError> {
        self.policies.iter().try_for_each(Policy::check)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::spec::{AlgorithmName, KeyPart, Policy, Site};

    fn lease(algorithm: AlgorithmName) -> Policy {
        let second = Duration::from_secs(1);
        let mut p = Policy::new("p", vec![KeyPart::Ip], algorithm, 10, second).unwrap();
        p.site = Site::Lease;
        p
    }

    #[test]
    fn a_lease_policy_is_checked_as_check_checks_a_file() {
        assert_eq!(lease(AlgorithmName::Gcra).check(), Ok(()));
        let mut p = lease(AlgorithmName::Gcra);
        p.lease.target = Duration::from_millis(80);
        assert_eq!(
            p.check().unwrap_err().to_string(),
            "policies.p.lease_target: 80ms is longer than lease_ttl (50ms): batches would \
             expire before they are spent"
        );
        let mut p = lease(AlgorithmName::TokenBucket);
        p.lease.ttl = Duration::from_secs(7200);
        assert_eq!(
            p.check().unwrap_err().to_string(),
            "policies.p.lease_ttl: must be at least 1ms and at most 1h"
        );
    }

    #[test]
    fn local_first_off_central_and_concurrency_at_a_peer_site_are_refused() {
        let second = Duration::from_secs(1);
        let mut p = Policy::new("p", vec![KeyPart::Ip], AlgorithmName::Gcra, 5, second).unwrap();
        p.local_first = true;
        assert_eq!(
            p.check().unwrap_err().to_string(),
            "policies.p.local_first: only central policies have a store call to save"
        );
        let mut p = Policy::new(
            "c",
            vec![KeyPart::Ip],
            AlgorithmName::Concurrency,
            5,
            Duration::ZERO,
        )
        .unwrap();
        p.site = Site::Gossip;
        let err = p.check().unwrap_err();
        assert_eq!((err.place.as_str(), err.field), ("policies.c", "algorithm"));
        assert!(
            err.detail
                .starts_with("concurrency cannot be decided at site \"gossip\"")
        );
    }
}
