//! A configured policy as the limit step uses it: its algorithm (one per headroom level),
//! its key recipe and its mode.
//!
//! Algorithms are dispatched through one enum rather than trait objects so every policy's
//! per-key state fits the same map value type: that lets one sharded store hold all
//! policies and lock a request's keys together (see `local.rs`).

use std::num::NonZeroU32;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::algorithm::QuotaError;
use super::site::lease::LeaseParams;
use crate::spec::{AlgorithmName, KeyPart, Mode, Policy, Site};

mod any;
pub use any::{AnyAlgorithm, AnyState};

/// A policy ready for the request path.
#[derive(Debug)]
pub struct PolicyRuntime {
    /// Name as written: key namespace, and header item name and metric label except for a
    /// tier's variant (`NAME@TIER`), whose `label` is its policy's name.
    pub name: Arc<str>,
    /// The name clients and dashboards see: `name` up to any `@`.
    pub label: Arc<str>,
    /// Position in the limiter's policy list; also the store's map index.
    pub index: usize,
    /// How the key is built.
    pub key: Vec<KeyPart>,
    /// Cells each request spends.
    pub cost: NonZeroU32,
    /// Overrides the route's mode when set.
    pub mode: Option<Mode>,
    /// Headroom 1 first, then each distinct shared-range headroom; only ip-keyed policies
    /// have more than one.
    pub algorithms: Vec<(NonZeroU32, AnyAlgorithm)>,
    /// Memory bound of this policy's local state.
    pub max_keys: usize,
    /// The policy as configured (the central site sends its numbers to the store).
    pub spec: Policy,
    /// The same levels at `limit / N` and `burst / N`, N from membership: what a `split`
    /// policy enforces on this node, and what a store policy falls back to when the store
    /// is down and the route says `on_store_error = "local"`. Swapped when N changes.
    split: ArcSwap<Split>,
    /// lease policies: the lease numbers at each headroom level.
    pub lease: Vec<(NonZeroU32, LeaseParams)>,
}

/// The L/N levels for one N.
#[derive(Debug)]
pub struct Split {
    pub nodes: NonZeroU32,
    pub levels: Vec<(NonZeroU32, AnyAlgorithm)>,
}

impl Split {
    /// The L/N algorithm for a client with this headroom.
    pub fn algorithm(&self, headroom: NonZeroU32) -> &AnyAlgorithm {
        level(&self.levels, headroom)
    }
}

impl PolicyRuntime {
    pub fn new(index: usize, p: &Policy, headrooms: &[NonZeroU32]) -> Result<Self, QuotaError> {
        Self::with_nodes(index, p, headrooms, NonZeroU32::MIN)
    }

    /// As [`PolicyRuntime::new`], with the fleet size its store-outage fallback divides by.
    pub fn with_nodes(
        index: usize,
        p: &Policy,
        headrooms: &[NonZeroU32],
        nodes: NonZeroU32,
    ) -> Result<Self, QuotaError> {
        let mut levels = vec![NonZeroU32::MIN];
        if gets_headroom(p) {
            for h in headrooms {
                if !levels.contains(h) {
                    levels.push(*h);
                }
            }
        }
        let algorithms = levels
            .iter()
            .map(|&h| AnyAlgorithm::new(p, h).map(|a| (h, a)))
            .collect::<Result<_, _>>()?;
        let lease = if p.site == Site::Lease {
            levels
                .iter()
                .map(|&h| {
                    LeaseParams::new(
                        p.limit.saturating_mul(h),
                        p.period,
                        p.burst.saturating_mul(h),
                        p.lease.ttl,
                        p.lease.target,
                        p.lease.max,
                    )
                    .map(|l| (h, l))
                })
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        let split = split_levels(p, &levels, nodes)?;
        Ok(PolicyRuntime {
            name: Arc::from(p.name.as_str()),
            label: Arc::from(p.name.split('@').next().unwrap_or(&p.name)),
            index,
            key: p.key.clone(),
            cost: p.cost,
            mode: p.mode,
            algorithms,
            max_keys: p.max_keys.get(),
            spec: p.clone(),
            split: ArcSwap::from_pointee(split),
            lease,
        })
    }

    /// Rescale the L/N levels for `nodes` nodes: the levels before, or `None` when N was
    /// already that.
    pub fn set_nodes(&self, nodes: NonZeroU32) -> Option<Arc<Split>> {
        if self.split.load().nodes == nodes {
            return None;
        }
        let levels: Vec<NonZeroU32> = self.algorithms.iter().map(|(h, _)| *h).collect();
        // The same quota divided by more nodes has the same period: it cannot fail.
        let s = split_levels(&self.spec, &levels, nodes).ok()?;
        Some(self.split.swap(Arc::new(s)))
    }

    /// N of the current split.
    pub fn nodes(&self) -> NonZeroU32 {
        self.split.load().nodes
    }

    /// The current L/N levels.
    pub fn split(&self) -> arc_swap::Guard<Arc<Split>> {
        self.split.load()
    }

    /// The lease numbers for a client with this headroom.
    pub fn lease_params(&self, headroom: NonZeroU32) -> Option<LeaseParams> {
        self.lease
            .iter()
            .find(|(h, _)| *h == headroom)
            .or(self.lease.first())
            .map(|(_, l)| *l)
    }

    /// The algorithm for a client with this headroom (1 when not ip-keyed).
    #[inline]
    pub fn algorithm(&self, headroom: NonZeroU32) -> &AnyAlgorithm {
        level(&self.algorithms, headroom)
    }

    /// The L/N algorithm of a `split` policy, and of a store policy while the store is
    /// unavailable.
    pub fn split_algorithm(&self, headroom: NonZeroU32) -> AnyAlgorithm {
        *self.split.load().algorithm(headroom)
    }

    /// The algorithm at headroom 1: what `RateLimit-Policy` advertises.
    pub fn base(&self) -> &AnyAlgorithm {
        &self.algorithms[0].1
    }
}

/// Whether a policy's limits grow for clients on shared addresses (CGNAT, `shared_ranges`):
/// only when its key has an `ip` part, since many people share such an address, but an
/// account (or a route, a header) behind it is still one. Every site asks this one rule.
pub fn gets_headroom(p: &Policy) -> bool {
    p.key.contains(&KeyPart::Ip)
}

/// A node's share at every headroom level: `burst / N` (at least 1: a node cannot burst
/// less than one request), and for the rate algorithms (gcra, token bucket) the exact rate
/// `limit / (N · period)`, so a limit smaller than N is not rounded up to one per period
/// per node. Sliding window, leaky bucket and concurrency have no separate burst and keep
/// their window, so they take `limit / N` (at least 1).
fn split_levels(p: &Policy, levels: &[NonZeroU32], nodes: NonZeroU32) -> Result<Split, QuotaError> {
    let share = |v: NonZeroU32| NonZeroU32::new(v.get() / nodes.get()).unwrap_or(NonZeroU32::MIN);
    let part = match p.algorithm {
        AlgorithmName::Gcra | AlgorithmName::TokenBucket => Policy {
            period: p.period.saturating_mul(nodes.get()),
            burst: share(p.burst),
            ..p.clone()
        },
        _ => Policy {
            limit: share(p.limit),
            burst: share(p.burst),
            ..p.clone()
        },
    };
    Ok(Split {
        nodes,
        levels: levels
            .iter()
            .map(|&h| AnyAlgorithm::new(&part, h).map(|a| (h, a)))
            .collect::<Result<_, _>>()?,
    })
}

#[inline]
fn level(levels: &[(NonZeroU32, AnyAlgorithm)], headroom: NonZeroU32) -> &AnyAlgorithm {
    levels
        .iter()
        .find(|(h, _)| *h == headroom)
        .map_or(&levels[0].1, |(_, a)| a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::central::CentralItem;
    use crate::spec::LeaseKnobs;
    use std::time::Duration;

    fn policy(key: KeyPart) -> Policy {
        let nz = |n| NonZeroU32::new(n).expect("non-zero");
        Policy {
            name: "p".into(),
            key: vec![key],
            algorithm: AlgorithmName::Gcra,
            limit: nz(10),
            period: Duration::from_secs(1),
            burst: nz(5),
            cost: nz(1),
            max_delay: Duration::ZERO,
            mode: None,
            max_keys: std::num::NonZeroUsize::new(64).expect("non-zero"),
            site: Site::Central,
            local_first: false,
            lease: LeaseKnobs {
                max: nz(50),
                ttl: Duration::from_millis(50),
                target: Duration::from_millis(20),
            },
            spend: Default::default(),
            on_missing_key: None,
            show_values: Vec::new(),
        }
    }

    /// The local state (and `q`) and the central item agree: 4x for ip keys only.
    #[test]
    fn only_ip_keyed_policies_get_headroom_on_every_site() {
        let four = NonZeroU32::new(4).expect("non-zero");
        for (key, limit, burst) in [(KeyPart::Ip, 40u32, 20u32), (KeyPart::Account, 10, 5)] {
            let p = policy(key);
            let rt = PolicyRuntime::new(0, &p, &[four]).expect("a valid policy");
            assert_eq!(rt.algorithm(four).quota().limit, u64::from(limit));
            let item = CentralItem::new("k".into(), &p, four.get(), 1, Mode::Enforce);
            assert_eq!(
                (item.params[1], item.params[3]),
                (f64::from(limit), f64::from(burst))
            );
        }
    }
}
