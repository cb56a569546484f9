//! N of the L/N split on the running limiter: the `split` policies and the store-outage
//! fallback decide on a node's share, and membership (or the fleet's live peers) says how
//! many nodes share. Who sets N, and the lock that orders it against a reload's swap, is
//! the handle's (`handle/running.rs`).

use std::num::NonZeroU32;

use super::Limiter;
use crate::spec::OnStoreError;
use crate::spec::Site;

impl Limiter {
    /// Rescale every L/N split (the `split` policies and the store-outage fallback) to
    /// `nodes`; whether anything changed. Called only on the running limiter, under the
    /// handle's nodes lock (`handle/running.rs`).
    pub(crate) fn set_nodes(&self, nodes: NonZeroU32) -> bool {
        let mut changed = false;
        for p in self.sites.policies.iter() {
            if self.sites.local.rescale_split(p, nodes) {
                changed = true;
            }
        }
        self.nodes_gauge.set(i64::from(nodes.get()));
        changed
    }

    /// Whether N decides anything on this node: a `split` policy, or a route that falls
    /// back to its L/N share while the store is down. Without either, membership beats
    /// seldom (`membership/beats.rs`, `IDLE_BEATS`): a lease or central fleet is not charged
    /// a store call a node a heartbeat for a count nothing reads.
    pub(crate) fn decides_on_nodes(&self) -> bool {
        self.routes.iter().any(|r| {
            r.on_store_error == OnStoreError::Local
                || r.entries.iter().any(|e| e.site == Site::Split)
        })
    }

    /// N of the L/N split now: `tollgate_cluster_nodes`, the one record of it (set at start
    /// to `expected_nodes`, then by membership; shared by a reloaded limiter, which starts
    /// its policies at it even when the config before had none).
    pub fn nodes(&self) -> NonZeroU32 {
        u32::try_from(self.nodes_gauge.get())
            .ok()
            .and_then(NonZeroU32::new)
            .unwrap_or(NonZeroU32::MIN)
    }
}
