//! The pieces of one limit check: what is pending, what was decided, and the step-4 plan
//! that spends local state all-or-nothing together with what the store already decided.

use super::algorithm::{Decision, Verdict};
use super::central::CentralResult;
use super::clock::Nanos;
use super::limiter::PlanEntry;
use super::local::{ItemResult, Plan};
use super::policy::AnyState;
use crate::config::Mode;

/// One applicable policy of this request.
pub(super) struct Pending {
    pub entry: PlanEntry,
    /// Position in the route plan's entries (and counters).
    pub slot: usize,
    pub key: String,
    pub headroom: std::num::NonZeroU32,
}

/// What was decided for one policy.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Decided {
    pub admitted: bool,
    pub committed: bool,
    pub remaining: u64,
    pub reset_after: Nanos,
    /// Retry-after when denied; the leaky-bucket delay when admitted.
    pub wait: Nanos,
    /// The store failed and the route fails open: allowed without a decision.
    pub error_open: bool,
}

impl Decided {
    pub fn from_local(r: &ItemResult) -> Self {
        let (admitted, wait) = match r.decision.verdict {
            Verdict::Allow => (true, 0),
            Verdict::Delay(d) => (true, d),
            Verdict::Deny { retry_after } => (false, retry_after),
        };
        Decided {
            admitted,
            committed: r.committed,
            remaining: r.snapshot.remaining,
            reset_after: r.snapshot.reset_after,
            wait,
            error_open: false,
        }
    }

    pub fn from_central(r: &CentralResult) -> Self {
        Decided {
            admitted: r.admitted,
            committed: r.committed,
            remaining: r.remaining,
            reset_after: r.reset_after,
            wait: r.wait,
            error_open: false,
        }
    }
}

pub(super) fn any_enforce_denied(pending: &[Pending], decided: &[Option<Decided>]) -> bool {
    pending
        .iter()
        .zip(decided)
        .any(|(p, d)| p.entry.mode == Mode::Enforce && d.is_some_and(|d| !d.admitted))
}

/// Step 4's plan: the usual all-or-nothing over this step's own items, counting what the
/// store already decided; mirrors spend whenever the request is admitted.
pub(super) fn local_plan(
    ds: &[Decision<AnyState>],
    modes: &[Mode],
    mirror: &[bool],
    outside_enforce_ok: bool,
    outside_all_ok: bool,
) -> Plan {
    let own: Vec<usize> = (0..ds.len()).filter(|&i| !mirror[i]).collect();
    let enforce_ok = outside_enforce_ok
        && own
            .iter()
            .all(|&i| ds[i].verdict.admits() || modes[i] != Mode::Enforce);
    let all_ok = outside_all_ok && own.iter().all(|&i| ds[i].verdict.admits());
    let mut plan = Plan::from_elem(false, ds.len());
    for &i in &own {
        plan[i] = enforce_ok && (all_ok || modes[i] == Mode::Enforce);
    }
    for i in (0..ds.len()).filter(|i| mirror[*i]) {
        plan[i] = enforce_ok && ds[i].verdict.admits();
    }
    plan
}
