//! What a config reload did to each policy's state, as the reload's log lines and the admin
//! answer say it. The local tables' part is decided in `local/reload.rs` ([`Carry`]); this
//! adds where the state lives elsewhere: a policy that moved between this process and the
//! store starts over, and a store policy's keys are read by the store's script with the
//! new numbers.

use std::sync::Arc;

use super::site::local::Carry;
use crate::spec::{AlgorithmName, Policy, Site};

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

/// Why a reload cannot take `new` without a fresh budget, if it cannot: a `lease` policy on
/// the memory store keeps its grants in this process in units of its own rate, which other
/// numbers would misread (a spent key read as full, or a full key locked out).
pub fn refusal(old: Option<&Policy>, new: &Policy, store: bool) -> Option<String> {
    let old = old?;
    let numbers = |p: &Policy| (p.algorithm, p.limit, p.period, p.burst, p.site);
    let lease = |p: &Policy| p.site == Site::Lease;
    (!store && (lease(old) || lease(new)) && numbers(old) != numbers(new)).then(|| {
        format!(
            "policies.{}: a lease policy on the memory store cannot change its algorithm, limit, period, burst or site on reload (its grants are held in the old rate's units); restart to change it",
            new.name
        )
    })
}

/// The state line for `new`, given the policy of that name before (if any) and the local
/// tables' outcome.
pub fn describe(
    old: Option<&Policy>,
    new: &Policy,
    local: Carry,
    store: bool,
    rekeyed: bool,
) -> String {
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
    } else if rekeyed {
        "store: reset (its keys are derived differently: [client_ip] ipv6_prefix, the [account] hash key or its jwt claim changed)"
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
