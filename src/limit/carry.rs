//! What a config reload did to each policy's state, as the reload's log lines and the admin
//! answer say it. The local tables' part is decided in `local_reload.rs` ([`Carry`]); this
//! adds where the state lives elsewhere: a policy that moved between this process and the
//! store starts over, and a store policy's keys are read by the store's script with the
//! new numbers.

use std::sync::Arc;

use super::local::Carry;
use crate::config::{AlgorithmName, Policy, Site};

/// One policy of the reloaded config and what its keys kept.
#[derive(Debug, Clone)]
pub struct PolicyCarry {
    pub policy: Arc<str>,
    /// `kept`, `new`, `converted (N keys)`, `reset (…)`, or `store: …`.
    pub state: String,
}

/// Where a policy's keys live: in this process (`local`, `split`, `owner`, `gossip` all
/// decide in the local tables), or in the store.
fn in_store(p: &Policy, store: bool) -> bool {
    store && matches!(p.site, Site::Central | Site::Lease)
}

/// The state line for `new`, given the policy of that name before (if any) and the local
/// tables' outcome.
pub fn describe(old: Option<&Policy>, new: &Policy, local: Carry, store: bool) -> String {
    let Some(old) = old else {
        return local.to_string();
    };
    if in_store(old, store) != in_store(new, store) {
        return "reset (its site changed: the state stays where it was)".to_string();
    }
    if !in_store(new, store) {
        return local.to_string();
    }
    let numbers = |p: &Policy| (p.algorithm, p.limit, p.period, p.burst, p.max_delay);
    let line = if old.key != new.key {
        "store: reset (its key changed)"
    } else if old.algorithm != new.algorithm {
        "store: reset (another algorithm: the script reads the old state as full)"
    } else if new.algorithm == AlgorithmName::SlidingWindow && old.period != new.period {
        "store: reset (another window)"
    } else if numbers(old) == numbers(new) {
        "store: kept"
    } else {
        "store: read with the new numbers"
    };
    line.to_string()
}
