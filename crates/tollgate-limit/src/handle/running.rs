//! The running limiter and what orders changes to it: a reload's swap and a change of N
//! (membership's count, or the fleet's live peers). The handle (`mod.rs`) holds it; the
//! membership heartbeat and the fleet's loop hold it too, never the caller.

use std::num::NonZeroU32;
use std::sync::Mutex;

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::limiter::Limiter;

/// The limiter that decides now, and the two things every change to it goes through.
pub(crate) struct Running {
    /// Swapped whole by a reload; the request path loads it once per request.
    pub(crate) limiter: ArcSwap<Limiter>,
    /// Held across a reload and the swap of its limiter, and by [`Running::set_nodes`]: a
    /// reloaded limiter is built at this node's N, so a change of N must land on the limiter
    /// that runs after the swap, never on one about to be replaced by a limiter built at
    /// the old N (which would keep the old N over tables it shares with the old limiter:
    /// `tests` here, `a_change_of_n_during_a_reload_lands_on_the_new_limiter`).
    nodes_lock: Mutex<()>,
    /// Membership's wake-up. While N decides nothing membership beats every ten
    /// heartbeats (`membership/beats.rs`), so N may be that old; a reload that makes N
    /// decide notifies it and it beats at once: the new split runs on the stale N for one
    /// store round trip, not up to a heartbeat (a node that started alone and stayed idle
    /// while two more joined took L/1 for that heartbeat: a hostile review's finding).
    pub(crate) beat_now: Notify,
}

impl Running {
    pub(crate) fn new(limiter: Limiter) -> Running {
        Running {
            limiter: ArcSwap::from_pointee(limiter),
            nodes_lock: Mutex::new(()),
            beat_now: Notify::new(),
        }
    }

    /// Membership (or the fleet's live peers) says `nodes` gateways share the limits: set N
    /// on the running limiter, under the nodes lock. Whether anything changed.
    pub(crate) fn set_nodes(&self, nodes: NonZeroU32) -> bool {
        let _held = self.hold_nodes();
        self.limiter.load().set_nodes(nodes)
    }

    /// The nodes lock (a poisoned lock still orders: the unit it guards is `()`).
    pub(crate) fn hold_nodes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.nodes_lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}
