//! N of the L/N split on the running limiter: the `split` policies and the store-outage
//! fallback decide on a node's share, and membership (or the fleet's live peers) says how
//! many nodes share. One lock orders a change of N against a reload's swap.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use super::Limiter;
use crate::route_limits::Site;
use crate::spec::OnStoreError;

impl Limiter {
    /// Held across a reload and the swap of its limiter (`server/reload.rs`): a change of
    /// N ([`set_running_nodes`]) then lands on the limiter that runs, never on one about
    /// to be replaced by a limiter built at the old N.
    pub fn nodes_lock(&self) -> Arc<Mutex<()>> {
        self.nodes_lock.clone()
    }

    /// Rescale every L/N split (the `split` policies and the store-outage fallback) to
    /// `nodes`; whether anything changed. Called through [`set_running_nodes`].
    fn set_nodes(&self, nodes: NonZeroU32) -> bool {
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
    pub fn decides_on_nodes(&self) -> bool {
        self.routes.iter().any(|r| {
            r.on_store_error == OnStoreError::Local
                || r.entries.iter().any(|e| e.site == Site::Split)
        })
    }

    /// Membership's wake-up. While N decides nothing membership beats every ten
    /// heartbeats, so N may be that old; a reload that makes N decide notifies it
    /// (`server/reload.rs`) and it beats at once: the new split runs on the stale N for one
    /// store round trip, not up to a heartbeat (a node that started alone and stayed idle
    /// while two more joined took L/1 for that heartbeat: a hostile review's finding).
    pub fn beat_now(&self) -> Arc<tokio::sync::Notify> {
        self.beat_now.clone()
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

/// Membership (or the fleet's live peers) says `nodes` gateways share the limits: set N on
/// the running limiter, under its nodes lock ([`Limiter::nodes_lock`]). Returns whether
/// anything changed. (Set on a limiter loaded before a reload swapped it out, the new one
/// would keep the old N on tables it shares with the old.)
pub fn set_running_nodes(running: &arc_swap::ArcSwap<Limiter>, nodes: NonZeroU32) -> bool {
    let lock = running.load().nodes_lock();
    let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
    running.load().set_nodes(nodes)
}
