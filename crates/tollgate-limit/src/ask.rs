//! One applicable policy of one request as the limit step walks it ([`Ask`]: its key, its
//! site, what was decided and what it spent), and the all-or-nothing rule every site
//! shares ([`keeps`]).

use std::net::SocketAddr;
use std::num::NonZeroU32;

use super::algorithm::Verdict;
use super::clock::Nanos;
use super::route_limits::PolicyEntry;
use super::site::central::{CentralItem, CentralResult};
use super::site::fleet::{KeyItem, OwnerReply};
use super::site::lease::LeaseItem;
use super::site::local::{ItemResult, Spends};
use crate::spec::Mode;

/// **The all-or-nothing rule.** A request spends only if every enforcing policy allows it;
/// a shadow (or other non-enforcing) policy spends only if every policy, shadow ones too,
/// allows it, so that shadow mode never changes what the enforcing policies see. The local
/// site applies it under its shard locks ([`local_spends`]), the cluster check across slot
/// groups, the check's end to store and lease spends; `check.lua` applies the same rule to
/// the keys of one script call.
pub fn keeps(mode: Mode, enforce_ok: bool, all_ok: bool) -> bool {
    enforce_ok && (all_ok || mode == Mode::Enforce)
}

/// One applicable policy of this request.
pub(super) struct Ask {
    pub entry: PolicyEntry,
    /// Position in the route's entries (and counters).
    pub slot: usize,
    pub key: String,
    pub headroom: NonZeroU32,
    /// Cells this request spends (the policy's `cost`, or its `cost_header`).
    pub cost: u32,
    /// No request of this policy could cost less: a denial may be remembered for the key.
    pub cheapest: bool,
    /// `request_bytes` with a streamed body: the bytes are debited at the response head.
    pub streamed: bool,
    /// What its site decided; `None` until then (and for a store failure on `local`
    /// fallback, until step 4).
    pub decided: Option<Decided>,
    /// What it spent outside this node's local state: undone if the request ends denied,
    /// or if it is a shadow policy and another policy would deny.
    pub spent: Spent,
    /// Central, admitted, and left too empty for the next request: remembered as denied
    /// until `.0` (full at `.1`; the call was sent at `.2`) once the request keeps its spend.
    pub empty: Option<(Nanos, Nanos, Nanos)>,
    /// The store could not decide it and the route falls back to the L/N split: step 4
    /// decides it, and what it spends there is owed to the store.
    pub fallback: bool,
    /// The key with the policy's `show_values` parts in clear: the label the top-keys
    /// summaries show for `key`, which they count under (`keys/shown.rs`); `None` without
    /// `show_values`.
    pub shown: Option<Box<str>>,
}

impl Ask {
    pub fn new(
        entry: PolicyEntry,
        slot: usize,
        key: String,
        headroom: NonZeroU32,
        price: super::cost::Price,
    ) -> Self {
        Ask {
            entry,
            slot,
            key,
            headroom,
            cost: price.cost,
            cheapest: price.cheapest,
            streamed: price.streamed,
            decided: None,
            spent: Spent::Nothing,
            empty: None,
            fallback: false,
            shown: None,
        }
    }

    pub fn enforcing(&self) -> bool {
        self.entry.mode == Mode::Enforce
    }

    /// An enforcing policy that denied.
    pub fn blocks(&self) -> bool {
        self.enforcing() && self.decided.is_some_and(|d| !d.admitted())
    }
}

/// A spend at the store or the lease books.
#[derive(Default)]
pub(super) enum Spent {
    #[default]
    Nothing,
    Central(CentralItem),
    Lease(LeaseItem),
    /// Reserved at this owner (another node).
    Owner(SocketAddr, KeyItem),
}

/// What was decided for one policy.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decided {
    /// Allowed, allowed after a leaky-bucket delay, or denied with its retry-after.
    pub verdict: Verdict,
    /// Spent (and not refunded).
    pub committed: bool,
    pub remaining: u64,
    pub reset_after: Nanos,
    /// Until `remaining` grows by one, when the site knows it (local decisions, leases, the
    /// store's script, an owner's admission); `None` for denials, whose `t` is their wait,
    /// and from a failed decision: the report then derives it from the policy's rate.
    pub next_after: Option<Nanos>,
    /// The store failed and the route fails open: allowed without a decision.
    pub error_open: bool,
}

impl Decided {
    pub fn admitted(&self) -> bool {
        self.verdict.admits()
    }

    /// Denied, retry after `retry_after`, nothing spent.
    pub fn denied(retry_after: Nanos, remaining: u64, reset_after: Nanos) -> Self {
        Decided {
            verdict: Verdict::Deny { retry_after },
            committed: false,
            remaining,
            reset_after,
            next_after: None,
            error_open: false,
        }
    }

    /// Allowed without a decision (the store failed, the route fails open).
    pub fn error_open() -> Self {
        Decided {
            verdict: Verdict::Allow,
            committed: false,
            remaining: 0,
            reset_after: 0,
            next_after: None,
            error_open: true,
        }
    }

    pub fn from_local(r: &ItemResult) -> Self {
        Decided {
            verdict: r.decision.verdict,
            committed: r.committed,
            remaining: r.snapshot.remaining,
            reset_after: r.snapshot.reset_after,
            next_after: Some(r.snapshot.next_after),
            error_open: false,
        }
    }

    /// An owner's answer (never `Unknown`: the site turns that into an error).
    pub fn from_owner(a: OwnerReply) -> Self {
        match a {
            OwnerReply::Admitted {
                remaining,
                reset_after,
                wait,
                next_after,
            } => Decided {
                verdict: if wait == 0 {
                    Verdict::Allow
                } else {
                    Verdict::Delay(wait)
                },
                committed: true,
                remaining,
                reset_after,
                next_after: Some(next_after),
                error_open: false,
            },
            OwnerReply::Denied {
                remaining,
                reset_after,
                retry_after,
            } => Decided::denied(retry_after, remaining, reset_after),
            OwnerReply::Unknown => Decided::error_open(),
        }
    }

    pub fn from_central(r: &CentralResult) -> Self {
        let verdict = match (r.admitted, r.wait) {
            (true, 0) => Verdict::Allow,
            (true, delay) => Verdict::Delay(delay),
            (false, retry_after) => Verdict::Deny { retry_after },
        };
        Decided {
            verdict,
            committed: r.committed,
            remaining: r.remaining,
            reset_after: r.reset_after,
            next_after: Some(r.next_after),
            error_open: false,
        }
    }
}

/// Step 4's spends: [`keeps`] over this step's own items, counting what the store already
/// decided (`outside_*`); a local-first mirror spends whenever the request is admitted and
/// it admits (it counts what the store admitted).
pub(super) fn local_spends(
    ds: &[Verdict],
    modes: &[Mode],
    mirror: &[bool],
    outside_enforce_ok: bool,
    outside_all_ok: bool,
) -> Spends {
    let own = || (0..ds.len()).filter(|&i| !mirror[i]);
    let enforce_ok =
        outside_enforce_ok && own().all(|i| ds[i].admits() || modes[i] != Mode::Enforce);
    let all_ok = outside_all_ok && own().all(|i| ds[i].admits());
    (0..ds.len())
        .map(|i| match mirror[i] {
            false => keeps(modes[i], enforce_ok, all_ok),
            true => enforce_ok && ds[i].admits(),
        })
        .collect()
}
